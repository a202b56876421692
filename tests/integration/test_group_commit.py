"""Group commit on each backend: worker commands that arrive while another is being written share
the next transaction, and each caller still gets exactly the answer, events and trace its own
command would have given it."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any
from uuid import uuid4

import pytest
from fastapi.testclient import TestClient

from jobnik.api import positions
from jobnik.api.grouping import GroupCommit
from jobnik.api.main import app_from_env, app_from_settings
from jobnik.api.settings import Settings
from jobnik.domain.application import Jobnik
from jobnik.domain.errors import DatabaseError, StaleAttempt, TaskNotFound
from jobnik.domain.principals import Actor, Principal
from jobnik.domain.statuses import JobStatus, StageStatus, TaskStatus
from jobnik.projections.store.base import SqlStore
from tests.integration.test_batches import events_of, jobnik_summary, stage_of, stage_status

C, F = TaskStatus.COMPLETED, TaskStatus.FAILED


class Grouped:
    """A Jobnik whose `dequeue` and `report_task` go through the API's group commit; its
    `on_group` observers hear each transaction's number of commands."""

    def __init__(self, jobnik: Jobnik) -> None:
        self.jobnik = jobnik
        self.on_group: list[Callable[[int], None]] = []
        self.commit = GroupCommit(jobnik, self._observe)
        self.grouper = self.commit

    def dequeue(self, *args: Any, **kwargs: Any) -> Any:
        """The route's await, as a request of its own (a thread's event loop)."""
        return asyncio.run(self.commit.dequeue(*args, **kwargs))

    def report_task(self, *args: Any, **kwargs: Any) -> Any:
        return asyncio.run(self.commit.report_task(*args, **kwargs))

    def _observe(self, n: int) -> None:
        """Each observer hears of it; the first error, if any, is raised after all did."""
        errors = []
        for observe in list(self.on_group):
            try:
                observe(n)
            except Exception as exc:  # noqa: BLE001 - raised below
                errors.append(exc)
        if errors:
            raise errors[0]

    def __getattr__(self, name: str) -> Any:
        return getattr(self.jobnik, name)


@pytest.fixture
def grouped(store: SqlStore) -> Any:
    return Grouped(Jobnik(store))


def traced(name: str) -> Principal:
    return Principal(Actor.WORKER.name, trace_id=f"{name:0>32}")


def in_order(
    jobnik: Any, calls: list[Callable[[], Any]]
) -> tuple[list[Any], list[dict[str, int]], list[int]]:
    """Run `calls[0]` and hold its group until `calls[1:]` wait for it, arriving in their
    order (so `calls[1]` leads the next group). Each call runs as a request would: with its own
    positions box. Each call's result (or exception), its box, and the group sizes."""
    sizes: list[int] = []
    release = threading.Event()

    def observe(n: int) -> None:
        sizes.append(n)
        if len(sizes) == 1:
            assert release.wait(10)

    results: list[Any] = [None] * len(calls)
    boxes: list[dict[str, int]] = [{} for _ in calls]

    def run(i: int) -> None:
        positions.REQUEST_POSITIONS.set(boxes[i])
        try:
            results[i] = calls[i]()
        except Exception as exc:  # noqa: BLE001 - each call's answer, compared below
            results[i] = exc

    jobnik.on_group.append(observe)
    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    threads[0].start()
    _until(lambda: bool(sizes))
    for n, t in enumerate(threads[1:], start=1):
        t.start()
        _until(lambda n=n: jobnik.grouper.waiting == n)  # type: ignore[misc]
    release.set()
    for t in threads:
        t.join(30)
    jobnik.on_group.remove(observe)
    return results, boxes, sizes


def _until(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 10
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.001)


def trace_of(store: SqlStore, task_id: Any, kind: str) -> str | None:
    for stored in reversed(store.recorder.select_events(task_id)):
        event = store.mapper.to_domain_event(stored)
        if type(event).__name__ == kind:
            return getattr(event, "trace_id", None)
    raise AssertionError(f"no {kind} for {task_id}")


