"""Metrics, logs and traces of real processes: `jobnik serve --workers 2` summing its processes'
metrics, and one trace running from a task's creation through a worker process's handler to its
report, exported by the server and the worker to an OTLP receiver the test runs."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from jobnik.scripts.bench.http_lifecycle import answers, stop_group

from .conftest import free_port
from .otlp_receiver import Received, Span, receiving
from .test_server_processes import POSTGRES_ONLY
from .test_workers import HANDLERS, JOBNIK, ROOT

STARTED = "Application startup complete."
TRACE = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
TRACE_ID = TRACE.split("-")[1]
SERVER_KIND, CLIENT_KIND, CONSUMER_KIND = 2, 3, 5  # OTLP's SpanKind values


def json_lines(path: Path) -> list[dict[str, Any]]:
    found = []
    for line in path.read_text(errors="replace").splitlines():
        with contextlib.suppress(ValueError):
            found.append(json.loads(line))
    return found


@contextlib.contextmanager
def jobnik_serve(
    database_url: str, workers: int, tmp_path: Path, settings: Mapping[str, str] | None = None
) -> Iterator[tuple[str, Path, subprocess.Popen[bytes]]]:
    """`jobnik serve --workers N` with JSON logs (and `settings`); TMPDIR is `tmp_path`, where it
    makes its metrics directory. Yields (base URL, log path, process) once every process serves."""
    port, log_path = free_port(), tmp_path / "serve.log"
    env = {
        **os.environ,
        "JOBNIK_DATABASE_URL": database_url,
        "JOBNIK_LOG_FORMAT": "json",
        "TMPDIR": str(tmp_path),
        **(settings or {}),
    }
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [str(JOBNIK), "serve", "--port", str(port), "--workers", str(workers)],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            started = {e["process"] for e in json_lines(log_path) if e["message"] == STARTED}
            if len(started) >= workers and answers(url, "/liveness"):
                break
            assert proc.poll() is None, log_path.read_text()[-3000:]
            assert time.monotonic() < deadline, log_path.read_text()[-3000:]
            time.sleep(0.05)
        yield url, log_path, proc
    finally:
        stop_group(proc, 20)


def served_by(log_path: Path, route: str) -> list[int]:
    """The process of every access line for `route`."""
    return [
        e["process"]
        for e in json_lines(log_path)
        if e.get("name") == "jobnik.access" and e.get("route") == route
    ]


def samples(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = httpx.get(f"{url}/metrics", timeout=10).text  # a fresh connection: any process
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


@pytest.mark.slow
@POSTGRES_ONLY
def test_two_server_processes_serve_the_sum_of_their_metrics(
    database_url: str, tmp_path: Path
) -> None:
    with jobnik_serve(database_url, 2, tmp_path) as (url, log_path, proc):
        (metrics_dir,) = tmp_path.glob("jobnik-metrics-*")
        made = 0
        while len(set(served_by(log_path, "/v1/jobs"))) < 2 and made < 2000:
            for _ in range(20):  # each on a new connection: the kernel spreads them
                assert httpx.get(f"{url}/v1/jobs", timeout=10).status_code == 200
                made += 1
            time.sleep(0.05)  # (the log lines of the last ones written)
        processes = set(served_by(log_path, "/v1/jobs"))
        scrapes = [samples(url) for _ in range(6)]
        files = sorted(p.name for p in metrics_dir.iterdir())

    jobs = (("method", "GET"), ("path", "/v1/jobs"), ("status_code", "200"))
    assert len(processes) == 2
    assert len(served_by(log_path, "/v1/jobs")) == made
    for scraped in scrapes:
        assert scraped[("http_request_duration_seconds_count", jobs)] == made
        assert scraped[("http_requests_in_flight", ())] == 1  # the scrape itself
        cpu = [dict(k[1])["pid"] for k in scraped if k[0] == "process_cpu_seconds_total"]
        assert sorted(int(pid) for pid in cpu) == sorted(processes)
    assert any(f.startswith("histogram_") for f in files)
    assert proc.returncode == 0
    assert not metrics_dir.exists()  # removed when the server stopped
    assert "HTTP/1.1" not in log_path.read_text()  # uvicorn's own access lines are off


@pytest.mark.slow
@POSTGRES_ONLY
def test_two_server_processes_agree_on_the_read_model_gauges_and_sum_their_counters(
    database_url: str, tmp_path: Path
) -> None:
    with jobnik_serve(database_url, 2, tmp_path) as (url, log_path, _):
        body = {"name": "spread", "data": {}}
        created = replays = 0
        while len(set(served_by(log_path, "/v1/jobs"))) < 2 and created < 200:
            for _ in range(10):  # each on a new connection: the kernel spreads them
                key = {"Idempotency-Key": f"key-{created}"}
                for _ in range(2):  # the second answers the first's answer again
                    r = httpx.post(f"{url}/v1/jobs", json=body, headers=key, timeout=10)
                    assert r.status_code == 201, r.text
                created += 1
                replays += 1
            time.sleep(0.05)
        scrapes = [samples(url) for _ in range(6)]
        service = [httpx.get(f"{url}/service-metrics", timeout=10).text for _ in range(4)]

    assert len(set(served_by(log_path, "/v1/jobs"))) == 2
    pending = ("jobnik_jobs_by_status", (("job_status", "PENDING"),))
    for scraped in scrapes:
        assert scraped[pending] == created  # read from the database: the same in each process
        assert scraped[("jobnik_idempotent_replays_total", ())] == replays  # summed
        assert scraped[("jobnik_writer_lock_wait_seconds_count", ())] >= created  # summed
    assert all(f'jobnik_jobs_by_status{{job_status="PENDING"}} {created}.0' in t for t in service)


# -- one trace across processes -----------------------------------------------------------------


def one_of(spans: list[Span], test: Callable[[Span], bool], what: str) -> Span:
    found = [s for s in spans if test(s)]
    assert len(found) == 1, f"{what}: {len(found)} spans of {[(s.service, s.name) for s in spans]}"
    return found[0]


@pytest.mark.slow
def test_one_trace_runs_from_a_tasks_creation_through_the_worker_to_its_report(
    database_url: str,
    spawn_server: Callable[..., Any],
    tmp_path: Path,
) -> None:
    stage_type = f"traced-{uuid.uuid4().hex[:8]}"
    with receiving() as (endpoint, received):
        otel = {"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_BSP_SCHEDULE_DELAY": "100"}
        server = spawn_server(database_url, env=otel)
        with httpx.Client(base_url=server.url, timeout=30) as http:
            job = http.post("/v1/jobs", json={"name": "traced", "data": {}}).json()
            stage = http.post(
                f"/v1/jobs/{job['id']}/stage", json={"type": stage_type, "data": {}}
            ).json()
            (task,) = http.post(
                f"/v1/stages/{stage['id']}/tasks",
                json=[{"data": {"seconds": 0.6}}],
                headers={"traceparent": TRACE},
            ).json()
            worker = run_worker(server.url, stage_type, tmp_path, otel)
            try:
                deadline = time.monotonic() + 60
                while http.get(f"/v1/tasks/{task['id']}").json()["status"] != "COMPLETED":
                    assert worker.poll() is None, (tmp_path / "worker.log").read_text()
                    assert time.monotonic() < deadline, (tmp_path / "worker.log").read_text()
                    time.sleep(0.05)
            finally:
                worker.send_signal(signal.SIGTERM)  # exports its last spans as it exits
                worker.wait(30)
        server.stop()  # the server exports its last spans at shutdown
        spans = received.wait_for(lambda got: _has_report(got, task["id"]))
    assert worker.returncode == 0, (tmp_path / "worker.log").read_text()

    trace = [s for s in spans if s.trace_id == TRACE_ID]
    created = one_of(trace, lambda s: s.name == "POST /v1/stages/{stageId}/tasks", "creation")
    add = one_of(trace, lambda s: s.name == "jobnik.add_tasks", "the add_tasks command")
    receive = one_of(trace, lambda s: s.name == f"receive {stage_type}", "the dequeue")
    process = one_of(trace, lambda s: s.name == f"process {stage_type}", "the handler")
    put = one_of(trace, lambda s: s.name == "PUT" and s.kind == CLIENT_KIND, "the report call")
    report = one_of(trace, lambda s: s.name == "PUT /v1/tasks/{taskId}/status", "the report")
    command = one_of(trace, lambda s: s.name == "jobnik.report_task", "the report command")
    logged = one_of(trace, lambda s: s.name == "POST /v1/tasks/{taskId}/logs", "the log call")
    beats = [s for s in trace if s.name == "POST /v1/tasks/{taskId}/heartbeat"]
    dequeue = one_of(
        spans, lambda s: s.name == "jobnik.dequeue" and bool(s.links), "the dequeue command"
    )
    database = [s for s in trace if "db.system" in s.attributes or "db.system.name" in s.attributes]

    assert (created.service, created.kind, created.attributes["http.route"]) == (
        "jobnik",
        SERVER_KIND,
        "/v1/stages/{stageId}/tasks",
    )
    assert task["traceparent"] == f"00-{TRACE_ID}-{created.span_id}-01"
    assert add.parent_id == created.span_id
    assert {s.parent_id for s in database} & {add.span_id, command.span_id}
    assert (receive.service, receive.kind, receive.parent_id) == (
        "jobnik-worker",
        CONSUMER_KIND,
        created.span_id,
    )
    assert (process.service, process.parent_id) == ("jobnik-worker", created.span_id)
    assert process.attributes["jobnik.task.id"] == task["id"]
    assert process.attributes["jobnik.task.outcome"] == "completed"
    assert put.parent_id == process.span_id
    assert (report.service, report.parent_id) == ("jobnik", put.span_id)
    assert command.parent_id == report.span_id
    assert command.attributes["jobnik.task.status"] == "COMPLETED"
    assert command.attributes["jobnik.task.id"] == task["id"]
    assert logged.service == "jobnik"
    assert beats, "no heartbeat joined the trace"
    assert (TRACE_ID, created.span_id) in dequeue.links
    assert dequeue.attributes["jobnik.task.id"] == task["id"]


def _has_report(spans: list[Span], task_id: str) -> bool:
    return any(
        s.name == "jobnik.report_task" and s.attributes.get("jobnik.task.id") == task_id
        for s in spans
    ) and any(s.name.startswith("process ") for s in spans)


def run_worker(
    api_url: str, stage_type: str, tmp_path: Path, otel: dict[str, str]
) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        **otel,
        "JOBNIK_API_URL": api_url,
        "JOBNIK_TEST_RECORDS": str(tmp_path / "records.jsonl"),
    }
    with (tmp_path / "worker.log").open("wb") as log:
        return subprocess.Popen(
            [
                str(JOBNIK),
                "worker",
                "run",
                f"{HANDLERS}:logs_and_waits",
                "--stage-type",
                stage_type,
                "--heartbeat-interval",
                "0.2",
            ],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )


__all__ = ["Received"]


# -- the background loops' traces -----------------------------------------------------------

ROUNDS = ("jobnik.sweeper", "jobnik.catchup")
HTTP_METHODS = ("GET ", "POST ", "PUT ", "PATCH ", "DELETE ")


def test_background_loops_trace_only_the_rounds_that_do_work(
    database_url: str, spawn_server: Callable[..., Any]
) -> None:
    with receiving() as (endpoint, received):
        env = {
            "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
            "OTEL_BSP_SCHEDULE_DELAY": "100",
            "JOBNIK_SWEEP_INTERVAL": "0.2",  # five sweeps a second, and as many catch-up looks
            "JOBNIK_CATCHUP_INTERVAL": "0.2",
        }
        server = spawn_server(database_url, env=env)
        time.sleep(1.0)  # the start-up's spans (migrations) are exported
        started = len(received.all())
        time.sleep(3.0)
        idle = received.all()[started:]
        with httpx.Client(base_url=server.url, timeout=30) as http:
            job = http.post("/v1/jobs", json={"name": "swept", "data": {}}).json()
            stage = http.post(f"/v1/jobs/{job['id']}/stage", json={"type": "t", "data": {}})
            http.post(f"/v1/stages/{stage.json()['id']}/tasks", json=[{"data": {}}])
            http.patch("/v1/stages/t/tasks/dequeue", params={"lease_seconds": 1})
        received.wait_for(lambda got: {s.name for s in got} >= set(ROUNDS))
        time.sleep(0.5)
        spans = received.all()[started:]  # (what a server that stops does is no loop's)
        server.stop()

    assert [(s.name, s.attributes) for s in idle] == []  # an idle server: no trace at all
    rounds = [s for s in spans if s.name in ROUNDS]
    assert all(s.parent_id == "" and s.attributes["jobnik.round.work"] > 0 for s in rounds)
    roots = [s for s in spans if s.parent_id == ""]
    assert all(s in rounds or s.name.startswith(HTTP_METHODS) for s in roots), [
        (s.name, s.attributes) for s in roots if s not in rounds
    ]
    inside = {s.parent_id for s in spans if "db.system" in s.attributes}
    assert inside & {s.span_id for s in rounds}  # a round's database calls are its children
