"""Resume after restart: SIGKILL the server under load, restart it on the same database.

For each backend, the real server process (`spawn_server`) serves a producer thread (creating
jobs, stages and tasks, every POST with an Idempotency-Key) and WORKERS worker threads (dequeue
with a short lease, report COMPLETED with the attempt). Every 2xx answer is recorded. Once the
load is under way the main thread dequeues the HELD job's tasks and never reports them (they are
in flight), and the server group is killed with SIGKILL. A new server on the same database must
then show every acknowledged write: each job, stage and task answered 2xx exists and each
completion answered 200 is COMPLETED, before any client writes again. Then the clients carry on
(the producer retries the request whose answer it lost, with the same key: it is created once),
every job reaches COMPLETED, and the held tasks come back after their lease: they run again and
the run statistics count them as retriedAfterTimeout.

No step waits a fixed time: every wait polls a condition against a deadline.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx

JOBS = 8
TASKS_PER_STAGE = 4
STAGE_TYPES = ("restart-first", "restart-second")
HELD_TYPE = "restart-held"
HELD_TASKS = 4
WORKERS = 4
LEASE = 3  # seconds: a task in flight at the crash is back in the queue this long after dequeue
ENV = {"JOBNIK_SWEEP_INTERVAL": "0.2", "JOBNIK_CATCHUP_INTERVAL": "0.1"}
DEADLINE = 60.0


class Down(Exception):
    """The server did not answer (killed, or not yet restarted): the outcome is unknown."""


@dataclass
class Ledger:
    """What the server acknowledged, shared by the client threads."""

    url: str
    up: threading.Event = field(default_factory=threading.Event)
    done: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)
    jobs: dict[int, str] = field(default_factory=dict)  # job number → id
    stages: dict[tuple[int, int], str] = field(default_factory=dict)  # (job, order) → id
    tasks: dict[str, str] = field(default_factory=dict)  # task id → stage id
    completed: set[str] = field(default_factory=set)
    types: list[str] = field(default_factory=lambda: list(STAGE_TYPES))
    position: int = 0
    errors: list[BaseException] = field(default_factory=list)

    def call(self, c: httpx.Client, method: str, path: str, **kw: Any) -> httpx.Response:
        """One request to the current server; Down when it gives no answer."""
        if not self.up.wait(timeout=DEADLINE):
            raise TimeoutError("the server did not come back")
        try:
            r = c.request(method, self.url + path, **kw)
        except httpx.TransportError as e:
            raise Down from e
        if r.status_code >= 500:
            raise Down(r.text)
        with self.lock:
            self.position = max(self.position, int(r.headers.get("X-Jobnik-Position", 0)))
        return r


def deadline_poll(what: str, ready: Callable[[], bool], timeout: float = DEADLINE) -> None:
    end = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > end:
            raise AssertionError(f"not within {timeout}s: {what}")
        time.sleep(0.05)


def produce(ledger: Ledger) -> None:
    """Create JOBS jobs: job, both stages, the second stage's tasks, then the first's (so the
    first stage cannot complete before the job has all its stages). A request whose answer was
    lost is sent again with the same Idempotency-Key until the server answers."""
    with httpx.Client(timeout=10) as c:

        def create(key: str, path: str, body: Any) -> Any:
            while True:
                try:
                    r = ledger.call(c, "POST", path, json=body, headers={"Idempotency-Key": key})
                except Down:
                    time.sleep(0.02)
                    continue
                assert r.status_code == 201, r.text
                return r.json()

        for n in range(JOBS):
            job = create(f"job-{n}", "/v1/jobs", {"name": "restart", "data": {"n": n}})
            with ledger.lock:
                ledger.jobs[n] = job["id"]
            for order, stage_type in enumerate(STAGE_TYPES):
                body = {"type": stage_type, "data": {"n": n}}
                stage = create(f"stage-{n}-{order}", f"/v1/jobs/{job['id']}/stage", body)
                with ledger.lock:
                    ledger.stages[n, order] = stage["id"]
            for order in reversed(range(len(STAGE_TYPES))):
                stage_id = ledger.stages[n, order]
                body = [
                    {"data": {"n": n, "i": i}, "maxAttempts": 5} for i in range(TASKS_PER_STAGE)
                ]
                for task in create(f"tasks-{n}-{order}", f"/v1/stages/{stage_id}/tasks", body):
                    with ledger.lock:
                        ledger.tasks[task["id"]] = stage_id


def work(ledger: Ledger) -> None:
    """Dequeue every known stage type with a short lease and report COMPLETED, until done."""
    with httpx.Client(timeout=10) as c:
        while not ledger.done.is_set():
            idle = True
            for stage_type in list(ledger.types):
                try:
                    r = ledger.call(
                        c, "PATCH", f"/v1/stages/{stage_type}/tasks/dequeue?lease_seconds={LEASE}"
                    )
                    if r.status_code == 404:
                        continue
                    assert r.status_code == 200, r.text
                    idle = False
                    task = r.json()
                    body = {"status": "COMPLETED", "attempt": task["attempt"]}
                    r = ledger.call(c, "PUT", f"/v1/tasks/{task['id']}/status", json=body)
                except Down:
                    time.sleep(0.02)
                    continue
                if r.status_code == 200:
                    with ledger.lock:
                        ledger.completed.add(task["id"])
                else:  # the lease ran out first (a stalled machine): the sweeper took it back
                    assert (r.status_code, r.json()["code"]) == (409, "STALE_ATTEMPT"), r.text
            if idle:
                time.sleep(0.02)


@contextlib.contextmanager
def clients(ledger: Ledger) -> Iterator[list[threading.Thread]]:
    def guarded(target: Callable[[Ledger], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                target(ledger)
            except BaseException as e:  # noqa: BLE001 - reported by the main thread
                ledger.errors.append(e)
                ledger.done.set()

        return run

    threads = [threading.Thread(target=guarded(produce), name="producer")]
    threads += [threading.Thread(target=guarded(work), name=f"worker-{i}") for i in range(WORKERS)]
    for t in threads:
        t.start()
    try:
        yield threads
    finally:
        ledger.done.set()
        ledger.up.set()  # release anyone waiting for a server
        for t in threads:
            t.join(timeout=30)


def assert_acknowledged_writes_present(c: httpx.Client, ledger: Ledger) -> None:
    with ledger.lock:
        jobs, stages = dict(ledger.jobs), dict(ledger.stages)
        tasks, completed = dict(ledger.tasks), set(ledger.completed)
    for job_id in jobs.values():
        assert c.get(f"/v1/jobs/{job_id}").status_code == 200, job_id
    for stage_id in stages.values():
        assert c.get(f"/v1/stages/{stage_id}").status_code == 200, stage_id
    for task_id in tasks:
        assert c.get(f"/v1/tasks/{task_id}").status_code == 200, task_id
    for task_id in completed:
        assert c.get(f"/v1/tasks/{task_id}").json()["status"] == "COMPLETED", task_id


def statistics(c: httpx.Client, job_id: str, position: int) -> dict[str, Any]:
    """The job's run statistics once the catch-up projection has reached `position`."""
    answer: dict[str, Any] = {}

    def caught_up() -> bool:
        r = c.get(f"/v1/jobs/{job_id}/statistics", params={"min_position": position})
        served = int(r.headers.get("X-Jobnik-Projection-Position", -1))
        answer.update(r.json())
        return r.status_code == 200 and served >= position

    deadline_poll(f"statistics of {job_id} at position {position}", caught_up)
    return answer


