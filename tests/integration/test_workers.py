"""The worker runtime end to end: a real API server (uvicorn subprocess) and real worker processes
(`jobnik worker run tests.integration.handlers:<name> ...`, run from the project root).

The handlers (tests/integration/handlers.py) append what they did to a JSON-lines file; the event
log is read straight from the database at the end of a test, so every claim ("completed exactly
once", "retried after a timeout", "the late report was refused") is checked against the history
the server wrote, not only against the API's current state.

* (a) `test_three_worker_processes_complete_a_two_stage_job_of_500_tasks_exactly_once`
* (b) `test_a_killed_workers_task_is_reclaimed_after_its_lease_and_its_late_report_refused`
* (c) `test_aborting_a_job_cancels_running_handlers_within_a_heartbeat_interval`
* (d) `test_sigterm_lets_running_handlers_finish_and_stops_polling`,
      `test_sigterm_hands_back_a_task_whose_handler_outlives_the_grace_period`,
      `test_a_draining_worker_heartbeats_at_its_interval`
* (e) `test_task_log_lines_are_readable_in_order_with_their_attempt`
* (f) `test_one_sweeper_acts_however_many_server_processes_run`
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import httpx
import pytest

from jobnik.projections.store.backends import open_store
from jobnik.projections.store.config import library_env
from jobnik.workers import ApiError, Consumer, JobnikClient, Producer, Task

from .locks import advisory_holders

ROOT = Path(__file__).resolve().parents[2]
JOBNIK = Path(sys.executable).parent / "jobnik"
HANDLERS = "tests.integration.handlers"
POSTGRES_ONLY = pytest.mark.parametrize(
    "database_url",
    ["postgres"],
    indirect=True,
    ids=["postgres-only(several-server-processes-need-a-shared-server-database)"],
)
SWEEP_FAST = {"JOBNIK_SWEEP_INTERVAL": "0.25"}

pytestmark = pytest.mark.slow


# -- worker processes ---------------------------------------------------------------------------


@dataclass
class WorkerProcess:
    proc: subprocess.Popen[bytes]
    log_path: Path
    stage_type: str

    @property
    def pid(self) -> int:
        return self.proc.pid

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def final_counts(self) -> dict[str, int]:
        """The last status line's counters: done, failed, running, refused."""
        lines = [ln for ln in self.output().splitlines() if ln.startswith(f"[{self.stage_type}]")]
        assert lines, f"no status line:\n{self.output()[-2000:]}"
        return {k: int(v) for k, v in re.findall(r"(done|failed|running|refused) (\d+)", lines[-1])}

    def wait(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            tail = self.output()[-3000:]
            pytest.fail(f"worker {self.pid} still running after {timeout}s:\n{tail}")

    def kill(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)


@dataclass
class Workers:
    """Starts `jobnik worker run` processes; all killed when the test ends."""

    directory: Path
    records_path: Path
    started: list[WorkerProcess] = field(default_factory=list)

    def start(
        self,
        api_url: str,
        handler: str,
        stage_type: str,
        *,
        concurrency: int = 1,
        heartbeat_interval: float = 10.0,
        grace_period: float = 30.0,
    ) -> WorkerProcess:
        log_path = self.directory / f"worker-{len(self.started)}.log"
        env = {
            **os.environ,
            "JOBNIK_API_URL": api_url,
            "JOBNIK_TEST_RECORDS": str(self.records_path),
        }
        with log_path.open("wb") as log:
            proc = subprocess.Popen(
                [
                    str(JOBNIK),
                    "worker",
                    "run",
                    f"{HANDLERS}:{handler}",
                    "--stage-type",
                    stage_type,
                    "--concurrency",
                    str(concurrency),
                    "--heartbeat-interval",
                    str(heartbeat_interval),
                    "--grace-period",
                    str(grace_period),
                ],
                cwd=ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        worker = WorkerProcess(proc, log_path, stage_type)
        self.started.append(worker)
        return worker

    def records(self, event: str | None = None) -> list[dict[str, Any]]:
        if not self.records_path.exists():
            return []
        lines = self.records_path.read_text().splitlines()
        found = [json.loads(ln) for ln in lines if ln.strip()]
        return [r for r in found if event is None or r["event"] == event]

    def assert_alive(self) -> None:
        for w in self.started:
            if w.proc.poll() is not None and w.proc.returncode not in (0, -signal.SIGKILL):
                pytest.fail(f"worker {w.pid} exited {w.proc.returncode}:\n{w.output()[-3000:]}")

    def kill_all(self) -> None:
        for w in self.started:
            w.kill()


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[Workers]:
    pool = Workers(tmp_path, tmp_path / "records.jsonl")
    try:
        yield pool
    finally:
        pool.kill_all()


# -- helpers ------------------------------------------------------------------------------------


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid4().hex[:8]}"


def wait_until(
    condition: Callable[[], bool], timeout: float, what: str, *, pool: Workers | None = None
) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if pool is not None:
            pool.assert_alive()
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {timeout}s")
        time.sleep(0.05)


def event_log(database_url: str) -> list[Any]:
    """Every stored event, oldest first, as domain events."""
    store = open_store(library_env({"JOBNIK_DATABASE_URL": database_url}))
    try:
        events: list[Any] = []
        start = 1
        while page := store.recorder.select_notifications(start, 1000):
            events += [store.mapper.to_domain_event(n) for n in page]
            start = page[-1].id + 1
        return events
    finally:
        store.close()


def of(events: list[Any], kind: str, task_id: str | None = None) -> list[Any]:
    return [
        e
        for e in events
        if type(e).__name__ == kind and (task_id is None or e.originator_id == UUID(task_id))
    ]


def task_status(api: httpx.Client, task_id: str) -> str:
    status: str = api.get(f"/v1/tasks/{task_id}").json()["status"]
    return status


@dataclass
class Clients:
    """SDK and plain HTTP clients for a test, all closed when it ends."""

    opened: list[JobnikClient | httpx.Client] = field(default_factory=list)

    def sdk(self, url: str) -> JobnikClient:
        client = JobnikClient(url)
        self.opened.append(client)
        return client

    def http(self, url: str) -> httpx.Client:
        client = httpx.Client(base_url=url, timeout=10)
        self.opened.append(client)
        return client


@pytest.fixture
def clients() -> Iterator[Clients]:
    made = Clients()
    try:
        yield made
    finally:
        for client in made.opened:
            client.close()


@pytest.fixture
def server_for(database_url: str, spawn_server: Callable[..., Any]) -> Callable[..., Any]:
    def start(workers: int = 1, **env: str) -> Any:
        return spawn_server(database_url, workers=workers, env={**SWEEP_FAST, **env})

    return start


# -- (a) three processes, two stages, 500 tasks -------------------------------------------------

TILES, UPLOADS = 400, 100


def test_three_worker_processes_complete_a_two_stage_job_of_500_tasks_exactly_once(
    database_url: str,
    server_for: Callable[..., Any],
    workers: Workers,
    clients: Clients,
) -> None:
    server = server_for()
    producer = Producer(clients.sdk(server.url))
    tiles_type, upload_type = unique("tiles"), unique("upload")
    job = producer.create_job("create-map", {"mapId": "map-500"})
    tiles = producer.create_stage(job.id, tiles_type, {"resolution": "high"})
    uploads = producer.create_stage(job.id, upload_type, {})
    tile_ids = {t.id for t in producer.create_tasks(tiles.id, [{"n": n} for n in range(TILES)])}
    upload_ids = {
        t.id for t in producer.create_tasks(uploads.id, [{"n": n} for n in range(UPLOADS)])
    }
    running = [
        workers.start(server.url, "record", tiles_type, concurrency=4, heartbeat_interval=2),
        workers.start(server.url, "record", tiles_type, concurrency=4, heartbeat_interval=2),
        workers.start(server.url, "record", upload_type, concurrency=4, heartbeat_interval=2),
    ]

    wait_until(
        lambda: producer.job(job.id).status in ("COMPLETED", "FAILED", "ABORTED"),
        timeout=120,
        what="the job to end",
        pool=workers,
    )
    for w in running:
        w.proc.send_signal(signal.SIGTERM)
    codes = [w.wait(timeout=15) for w in running]

    assert producer.job(job.id).status == "COMPLETED"
    assert [producer.stage(s.id).status for s in (tiles, uploads)] == ["COMPLETED", "COMPLETED"]
    assert codes == [0, 0, 0]
    events = event_log(database_url)
    completed = Counter(str(e.originator_id) for e in of(events, "TaskCompleted"))
    assert set(completed) == tile_ids | upload_ids
    assert set(completed.values()) == {1}, "a task completed more than once"
    assert of(events, "TaskRetried") == []
    assert {e.attempt for e in of(events, "TaskCompleted")} == {1}
    assert len(of(events, "TaskDequeued")) == TILES + UPLOADS
    handled = Counter(r["task"] for r in workers.records("handled"))
    assert set(handled) == tile_ids | upload_ids
    assert set(handled.values()) == {1}, "a handler ran twice"
    last_tile_done = max(
        e.timestamp for e in of(events, "TaskCompleted") if str(e.originator_id) in tile_ids
    )
    first_upload = min(
        e.timestamp for e in of(events, "TaskDequeued") if str(e.originator_id) in upload_ids
    )
    assert first_upload >= last_tile_done, "an upload ran before the tiles stage completed"
    pids = {r["pid"] for r in workers.records("handled")}
    assert pids == {w.pid for w in running}, "some worker process did no work"
    counts = [w.final_counts() for w in running]
    assert sum(c["done"] for c in counts) == TILES + UPLOADS
    assert {(c["failed"], c["running"], c["refused"]) for c in counts} == {(0, 0, 0)}


# -- (b) SIGKILL mid-task -----------------------------------------------------------------------


def test_a_killed_workers_task_is_reclaimed_after_its_lease_and_its_late_report_refused(
    database_url: str,
    server_for: Callable[..., Any],
    workers: Workers,
    clients: Clients,
) -> None:
    server = server_for()
    producer = Producer(clients.sdk(server.url))
    stage_type = unique("fragile")
    job = producer.create_job("kill-me", {})
    stage = producer.create_stage(job.id, stage_type, {})
    created = producer.create_tasks(
        stage.id, [{"block": n == 0, "n": n} for n in range(6)], max_attempts=3
    )
    blocked_id = created[0].id
    first, second = (
        workers.start(server.url, "block_first_attempt", stage_type, heartbeat_interval=0.5)
        for _ in range(2)
    )
    wait_until(
        lambda: bool(workers.records("blocking")),
        timeout=20,
        what="the blocking handler to start",
        pool=workers,
    )
    blocking = workers.records("blocking")[0]
    victim, survivor = (first, second) if blocking["pid"] == first.pid else (second, first)
    assert blocking == {**blocking, "task": blocked_id, "attempt": 1, "pid": victim.pid}

    os.killpg(victim.pid, signal.SIGKILL)
    killed_at = time.time()
    api = clients.http(server.url)
    wait_until(
        lambda: task_status(api, blocked_id) == "COMPLETED",
        timeout=20,
        what="the blocked task to be completed by the other worker",
    )
    current = Task.from_json(api.get(f"/v1/tasks/{blocked_id}").json())
    stale = dataclasses.replace(current, attempt=1)
    consumer = Consumer(clients.sdk(server.url))
    with pytest.raises(ApiError) as late_report:
        consumer.complete(stale)
    with pytest.raises(ApiError) as late_beat:
        consumer.heartbeat(stale)

    assert victim.proc.wait(timeout=5) == -signal.SIGKILL
    assert (late_report.value.status, late_report.value.code) == (409, "STALE_ATTEMPT")
    assert (late_beat.value.status, late_beat.value.code) == (409, "STALE_ATTEMPT")
    events = event_log(database_url)
    retried = of(events, "TaskRetried", blocked_id)
    assert [(e.attempt, e.attempts, e.cause) for e in retried] == [(1, 1, "timeout")]
    lease_seconds = 2  # ceil(3 heartbeat intervals)
    assert retried[0].timestamp.timestamp() <= killed_at + lease_seconds + 0.25 + 2.0
    assert [e.attempt for e in of(events, "TaskCompleted", blocked_id)] == [2]
    assert [
        (r["attempt"], r["pid"]) for r in workers.records("handled") if r["task"] == blocked_id
    ] == [(2, survivor.pid)]
    refused = of(events, "TaskAttemptRefused", blocked_id)
    assert [(e.attempt, e.current_attempt, e.request) for e in refused] == [
        (1, 2, "report COMPLETED"),
        (1, 2, "heartbeat"),
    ]
    assert current.status == "COMPLETED"
    assert task_status(api, blocked_id) == "COMPLETED"
    assert {task_status(api, t.id) for t in created} == {"COMPLETED"}
    assert producer.job(job.id).status == "COMPLETED"


# -- (c) abort while handlers run ---------------------------------------------------------------

HEARTBEAT = 0.5
SLACK = 0.5


def test_aborting_a_job_cancels_running_handlers_within_a_heartbeat_interval(
    database_url: str,
    server_for: Callable[..., Any],
    workers: Workers,
    clients: Clients,
) -> None:
    server = server_for()
    producer = Producer(clients.sdk(server.url))
    stage_type = unique("endless")
    job = producer.create_job("abort-me", {})
    stage = producer.create_stage(job.id, stage_type, {})
    ids = {t.id for t in producer.create_tasks(stage.id, [{"n": n} for n in range(6)])}
    for _ in range(2):
        workers.start(
            server.url, "until_cancelled", stage_type, concurrency=3, heartbeat_interval=HEARTBEAT
        )
    wait_until(
        lambda: len(workers.records("started")) == 6,
        timeout=20,
        what="six handlers to start",
        pool=workers,
    )
    time.sleep(HEARTBEAT)  # abort in the middle of the heartbeat rhythm, not at its start

    producer.abort(job.id)
    aborted_at = time.time()
    wait_until(
        lambda: len(workers.records("cancelled")) == 6,
        timeout=10,
        what="every handler to see the abort",
    )
    api = clients.http(server.url)
    wait_until(
        lambda: {task_status(api, t) for t in ids} == {"ABORTED"},
        timeout=10,
        what="every late report to land",
    )

    cancelled = workers.records("cancelled")
    assert {r["task"] for r in cancelled} == ids
    assert {r["reason"] for r in cancelled} == {"job aborted"}
    lags = sorted(round(r["time"] - aborted_at, 3) for r in cancelled)
    assert lags[-1] <= HEARTBEAT + SLACK, f"seen {lags} s after the abort"
    events = event_log(database_url)
    aborted = of(events, "TaskAborted")
    assert {str(e.originator_id) for e in aborted} == ids
    assert {(e.previous, e.reported) for e in aborted} == {("IN_PROGRESS", "COMPLETED")}
    assert of(events, "TaskCompleted") == []
    assert producer.job(job.id).status == "ABORTED"
    assert producer.stage(stage.id).status == "ABORTED"


# -- (d) SIGTERM --------------------------------------------------------------------------------


def test_sigterm_lets_running_handlers_finish_and_stops_polling(
    database_url: str,
    server_for: Callable[..., Any],
    workers: Workers,
    clients: Clients,
) -> None:
    server = server_for()
    producer = Producer(clients.sdk(server.url))
    stage_type = unique("drain")
    job = producer.create_job("drain-me", {})
    stage = producer.create_stage(job.id, stage_type, {})
    created = producer.create_tasks(stage.id, [{"seconds": 1.5} for _ in range(3)])
    worker = workers.start(
        server.url, "sleepy", stage_type, concurrency=2, heartbeat_interval=0.5, grace_period=10
    )
    wait_until(
        lambda: len(workers.records("started")) == 2,
        timeout=20,
        what="two handlers to start",
        pool=workers,
    )

    worker.proc.send_signal(signal.SIGTERM)
    signalled = time.monotonic()
    code = worker.wait(timeout=15)
    took = time.monotonic() - signalled

    assert code == 0
    assert took < 5, f"drained in {took:.1f}s"
    started = {r["task"] for r in workers.records("started")}
    finished = {r["task"] for r in workers.records("finished")}
    assert len(started) == 2
    assert finished == started
    api = clients.http(server.url)
    assert {t.id: task_status(api, t.id) for t in created} == {
        t.id: "COMPLETED" if t.id in started else "PENDING" for t in created
    }
    events = event_log(database_url)
    assert {str(e.originator_id) for e in of(events, "TaskDequeued")} == started
    assert of(events, "TaskReturned") == []
    assert worker.final_counts() == {"done": 2, "failed": 0, "running": 0, "refused": 0}
    assert "stopping" in worker.output().splitlines()[-1]


def test_sigterm_hands_back_a_task_whose_handler_outlives_the_grace_period(
    database_url: str,
    server_for: Callable[..., Any],
    workers: Workers,
    clients: Clients,
) -> None:
    server = server_for()
    producer = Producer(clients.sdk(server.url))
    stage_type = unique("stubborn")
    job = producer.create_job("hand-back", {})
    stage = producer.create_stage(job.id, stage_type, {})
    (task,) = producer.create_tasks(stage.id, [{"seconds": 60}])
    first = workers.start(server.url, "sleepy", stage_type, heartbeat_interval=0.5, grace_period=1)
    wait_until(
        lambda: len(workers.records("started")) == 1,
        timeout=20,
        what="the handler to start",
        pool=workers,
    )

    first.proc.send_signal(signal.SIGTERM)
    signalled = time.monotonic()
    code = first.wait(timeout=15)
    took = time.monotonic() - signalled
    api = clients.http(server.url)
    returned_status = task_status(api, task.id)
    second = workers.start(server.url, "record", stage_type, heartbeat_interval=0.5)
    wait_until(
        lambda: task_status(api, task.id) == "COMPLETED",
        timeout=20,
        what="another worker to complete the handed-back task",
        pool=workers,
    )

    assert code == 0
    assert 1 <= took < 5, f"stopped {took:.1f}s after SIGTERM (grace period 1 s)"
    assert returned_status == "PENDING"
    assert workers.records("finished") == []
    events = event_log(database_url)
    assert [(e.attempt, e.reason) for e in of(events, "TaskReturned", task.id)] == [
        (1, "worker shutting down")
    ]
    assert [e.attempt for e in of(events, "TaskCompleted", task.id)] == [2]
    assert [(r["attempt"], r["pid"]) for r in workers.records("handled")] == [(2, second.pid)]
    final = api.get(f"/v1/tasks/{task.id}").json()
    assert (final["attempts"], final["attempt"]) == (0, 2), "the hand-back spent an attempt"
    assert producer.job(job.id).status == "COMPLETED"


@pytest.mark.parametrize(
    "database_url", ["sqlite"], indirect=True, ids=["sqlite-only(worker-side-behaviour)"]
)
def test_a_draining_worker_heartbeats_at_its_interval(
    database_url: str,
    server_for: Callable[..., Any],
    workers: Workers,
    clients: Clients,
) -> None:
    server = server_for()
    producer = Producer(clients.sdk(server.url))
    stage_type = unique("draining")
    job = producer.create_job("drain-beats", {})
    stage = producer.create_stage(job.id, stage_type, {})
    (task,) = producer.create_tasks(stage.id, [{"seconds": 2.0}])
    worker = workers.start(
        server.url, "sleepy", stage_type, heartbeat_interval=0.5, grace_period=10
    )
    wait_until(
        lambda: len(workers.records("started")) == 1,
        timeout=20,
        what="the handler to start",
        pool=workers,
    )

    worker.proc.send_signal(signal.SIGTERM)
    code = worker.wait(timeout=15)

    assert code == 0
    events = event_log(database_url)
    assert [e.attempt for e in of(events, "TaskCompleted", task.id)] == [1]
    assert len(of(events, "TaskLeaseExtended", task.id)) <= 2.0 / 0.5 + 2


# -- (e) task logs ------------------------------------------------------------------------------


def test_task_log_lines_are_readable_in_order_with_their_attempt(
    database_url: str,
    server_for: Callable[..., Any],
    workers: Workers,
    clients: Clients,
) -> None:
    server = server_for()
    producer = Producer(clients.sdk(server.url))
    stage_type = unique("chatty")
    job = producer.create_job("logs", {})
    stage = producer.create_stage(job.id, stage_type, {})
    (task,) = producer.create_tasks(stage.id, [{}], max_attempts=2)
    workers.start(server.url, "chatty", stage_type, heartbeat_interval=0.5)
    api = clients.http(server.url)
    wait_until(
        lambda: task_status(api, task.id) == "COMPLETED",
        timeout=20,
        what="the task to complete on its second attempt",
        pool=workers,
    )

    answer = api.get(f"/v1/tasks/{task.id}/logs")

    assert answer.status_code == 200
    lines = answer.json()["items"]
    assert [(ln["attempt"], ln["line"]) for ln in lines] == [
        (1, "attempt 1: start"),
        (1, "attempt 1: working"),
        (1, "attempt 1: end"),
        (2, "attempt 2: start"),
        (2, "attempt 2: working"),
        (2, "attempt 2: end"),
    ]
    times = [ln["time"] for ln in lines]
    assert times == sorted(times)
    events = event_log(database_url)
    assert [(e.attempt, e.lines) for e in of(events, "TaskLogged", task.id)] == [
        (1, ["attempt 1: start", "attempt 1: working"]),
        (1, ["attempt 1: end"]),
        (2, ["attempt 2: start", "attempt 2: working"]),
        (2, ["attempt 2: end"]),
    ]
    assert api.get(f"/v1/tasks/{uuid4()}/logs").status_code == 404


# -- (f) one sweeper ----------------------------------------------------------------------------

EXPIRING = 40


def sweeper_lock_holders(database_url: str) -> int:
    return advisory_holders(database_url, "sweeper")


@POSTGRES_ONLY
def test_one_sweeper_acts_however_many_server_processes_run(
    database_url: str,
    server_for: Callable[..., Any],
    clients: Clients,
) -> None:
    server = server_for(workers=2, JOBNIK_SWEEP_INTERVAL="0.1")
    producer = Producer(clients.sdk(server.url))
    stage_type = unique("expiring")
    job = producer.create_job("sweep", {})
    stage = producer.create_stage(job.id, stage_type, {})
    ids = {
        t.id
        for t in producer.create_tasks(
            stage.id, [{"n": n} for n in range(EXPIRING)], max_attempts=5
        )
    }
    consumer = Consumer(clients.sdk(server.url))
    holders: list[int] = []

    for expiry in (1, 2):
        leased = [consumer.dequeue(stage_type, lease_seconds=1) for _ in ids]
        assert {t.id for t in leased if t} == ids
        assert {t.attempt for t in leased if t} == {expiry}
        holders.append(sweeper_lock_holders(database_url))
        wait_until(
            lambda: (
                {t["status"] for t in producer.client.get(f"/v1/stages/{stage.id}/tasks")}
                == {"RETRIED"}
            ),
            timeout=15,
            what=f"every lease to expire (round {expiry})",
        )
    time.sleep(0.5)  # a duplicate sweep, if any, would land now

    events = event_log(database_url)
    retried = Counter((str(e.originator_id), e.attempt) for e in of(events, "TaskRetried"))
    assert set(retried) == {(t, n) for t in ids for n in (1, 2)}
    assert set(retried.values()) == {1}, "a lease expiry was swept twice"
    assert {e.cause for e in of(events, "TaskRetried")} == {"timeout"}
    assert holders == [1, 1]
    assert "Traceback" not in server.log(), server.log()[-3000:]
    assert len(server.started_pids()) == 2
