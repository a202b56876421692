"""The real server as a subprocess: concurrency over HTTP, N processes behaving as one, start-up.

Every server here is `python -m uvicorn jobnik.scripts.asgi:create --factory --workers N` (see
conftest.py in this folder), each worker process opening the store and migrating it on start-up,
exactly as `jobnik serve` runs it.

* `test_concurrent_dequeuers_over_http` — 8 threads, each with its own keep-alive connection
  (re-opened every 50 requests so that the kernel spreads them over the worker processes), race
  dequeue → PUT COMPLETED over 2,000 tasks until dequeue answers 404. PostgreSQL: 2 server
  processes sharing the database; SQLite: one process (the only SQLite deployment).
* `test_two_processes_answer_like_one` (PostgreSQL only: several processes need a shared server
  database) — one scripted session of requests (jobs, stages, tasks, dequeue, reports, pause and
  resume, priority, abort, delete, errors) against a 1-process server and against a 2-process
  server, each on a fresh database, must give the same statuses and bodies once ids and times are
  normalised. On the 2-process server consecutive requests are pinned to alternating processes
  (the other one is SIGSTOPped for the duration of the request), so every step reads what the
  other process wrote.
* `test_simultaneous_start_on_empty_database` (PostgreSQL only) — two `--workers 2` servers
  started at the same moment on an empty database: four processes migrate at once; both servers
  come up and share one schema.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlsplit, urlunsplit
from uuid import uuid4

import httpx
import psycopg
import pytest

from jobnik.projections.store.migrations import MIGRATIONS

TASKS = 2000
BATCH = 500
DEQUEUERS = 8
RECONNECT_EVERY = 50
POSTGRES_ONLY = pytest.mark.parametrize(
    "database_url",
    ["postgres"],
    indirect=True,
    ids=["postgres-only(several-processes-need-a-shared-server-database)"],
)
UUID_RE = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
TRACE_RE = re.compile(r"[\da-f]{2}-[\da-f]{32}-[\da-f]{16}-[\da-f]{2}")
TIME_RE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$")


def is_postgres(url: str) -> bool:
    return url.startswith(("postgresql://", "postgres://"))


# -- (a) the concurrency test over HTTP ---------------------------------------------------------


@pytest.mark.slow
def test_concurrent_dequeuers_over_http(
    database_url: str, spawn_server: Callable[..., Any]
) -> None:
    workers = 2 if is_postgres(database_url) else 1
    server = spawn_server(database_url, workers=workers)
    stage_type = "bulk"
    with httpx.Client(base_url=server.url, timeout=60) as c:
        job = c.post("/v1/jobs", json={"name": "bulk-job", "data": {}}).json()
        stage = c.post(f"/v1/jobs/{job['id']}/stage", json={"type": stage_type, "data": {}}).json()
        created: list[str] = []
        for start in range(0, TASKS, BATCH):
            r = c.post(
                f"/v1/stages/{stage['id']}/tasks",
                json=[{"data": {"n": n}} for n in range(start, start + BATCH)],
            )
            assert r.status_code == 201, r.text
            created += [t["id"] for t in r.json()]
    assert len(set(created)) == TASKS

    dequeued: list[list[str]] = [[] for _ in range(DEQUEUERS)]
    errors: list[str] = []
    go = threading.Barrier(DEQUEUERS)

    def dequeuer(mine: list[str]) -> None:
        client = httpx.Client(base_url=server.url, timeout=60)
        try:
            go.wait()
            for n in range(1, 10 * TASKS):
                if n % RECONNECT_EVERY == 0:
                    client.close()
                    client = httpx.Client(base_url=server.url, timeout=60)
                r = client.patch(f"/v1/stages/{stage_type}/tasks/dequeue")
                if r.status_code == 404:
                    assert r.json()["code"] == "TASK_NOT_FOUND", r.text
                    return
                if r.status_code != 200:
                    errors.append(f"dequeue {r.status_code} {r.text}")
                    return
                task = r.json()
                if task["status"] != "IN_PROGRESS":
                    errors.append(f"dequeued {task}")
                mine.append(task["id"])
                r = client.put(f"/v1/tasks/{task['id']}/status", json={"status": "COMPLETED"})
                if r.status_code != 200 or r.json()["status"] != "COMPLETED":
                    errors.append(f"complete {r.status_code} {r.text}")
                    return
        except Exception as e:  # noqa: BLE001 - reported by the main thread's assertion
            errors.append(repr(e))
        finally:
            client.close()

    threads = [threading.Thread(target=dequeuer, args=(mine,)) for mine in dequeued]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    assert not errors, errors[:5]
    everything = [i for mine in dequeued for i in mine]
    assert len(everything) == TASKS, f"{len(everything)} dequeued"
    assert len(set(everything)) == TASKS, "a task was dequeued twice"
    assert set(everything) == set(created)
    assert sum(1 for mine in dequeued if mine) > 1, "only one dequeuer ever got a task"

    with httpx.Client(base_url=server.url, timeout=60) as c:
        assert c.patch(f"/v1/stages/{stage_type}/tasks/dequeue").status_code == 404
        stage_now = c.get(f"/v1/stages/{stage['id']}").json()
        job_now = c.get(f"/v1/jobs/{job['id']}").json()
        statuses = {t["status"] for t in c.get(f"/v1/stages/{stage['id']}/tasks").json()}
    assert stage_now["summary"] == {
        "pending": 0,
        "inProgress": 0,
        "completed": TASKS,
        "failed": 0,
        "created": 0,
        "retried": 0,
        "total": TASKS,
        "delegated": 0,
        "aborted": 0,
    }
    assert (stage_now["status"], stage_now["percentage"]) == ("COMPLETED", 100)
    assert (job_now["status"], job_now["percentage"]) == ("COMPLETED", 100)
    assert statuses == {"COMPLETED"}
    assert len(server.serving_pids("/tasks/dequeue")) == workers, server.serving_pids()


# -- (b) N processes answer like one ----------------------------------------------------------


@pytest.fixture
def second_database(pg_server_url: str) -> Iterator[str]:
    """Another fresh, empty PostgreSQL database, dropped at the end."""
    name = f"jobnik_test_{os.getpid()}_{secrets.token_hex(4)}_b"
    with psycopg.connect(pg_server_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    p = urlsplit(pg_server_url)
    try:
        yield urlunsplit((p.scheme, p.netloc, "/" + name, p.query, p.fragment))
    finally:
        with psycopg.connect(pg_server_url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


@contextlib.contextmanager
def only(pids: list[int], serving: int) -> Iterator[None]:
    """Every process of `pids` but `serving` stopped: a new connection can only go there."""
    stopped = [p for p in pids if p != serving]
    for pid in stopped:
        os.kill(pid, signal.SIGSTOP)
    for pid in stopped:
        while _state(pid) not in ("T", "t"):
            time.sleep(0.001)
    try:
        yield
    finally:
        for pid in stopped:
            os.kill(pid, signal.SIGCONT)


class Session:
    """Runs requests one connection each, pinned round-robin to the server's processes, and
    records `(method, path, status, body, Reason header)` with ids and times normalised."""

    def __init__(self, server: Any) -> None:
        self.server = server
        self.pids = sorted(server.started_pids())
        self.http = httpx.Client(base_url=server.url, timeout=30, headers={"Connection": "close"})
        self.ids: dict[str, str] = {}
        self.transcript: list[tuple[Any, ...]] = []
        self.step = 0

    def close(self) -> None:
        self.http.close()

    def norm(self, value: Any) -> Any:
        if isinstance(value, dict):
            shown = {k: self.norm(v) for k, v in value.items()}
            if isinstance(shown.get("tasks"), list):  # no order is promised among a stage's tasks
                shown["tasks"].sort(key=lambda task: str(task.get("id")))
            return shown
        if isinstance(value, list):
            return [self.norm(v) for v in value]
        if isinstance(value, str):
            if TIME_RE.match(value):
                return "<time>"
            if TRACE_RE.fullmatch(value):  # each request without a trace gets a trace of its own
                return "<trace>"
            return UUID_RE.sub(
                lambda m: self.ids.setdefault(m.group(0), f"<id{len(self.ids)}>"), value
            )
        return value

    def __call__(
        self, method: str, path: str, body: Any = None, expect: int = 200, unordered: bool = False
    ) -> Any:
        serving = self.pids[self.step % len(self.pids)]
        self.step += 1
        with only(self.pids, serving):
            r = self.http.request(method, path, json=body)
        data = r.json() if r.content else None
        if r.status_code >= 400:
            assert isinstance(data, dict), r.text
            assert data.get("message"), r.text
            assert data.get("code"), r.text
        shown = self.norm(data)
        if unordered and isinstance(shown, list):
            shown = sorted(shown, key=lambda item: str(item.get("id")))
        self.transcript.append(
            (method, self.norm(path), r.status_code, shown, r.headers.get("reason"))
        )
        assert r.status_code == expect, (method, path, r.status_code, r.text)
        return data


NOWHERE = "00000000-0000-4000-8000-000000000000"


def scripted_session(call: Session) -> None:
    """One client's life against the API: every kind of request, in a fixed order."""
    a = call(
        "POST",
        "/v1/jobs",
        {"name": "job-a", "data": {"k": 1}, "priority": "LOW", "userMetadata": {"u": 1}},
        201,
    )["id"]
    b = call("POST", "/v1/jobs", {"name": "job-b", "data": {}, "priority": "HIGH"}, 201)["id"]
    call("GET", f"/v1/jobs/{a}")
    a1 = call("POST", f"/v1/jobs/{a}/stage", {"type": "ingest", "data": {}}, 201)["id"]
    a2 = call(
        "POST", f"/v1/jobs/{a}/stage", {"type": "publish", "data": {}, "startAsWaiting": True}, 201
    )["id"]
    b1 = call("POST", f"/v1/jobs/{b}/stage", {"type": "ingest", "data": {"x": 1}}, 201)["id"]
    a_tasks = call(
        "POST",
        f"/v1/stages/{a1}/tasks",
        [{"data": {"n": n}, "maxAttempts": 2} for n in range(3)],
        201,
    )
    call("POST", f"/v1/stages/{b1}/tasks", [{"data": {"m": m}} for m in range(2)], 201)
    b_first = call("PATCH", "/v1/stages/ingest/tasks/dequeue")["id"]  # job B: HIGH
    call("PATCH", f"/v1/jobs/{a}/priority", {"priority": "VERY_HIGH"})
    call("PATCH", f"/v1/jobs/{a}/priority", {"priority": "VERY_HIGH"}, 204)
    a_first = call("PATCH", "/v1/stages/ingest/tasks/dequeue")["id"]  # job A now first
    assert a_first == a_tasks[0]["id"]
    call("PUT", f"/v1/tasks/{a_first}/status", {"status": "FAILED"})  # → RETRIED
    call("PATCH", f"/v1/tasks/{a_first}/user-metadata", {"note": "retried once"})
    call("PUT", f"/v1/jobs/{a}/status", {"status": "PAUSED"})
    call("PATCH", "/v1/stages/ingest/tasks/dequeue")  # B's second task: A is paused
    call("PATCH", "/v1/stages/ingest/tasks/dequeue", expect=404)
    call("GET", f"/v1/jobs/{a}")
    call("PUT", f"/v1/jobs/{a}/status", {"status": "PENDING"})  # resume
    call("GET", f"/v1/jobs/{a}")
    for _ in range(3):
        t = call("PATCH", "/v1/stages/ingest/tasks/dequeue")["id"]
        call("PUT", f"/v1/tasks/{t}/status", {"status": "COMPLETED"})
    call("PATCH", "/v1/stages/ingest/tasks/dequeue", expect=404)
    call("GET", f"/v1/jobs/{a}/stages")
    call("GET", f"/v1/stages/{a1}?should_return_tasks=true")
    call("PUT", f"/v1/stages/{a2}/status", {"status": "PENDING"})
    call("PUT", f"/v1/stages/{a2}/status", {"status": "PENDING"})  # already PENDING: no-op
    call("POST", f"/v1/stages/{a2}/tasks", [{"data": {"p": 1}}], 201)
    t = call("PATCH", "/v1/stages/publish/tasks/dequeue")["id"]
    call("PUT", f"/v1/tasks/{t}/status", {"status": "COMPLETED"})
    call("GET", f"/v1/jobs/{a}?should_return_stages=true")
    call("PATCH", f"/v1/jobs/{a}/user-metadata", {"done": True})
    call("PUT", f"/v1/jobs/{b}/status", {"status": "ABORTED"})
    call("PUT", f"/v1/tasks/{b_first}/status", {"status": "COMPLETED"})  # late report
    call("GET", f"/v1/jobs/{b}/stages?should_return_tasks=true")
    call("GET", "/v1/tasks", unordered=True)
    call("GET", f"/v1/tasks?stage_id={a1}&status=COMPLETED", unordered=True)
    call("GET", f"/v1/stages?job_id={b}", unordered=True)
    call("GET", "/v1/jobs?priority=VERY_HIGH", unordered=True)
    c = call("POST", "/v1/jobs", {"name": "job-c", "data": {}}, 201)["id"]
    # errors
    call("GET", "/v1/jobs/not-a-uuid", expect=400)
    call("GET", "/v1/jobs?bogus=1", expect=400)
    call("GET", f"/v1/jobs/{NOWHERE}", expect=404)
    call("GET", f"/v1/tasks/{NOWHERE}", expect=404)
    call("GET", "/v1/nothing-here", expect=404)
    call("POST", "/v1/jobs", {"name": "x", "data": {}}, 400)
    call("POST", f"/v1/jobs/{b}/stage", {"type": "late", "data": {}}, 400)
    call("POST", f"/v1/stages/{b1}/tasks", [], 400)
    call("POST", f"/v1/stages/{a1}/tasks", [{"data": {}}], 400)
    call("PUT", f"/v1/jobs/{b}/status", {"status": "PENDING"}, 400)
    call("PUT", f"/v1/jobs/{c}/status", {"status": "PENDING"}, 400)
    call("PUT", f"/v1/tasks/{t}/status", {"status": "COMPLETED"}, 400)
    call("DELETE", f"/v1/jobs/{c}", expect=400)
    call("PATCH", "/v1/stages/none-such/tasks/dequeue", expect=404)
    # delete
    call("DELETE", f"/v1/jobs/{a}")
    call("GET", f"/v1/jobs/{a}", expect=404)
    call("GET", f"/v1/stages/{a1}", expect=404)
    call("GET", "/v1/jobs", unordered=True)