def test_a_killed_server_resumes_every_job(
    database_url: str, spawn_server: Callable[..., Any]
) -> None:
    first = spawn_server(database_url, env=ENV)
    ledger = Ledger(first.url)
    with httpx.Client(base_url=first.url, timeout=10) as c:
        held_job = c.post("/v1/jobs", json={"name": "held", "data": {}}).json()
        held_stage = c.post(
            f"/v1/jobs/{held_job['id']}/stage", json={"type": HELD_TYPE, "data": {}}
        ).json()
        held = c.post(
            f"/v1/stages/{held_stage['id']}/tasks", json=[{"data": {}}] * HELD_TASKS
        ).json()
    ledger.up.set()

    with clients(ledger) as threads:
        deadline_poll(
            "load under way",
            lambda: ledger.done.is_set() or (len(ledger.jobs) >= 3 and len(ledger.completed) >= 10),
        )
        with httpx.Client(base_url=first.url, timeout=10) as c:  # in flight at the crash
            dequeued = [
                c.patch(f"/v1/stages/{HELD_TYPE}/tasks/dequeue?lease_seconds={LEASE}") for _ in held
            ]
        ledger.up.clear()
        os.killpg(first.proc.pid, signal.SIGKILL)
        first.proc.wait(timeout=30)
        acknowledged_before = (len(ledger.jobs), len(ledger.tasks), len(ledger.completed))

        second = spawn_server(database_url, env=ENV)
        ledger.url = second.url
        with httpx.Client(base_url=second.url, timeout=10) as c:
            assert_acknowledged_writes_present(c, ledger)
        ledger.types.append(HELD_TYPE)
        ledger.up.set()

        all_jobs = lambda: [*ledger.jobs.values(), held_job["id"]]  # noqa: E731
        with httpx.Client(base_url=second.url, timeout=10) as c:
            deadline_poll(
                "every job COMPLETED",
                lambda: (
                    ledger.done.is_set()
                    or (
                        len(ledger.jobs) == JOBS
                        and all(
                            c.get(f"/v1/jobs/{j}").json()["status"] == "COMPLETED"
                            for j in all_jobs()
                        )
                    )
                ),
            )
        ledger.done.set()
        for t in threads:
            t.join(timeout=30)

    assert not ledger.errors, ledger.errors
    assert [r.status_code for r in dequeued] == [200] * HELD_TASKS
    assert acknowledged_before[0] >= 3
    assert acknowledged_before[2] >= 10
    with httpx.Client(base_url=second.url, timeout=10) as c:
        assert_acknowledged_writes_present(c, ledger)
        for n, job_id in ledger.jobs.items():  # retried creations were created once
            stages = c.get(f"/v1/jobs/{job_id}/stages").json()
            assert [s["type"] for s in stages] == list(STAGE_TYPES), n
            for s in stages:
                assert len(c.get(f"/v1/stages/{s['id']}/tasks").json()) == TASKS_PER_STAGE
        for task in held:  # swept after its lease, dequeued again, completed
            after = c.get(f"/v1/tasks/{task['id']}").json()
            assert (after["status"], after["attempt"] >= 2) == ("COMPLETED", True), after
        held_stats = statistics(c, held_job["id"], ledger.position)
        assert held_stats["retriedAfterTimeoutTaskCount"] >= HELD_TASKS
        assert held_stats["successfulTaskCount"] == HELD_TASKS
        for job_id in ledger.jobs.values():
            stats = statistics(c, job_id, ledger.position)
            assert stats["status"] == "COMPLETED"
            assert stats["successfulTaskCount"] == TASKS_PER_STAGE * len(STAGE_TYPES)
