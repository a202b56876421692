from __future__ import annotations

import logging
import os
import ssl
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
import trustme
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from jobnik.api.main import app_from_env
from jobnik.projections.store.base import SqlStore
from jobnik.scripts.cli import app as cli
from jobnik.workers import AccessRefused, Producer, Worker

from .conftest import SpawnServer, free_port
from .test_server_processes import POSTGRES_ONLY


def tokens(env: dict[str, str], *args: str) -> str:
    """`jobnik tokens ...`; its stdout (the secret alone, for create)."""
    result = CliRunner().invoke(cli, ["tokens", *args], env=env)
    assert result.exit_code == 0, result.output
    return result.stdout.strip()


def bearer(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


def test_the_cli_prints_a_secret_once_lists_tokens_and_revokes_them(env: dict[str, str]) -> None:
    secret = tokens(env, "create", "tiler", "--role", "worker", "--stage-type", "tiles")
    tokens(env, "create", "ci", "--role", "producer", "--expires", "30d")

    listed = tokens(env, "list")
    revoked = tokens(env, "revoke", "ci")
    again = tokens(env, "revoke", "ci")
    after = tokens(env, "list")

    assert secret.startswith("tiler.")
    assert len(secret.partition(".")[2]) >= 43
    assert secret.partition(".")[2] not in listed
    rows = {line.split()[0]: line.split() for line in listed.splitlines()[1:]}
    assert rows["tiler"][1:3] == ["worker", "active"]
    assert rows["tiler"][-1] == "tiles"
    assert rows["ci"][1:3] == ["producer", "active"]
    assert rows["ci"][4].startswith("cli:")
    assert (revoked, again) == ("token 'ci' revoked", "token 'ci' was revoked already")
    assert "revoked" in next(line for line in after.splitlines() if line.startswith("ci "))


def test_tokens_list_keeps_its_columns_aligned_whatever_their_values(
    env: dict[str, str],
) -> None:
    tokens(env, "create", "nightly-map-renderer-for-region-7", "--role", "worker")
    tokens(env, "create", "ci", "--role", "producer", "--expires", "30d")
    tokens(env, "create", "ops", "--role", "admin", "--expires", "1s")
    time.sleep(1.1)  # ops has expired

    header, *rows = tokens(env, "list").splitlines()

    starts = [header.index(title) for title in ("role", "state", "expires", "issued by", "types")]
    for row in rows:
        cells = [row[s : s + 1] for s in starts]
        assert all(c.strip() for c in cells), (header, row)  # each column starts where its title
        assert all(row[s - 1] == " " for s in starts), (header, row)
    assert "expired" in next(r for r in rows if r.startswith("ops "))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["create", "x", "--role", "boss"], "not a role"),
        (["create", "api", "--role", "admin"], "reserved"),
        (["create", "a.b", "--role", "admin"], "letters, digits"),
        (["create", "r", "--role", "reader", "--stage-type", "t"], "worker tokens only"),
        (["revoke", "nobody"], "TOKEN_NOT_FOUND"),
    ],
)
def test_the_cli_refuses_bad_tokens_saying_why(
    env: dict[str, str], store: SqlStore, args: list[str], message: str
) -> None:
    result = CliRunner().invoke(cli, ["tokens", *args], env=env)

    assert result.exit_code != 0
    assert message in result.output


def test_serve_refuses_to_run_open_off_loopback(env: dict[str, str]) -> None:
    result = CliRunner().invoke(cli, ["serve", "--host", "0.0.0.0"], env=env)

    assert result.exit_code == 2
    assert "JOBNIK_AUTH=off" in result.output
    assert "jobnik tokens create" in result.output


def test_the_api_keeps_the_last_active_admin_token_and_the_cli_may_revoke_it(
    database_url: str,
) -> None:
    env = {"JOBNIK_DATABASE_URL": database_url}
    ops = tokens(env, "create", "ops", "--role", "admin")
    tokens(env, "create", "spare", "--role", "admin")
    app = app_from_env({**env, "JOBNIK_AUTH": "tokens", "JOBNIK_SWEEP_INTERVAL": "0"})
    app.state.access.tokens.refresh = 0  # (every request sees the tokens the CLI changed)
    with TestClient(app, headers=bearer(ops)) as http:
        spare = http.delete("/v1/tokens/spare")
        last = http.delete("/v1/tokens/ops")
        tokens(env, "revoke", "ops")
        after = http.get("/v1/tokens")

    assert spare.status_code == 200
    assert (last.status_code, last.json()["code"]) == (409, "LAST_ADMIN_TOKEN")
    assert after.status_code == 401


@POSTGRES_ONLY
def test_a_revoked_token_is_refused_by_every_server_process_within_a_second(
    database_url: str, spawn_server: SpawnServer
) -> None:
    env = {"JOBNIK_DATABASE_URL": database_url}
    admin = tokens(env, "create", "ops", "--role", "admin")
    reader = tokens(env, "create", "dashboard", "--role", "reader")
    servers = [spawn_server(database_url), spawn_server(database_url)]
    for s in servers:  # each process has the token in its copy
        assert httpx.get(f"{s.url}/v1/jobs", headers=bearer(reader)).status_code == 200
        assert httpx.get(f"{s.url}/v1/jobs").status_code == 401
    feed = httpx.Client(base_url=servers[1].url, timeout=10, headers=bearer(reader))

    with feed.stream("GET", "/v1/events/stream") as stream:
        assert stream.status_code == 200
        lines = stream.iter_lines()
        assert next(line for line in lines if line.startswith("event:")) == "event: TokenIssued"
        tokens(env, "revoke", "dashboard")
        time.sleep(1.0)
        answers = [httpx.get(f"{s.url}/v1/jobs", headers=bearer(reader)) for s in servers]
        rest = list(lines)  # the stream ends (no read timeout): its token was revoked

    assert [a.status_code for a in answers] == [401, 401]
    assert all(a.json()["code"] == "UNAUTHENTICATED" for a in answers)
    assert {line for line in rest if line.startswith("event:")} <= {
        "event: TokenIssued",
        "event: TokenRevoked",
    }
    for s in servers:
        assert reader.partition(".")[2] not in s.log()
        assert admin.partition(".")[2] not in s.log()