@POSTGRES_ONLY
def test_two_processes_answer_like_one(
    database_url: str, second_database: str, spawn_server: Callable[..., Any]
) -> None:
    one = spawn_server(database_url, workers=1, wait=False)
    two = spawn_server(second_database, workers=2, wait=False)
    one.wait_ready()
    two.wait_ready()
    transcripts = []
    for server in (one, two):
        session = Session(server)
        try:
            scripted_session(session)
        finally:
            session.close()
        transcripts.append(session.transcript)
    assert len(two.started_pids()) == 2
    # both processes of the 2-process server served the session, alternately
    assert two.serving_pids("/v1/") == two.started_pids()
    one_t, two_t = transcripts
    assert len(one_t) == len(two_t)
    for step, (x, y) in enumerate(zip(one_t, two_t, strict=True)):
        assert x == y, f"step {step}: 1 process {x} != 2 processes {y}"


# -- (c) simultaneous start-up on an empty database --------------------------------------------


@POSTGRES_ONLY
def test_simultaneous_start_on_empty_database(
    database_url: str, spawn_server: Callable[..., Any]
) -> None:
    with psycopg.connect(database_url) as conn:
        assert conn.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'"
        ).fetchone() == (0,)
    servers = [spawn_server(database_url, workers=2, wait=False) for _ in range(2)]
    for server in servers:
        server.wait_ready()
        assert len(server.started_pids()) == 2
    with httpx.Client(timeout=30) as c:
        name = f"job-{uuid4().hex[:6]}"
        created = c.post(f"{servers[0].url}/v1/jobs", json={"name": name, "data": {}})
        assert created.status_code == 201, created.text
        seen = c.get(f"{servers[1].url}/v1/jobs/{created.json()['id']}")
        assert seen.status_code == 200
        assert seen.json()["name"] == name
        for server in servers:
            assert c.get(f"{server.url}/v1/jobs").status_code == 200
    with psycopg.connect(database_url) as conn:
        applied = conn.execute("SELECT version FROM jobnik_migrations ORDER BY version")
        assert applied.fetchall() == [(m.version,) for m in MIGRATIONS]  # each once
    for server in servers:
        assert "Traceback" not in server.log(), server.log()[-3000:]