def test_calls_made_together_share_a_transaction_and_each_gets_its_own_answer(
    store: SqlStore, grouped: Any
) -> None:
    stage_of(grouped, "g-lead", 1)
    stage = stage_of(grouped, "g-work", 4)
    failing = stage_of(grouped, "g-fail", 1, max_attempts=1)
    done, stale = grouped.dequeue("g-work"), grouped.dequeue("g-work")
    doomed = grouped.dequeue("g-fail")
    missing = uuid4()

    results, _, sizes = in_order(
        grouped,
        [
            lambda: grouped.dequeue("g-lead"),
            lambda: grouped.dequeue("g-work", by=traced("a")),
            lambda: grouped.dequeue("g-work", 90, by=traced("b")),
            lambda: grouped.dequeue("g-work"),  # two were left: this one finds none
            lambda: grouped.report_task(done.id, C, attempt=done.attempt, by=traced("c")),
            lambda: grouped.report_task(stale.id, C, attempt=stale.attempt + 1),
            lambda: grouped.report_task(missing, C, attempt=1),
            lambda: grouped.report_task(doomed.id, F, attempt=doomed.attempt, reason="boom"),
        ],
    )

    assert sizes == [1, 7]
    lead, a, b, none, completed, refused, unknown, failed = results
    assert (lead.stage_type, lead.status) == ("g-lead", TaskStatus.IN_PROGRESS)
    assert {a.stage_id, b.stage_id} == {stage.id}
    assert a.id != b.id
    assert (b.lease_expires_at - b.start_time).total_seconds() == 90
    assert isinstance(none, TaskNotFound)
    assert (completed.id, completed.status) == (done.id, C)
    assert isinstance(refused, StaleAttempt)
    assert isinstance(unknown, TaskNotFound)
    assert failed.status == F
    assert events_of(store, a.id).count("TaskDequeued") == 1
    assert events_of(store, stale.id)[-1] == "TaskAttemptRefused"
    assert trace_of(store, a.id, "TaskDequeued") == f"{'a':0>32}"
    assert trace_of(store, b.id, "TaskDequeued") == f"{'b':0>32}"
    assert trace_of(store, done.id, "TaskCompleted") == f"{'c':0>32}"
    summary = jobnik_summary(store, stage.id)
    assert (summary["completed"], summary["in_progress"], summary["pending"]) == (1, 3, 0)
    assert stage_status(store, failing.id) == StageStatus.FAILED
    with store.session(write=False) as s:
        assert s.job(failing.job_id).status == JobStatus.FAILED


def test_a_report_without_attempt_in_a_group_is_fenced_by_the_version_it_read(
    store: SqlStore, grouped: Any
) -> None:
    stage_of(grouped, "g-lead", 1)
    stage_of(grouped, "g-sdk", 1)
    task = grouped.dequeue("g-sdk")

    results, _, sizes = in_order(
        grouped,
        [
            lambda: grouped.dequeue("g-lead"),
            lambda: grouped.report_task(task.id, C, by=Actor.API),
        ],
    )

    assert sizes == [1, 1]  # a group of one runs as its own command
    assert results[1].status == C
    assert events_of(store, task.id)[-1] == "TaskCompleted"