def test_the_sdk_and_worker_send_their_token_and_never_log_it(
    database_url: str, spawn_server: SpawnServer, caplog: pytest.LogCaptureFixture
) -> None:
    env = {"JOBNIK_DATABASE_URL": database_url}
    producer_secret = tokens(env, "create", "producer", "--role", "producer")
    worker_secret = tokens(env, "create", "tiler", "--role", "worker", "--stage-type", "tiles")
    server = spawn_server(database_url, env={"JOBNIK_SWEEP_INTERVAL": "0"})
    caplog.set_level(logging.DEBUG)
    producer = Producer(server.url, token=producer_secret)
    job = producer.create_job("tokened", {})
    stage = producer.create_stage(job.id, "tiles", {})
    producer.create_tasks(stage.id, [{"n": 1}])
    done: list[object] = []
    worker = Worker(
        "tiles",
        lambda task, ctx: done.append(task.id),
        base_url=server.url,
        token=worker_secret,
        heartbeat_interval=0.2,
    )

    runner = threading.Thread(target=worker.run, kwargs={"install_signal_handlers": False})
    runner.start()
    deadline = time.monotonic() + 30
    while not done and time.monotonic() < deadline:
        time.sleep(0.05)
    worker.stop()
    runner.join(30)

    assert len(done) == 1
    history = httpx.get(
        f"{server.url}/v1/jobs/{job.id}/history", headers=bearer(producer_secret)
    ).json()["items"]
    actors = {e["type"]: e["actor"] for e in history}
    assert (actors["JobCreated"], actors["TaskDequeued"]) == ("producer", "tiler")
    for secret in (producer_secret, worker_secret):
        assert secret.partition(".")[2] not in caplog.text
        assert secret.partition(".")[2] not in server.log()


def test_a_handler_refused_its_call_hands_its_task_back_untouched_and_stops_the_worker(
    database_url: str, spawn_server: SpawnServer
) -> None:
    env = {"JOBNIK_DATABASE_URL": database_url}
    producer_secret = tokens(env, "create", "producer", "--role", "producer")
    worker_secret = tokens(env, "create", "tiler", "--role", "worker", "--stage-type", "tiles")
    server = spawn_server(database_url, env={"JOBNIK_SWEEP_INTERVAL": "0"})
    producer = Producer(server.url, token=producer_secret)
    job = producer.create_job("forbidden", {})
    stage = producer.create_stage(job.id, "tiles", {})
    created = producer.create_tasks(stage.id, [{"n": 1}, {"n": 2}])
    worker = Worker(
        "tiles",
        lambda task, ctx: ctx.update_task_user_metadata({"at": 1}),  # not a worker's to do
        base_url=server.url,
        token=worker_secret,
        concurrency=2,
    )
    raised: list[Exception] = []

    def run() -> None:
        try:
            worker.run(install_signal_handlers=False)
        except AccessRefused as exc:
            raised.append(exc)

    runner = threading.Thread(target=run)
    runner.start()
    runner.join(30)
    worker.stop()
    runner.join(30)
    worker.consumer.client.close()
    producer.client.close()
    tasks = [
        httpx.get(f"{server.url}/v1/tasks/{t.id}", headers=bearer(producer_secret)).json()
        for t in created
    ]

    assert [type(e) for e in raised] == [AccessRefused]
    assert [(t["status"], t["attempts"]) for t in tasks] == [("PENDING", 0)] * 2
    assert any(t["attempt"] for t in tasks)  # dequeued, then handed back: no attempt spent


def test_serve_speaks_tls_with_the_certificate_it_is_given(
    tmp_path: Path, env: dict[str, str]
) -> None:
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    certfile, keyfile, cafile = tmp_path / "cert.pem", tmp_path / "key.pem", tmp_path / "ca.pem"
    cert.private_key_and_cert_chain_pem.write_to_path(str(certfile))
    cert.private_key_pem.write_to_path(str(keyfile))
    ca.cert_pem.write_to_path(str(cafile))
    log = (tmp_path / "serve.log").open("wb")
    trusted = ssl.create_default_context(cafile=str(cafile))
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from jobnik.scripts.cli import main; main()",
            "serve",
            "--port",
            str(port),
            "--ssl-certfile",
            str(certfile),
            "--ssl-keyfile",
            str(keyfile),
        ],
        env={**os.environ, **env, "JOBNIK_SWEEP_INTERVAL": "0"},
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        answer = None
        deadline = time.monotonic() + 60
        while answer is None and time.monotonic() < deadline and proc.poll() is None:
            try:
                answer = httpx.get(f"https://127.0.0.1:{port}/liveness", verify=trusted)
            except httpx.ConnectError:
                time.sleep(0.1)
        assert answer is not None, (tmp_path / "serve.log").read_text()
        assert answer.status_code == 200
        with pytest.raises(httpx.HTTPError):
            httpx.get(f"http://127.0.0.1:{port}/liveness")  # no plain HTTP on that port
    finally:
        proc.terminate()
        proc.wait(15)
        log.close()