def test_when_the_shared_transaction_fails_each_call_runs_on_its_own(
    store: SqlStore, grouped: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    stage_of(grouped, "g-lead", 1)
    stage = stage_of(grouped, "g-again", 3)
    first = grouped.dequeue("g-again")
    failures: list[int] = []

    def broken(dequeues: Any, reports: Any) -> None:
        failures.append(len(dequeues) + len(reports))
        raise DatabaseError("the database went away")

    monkeypatch.setattr(grouped.jobnik, "run_together", broken)
    results, _, sizes = in_order(
        grouped,
        [
            lambda: grouped.dequeue("g-lead"),
            lambda: grouped.dequeue("g-again"),
            lambda: grouped.dequeue("g-again"),
            lambda: grouped.report_task(first.id, C, attempt=first.attempt),
        ],
    )

    # counted as the transactions that ran: the first alone, then each of the failed group's
    assert (sizes, failures) == ([1, 1, 1, 1], [3])
    assert [r.status for r in results] == [TaskStatus.IN_PROGRESS] * 3 + [C]
    summary = jobnik_summary(store, stage.id)
    assert (summary["completed"], summary["in_progress"]) == (1, 2)


def test_many_workers_through_group_commit_complete_every_task_once(
    store: SqlStore, grouped: Any
) -> None:
    stage = stage_of(grouped, "g-many", 120)
    sizes: list[int] = []
    grouped.on_group.append(sizes.append)
    completed: list[Any] = []
    lock = threading.Lock()

    def worker() -> None:
        while True:
            try:
                task = grouped.dequeue("g-many")
            except TaskNotFound:
                return
            grouped.report_task(task.id, C, attempt=task.attempt)
            with lock:
                completed.append(task.id)

    threads = [threading.Thread(target=worker) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)

    assert len(completed) == len(set(completed)) == 120
    assert sum(sizes) == 240 + 6  # every call went through a group, each last dequeue too
    assert stage_status(store, stage.id) == StageStatus.COMPLETED
    assert all(events_of(store, t).count("TaskCompleted") == 1 for t in completed)


def test_the_api_server_groups_worker_commands_and_counts_them_in_its_metrics(
    database_url: str,
) -> None:
    app = app_from_env({"JOBNIK_DATABASE_URL": database_url})
    with TestClient(app) as http:
        jobnik = app.state.jobnik
        stage_of(jobnik, "g-http", 2)
        before = _groups_counted(http)
        for _ in range(2):
            task = http.patch("/v1/stages/g-http/tasks/dequeue").json()
            answer = http.put(
                f"/v1/tasks/{task['id']}/status",
                json={"status": "COMPLETED", "attempt": task["attempt"]},
            )
            assert answer.status_code == 200
        assert http.patch("/v1/stages/g-http/tasks/dequeue").status_code == 404

        assert _groups_counted(http) - before == 5  # 2 dequeues, 2 reports, the last dequeue


def test_group_commit_can_be_turned_off(database_url: str) -> None:
    on = Settings.from_env({"JOBNIK_DATABASE_URL": database_url})
    off = Settings.from_env({"JOBNIK_DATABASE_URL": database_url, "JOBNIK_GROUP_COMMIT": "false"})
    assert (on.group_commit, off.group_commit) == (True, False)
    app = app_from_settings(off)
    with TestClient(app) as http:
        assert app.state.work.limit == 1  # each command its own transaction
        stage_of(app.state.jobnik, "g-off", 1)
        before = _groups_counted(http)
        assert http.patch("/v1/stages/g-off/tasks/dequeue").status_code == 200
        assert _groups_counted(http) == before + 1


def _groups_counted(http: TestClient) -> float:
    for line in http.get("/metrics").text.splitlines():
        if line.startswith("jobnik_group_commit_commands_sum "):
            return float(line.split()[1])
    raise AssertionError("no jobnik_group_commit_commands in /metrics")


def test_an_observer_that_raises_does_not_run_a_committed_group_again(
    store: SqlStore, grouped: Any
) -> None:
    stage_of(grouped, "g-obs-lead", 1)
    stage = stage_of(grouped, "g-obs", 4)

    def broken_metric(n: int) -> None:
        if n > 1:
            raise RuntimeError("the metrics backend failed")

    grouped.on_group.append(broken_metric)
    results, _, sizes = in_order(
        grouped,
        [
            lambda: grouped.dequeue("g-obs-lead"),
            lambda: grouped.dequeue("g-obs"),
            lambda: grouped.dequeue("g-obs"),
        ],
    )
    grouped.on_group.remove(broken_metric)

    assert sizes == [1, 2]
    assert [r.status for r in results] == [TaskStatus.IN_PROGRESS] * 3
    assert jobnik_summary(store, stage.id)["in_progress"] == 2  # two dequeues, two tasks
