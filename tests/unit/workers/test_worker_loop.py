from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest

from jobnik.workers import (
    DELEGATED,
    AccessRefused,
    Backoff,
    FatalTaskError,
    Task,
    TaskContext,
    Worker,
)
from jobnik.workers import loop as worker_loop

from .fake_api import FakeApi, task_json

FAST = Backoff(initial=0.005, factor=2.0, maximum=0.02, jitter=0.0)
TIMEOUT = 5.0


@dataclass(frozen=True)
class RecordingBackoff(Backoff):
    calls: list[int] = field(default_factory=list)

    def delay(self, n: int) -> float:
        self.calls.append(n)
        return super().delay(n)


def wait_until(condition: Callable[[], bool], timeout: float = TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not true within {timeout}s: {condition}")
        time.sleep(0.005)


@contextmanager
def running(worker: Worker) -> Iterator[threading.Thread]:
    thread = threading.Thread(target=worker.run, kwargs={"install_signal_handlers": False})
    thread.start()
    try:
        yield thread
    finally:
        worker.stop()
        thread.join(TIMEOUT + worker.grace_period)
        assert not thread.is_alive(), "worker.run() did not return"


def make_worker(fake: FakeApi, handler: Any, **options: Any) -> Worker:
    options.setdefault("backoff", FAST)
    return Worker("tiles", handler, client=fake.client(), **options)


# -- reports --------------------------------------------------------------------------------


def test_a_returning_handler_is_reported_completed_with_its_attempt() -> None:
    fake = FakeApi()
    fake.add(task_json(1, attempt=4))
    worker = make_worker(fake, lambda task, context: None)

    with running(worker):
        wait_until(lambda: len(fake.reports) == 1)

    assert fake.reports[0].path == f"/v1/tasks/{task_json(1)['id']}/status"
    assert fake.reports[0].body == {"status": "COMPLETED", "attempt": 4}
    assert (worker.stats.done, worker.stats.failed, worker.stats.running) == (1, 0, 0)


@pytest.mark.parametrize(
    ("returned", "result"),
    [({"tiles": 3}, {"tiles": 3}), ("done", {"value": "done"}), ([1, 2], {"value": [1, 2]})],
)
def test_what_a_handler_returns_is_reported_as_the_tasks_result(
    returned: object, result: dict[str, object]
) -> None:
    reports, _ = reports_after_returning(returned)

    assert reports[0].body == {"status": "COMPLETED", "attempt": 1, "result": result}


def reports_after_returning(
    returned: object, reports: int = 1, **fake: Any
) -> tuple[list[Any], Worker]:
    """The status reports of one task whose handler returns `returned`, and its worker."""
    api = FakeApi(**fake)
    api.add(task_json(1, attempt=1))
    worker = make_worker(api, lambda task, context: returned)
    with running(worker):
        wait_until(lambda: len(api.reports) == reports)
    return api.reports, worker


def test_returning_delegated_reports_the_task_delegated() -> None:
    fake = FakeApi()
    fake.add(task_json(1, attempt=1))
    worker = make_worker(fake, lambda task, context: DELEGATED)

    with running(worker):
        wait_until(lambda: len(fake.reports) == 1)

    assert fake.reports[0].body == {"status": "DELEGATED", "attempt": 1}
    assert (worker.stats.delegated, worker.stats.done) == (1, 0)


def test_a_raising_handler_is_reported_failed_with_the_reason() -> None:
    fake = FakeApi()
    fake.add(task_json(1, attempt=2))

    def handler(task: Task, context: TaskContext) -> None:
        raise ValueError(f"tile {task.data['n']} is corrupt")

    worker = make_worker(fake, handler)

    with running(worker):
        wait_until(lambda: len(fake.reports) == 1)

    assert fake.reports[0].body == {
        "status": "FAILED",
        "attempt": 2,
        "reason": "ValueError: tile 1 is corrupt",
    }
    assert (worker.stats.done, worker.stats.failed) == (0, 1)


def test_a_fatal_task_error_is_reported_failed_and_fatal() -> None:
    fake = FakeApi()
    fake.add(task_json(1))

    def handler(task: Task, context: TaskContext) -> None:
        raise FatalTaskError("bad input")

    worker = make_worker(fake, handler)

    with running(worker):
        wait_until(lambda: len(fake.reports) == 1)

    assert fake.reports[0].body == {
        "status": "FAILED",
        "attempt": 1,
        "fatal": True,
        "reason": "FatalTaskError: bad input",
    }


def test_a_long_failure_reason_is_cut_to_what_the_api_accepts() -> None:
    fake = FakeApi()
    fake.add(task_json(1))

    def handler(task: Task, context: TaskContext) -> None:
        raise RuntimeError("x" * 5000)

    worker = make_worker(fake, handler)

    with running(worker):
        wait_until(lambda: len(fake.reports) == 1)

    assert len(fake.reports[0].body["reason"]) == 2000


def test_a_coroutine_handler_is_awaited_and_reported() -> None:
    fake = FakeApi()
    fake.add(task_json(1), task_json(2))
    awaited: list[int] = []

    async def handler(task: Task, context: TaskContext) -> None:
        await asyncio.sleep(0.01)
        if task.data["n"] == 2:
            raise ValueError("async failure")
        awaited.append(task.data["n"])

    worker = make_worker(fake, handler)

    with running(worker):
        wait_until(lambda: len(fake.reports) == 2)

    assert awaited == [1]
    assert [r.body["status"] for r in fake.reports] == ["COMPLETED", "FAILED"]
    assert fake.reports[1].body["reason"] == "ValueError: async failure"


def test_plain_handlers_run_concurrently_up_to_the_concurrency() -> None:
    fake = FakeApi()
    fake.add(*(task_json(n) for n in range(1, 7)))
    together = threading.Barrier(3, timeout=TIMEOUT)

    def handler(task: Task, context: TaskContext) -> None:
        together.wait()  # only passes when three handlers run at once

    worker = make_worker(fake, handler, concurrency=3)

    with running(worker):
        wait_until(lambda: len(fake.reports) == 6)

    assert worker.stats.done == 6


# -- polling --------------------------------------------------------------------------------


def test_an_empty_queue_is_polled_with_growing_backoff_that_resets_after_a_task() -> None:
    fake = FakeApi()
    backoff = RecordingBackoff(initial=0.01, factor=2.0, maximum=0.04, jitter=0.0)
    worker = make_worker(fake, lambda task, context: None, backoff=backoff)

    with running(worker):
        wait_until(lambda: len(backoff.calls) >= 5)
        fake.add(task_json(1))
        wait_until(lambda: len(fake.reports) == 1)
        wait_until(lambda: len(backoff.calls) >= 8)

    streak = backoff.calls[: backoff.calls.index(1, 1)]
    assert streak[:5] == [1, 2, 3, 4, 5]
    assert backoff.calls[len(streak)] == 1  # the first empty poll after the task
    gaps = [b.time - a.time for a, b in zip(fake.dequeues, fake.dequeues[1:], strict=False)]
    assert gaps[0] < 0.04
    assert gaps[3] >= 0.035  # capped at 0.04 from the third delay on


def test_the_dequeue_asks_for_a_lease_of_three_heartbeat_intervals() -> None:
    fake = FakeApi()
    default = make_worker(fake, lambda task, context: None, heartbeat_interval=2.5)
    explicit = make_worker(FakeApi(), lambda task, context: None, lease_seconds=45)

    with running(default):
        wait_until(lambda: len(fake.dequeues) >= 1)

    assert fake.dequeues[0].params == {"lease_seconds": "8"}
    assert explicit.lease_seconds == 45


def test_api_errors_on_dequeue_are_backed_off_and_polling_goes_on() -> None:
    fake = FakeApi(failing_dequeues=3)
    fake.add(task_json(1))
    backoff = RecordingBackoff(initial=0.005, factor=2.0, maximum=0.02, jitter=0.0)
    worker = make_worker(fake, lambda task, context: None, backoff=backoff)

    with running(worker):
        wait_until(lambda: len(fake.reports) == 1)

    assert backoff.calls[:3] == [1, 2, 3]
    assert worker.stats.done == 1


def test_a_worker_keeps_polling_after_a_very_long_idle_streak() -> None:
    fake = FakeApi()
    tiny = Backoff(initial=1e-7, factor=2.0, maximum=1e-6, jitter=0.0)
    worker = make_worker(fake, lambda task, context: None, backoff=tiny)
    died: list[BaseException] = []
    hook, threading.excepthook = threading.excepthook, lambda a: died.append(a.exc_value)

    try:
        with running(worker):
            wait_until(lambda: len(fake.dequeues) >= 1100 or bool(died), timeout=20)
            count = len(fake.dequeues)
            time.sleep(0.1)
            still_polling = len(fake.dequeues) > count
    finally:
        threading.excepthook = hook

    assert died == []
    assert still_polling


def test_a_refused_report_is_counted_and_the_worker_goes_on() -> None:
    fake = FakeApi()
    fake.add(task_json(1), task_json(2))
    fake.refuse_reports_of.add(task_json(1)["id"])
    worker = make_worker(fake, lambda task, context: None)

    with running(worker):
        wait_until(lambda: len(fake.reports) == 2)

    assert (worker.stats.refused, worker.stats.done, worker.stats.running) == (1, 1, 0)


# -- access refused: a configuration to fix, not a task's failure ---------------------------


def run_until_stopped(worker: Worker, timeout: float = 2.0) -> BaseException | None:
    """Run the worker until it stops by itself (or `timeout`, then stop it): what run() raised."""
    raised: list[BaseException] = []

    def run() -> None:
        try:
            worker.run(install_signal_handlers=False)
        except BaseException as exc:  # noqa: BLE001 - the test looks at it
            raised.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(timeout)
    worker.stop()
    thread.join(TIMEOUT + worker.grace_period)
    assert not thread.is_alive(), "worker.run() did not return"
    return raised[0] if raised else None


def test_a_403_to_a_handlers_call_hands_the_task_back_and_stops_the_worker() -> None:
    fake = FakeApi(refused_paths=("/user-metadata",))
    fake.add(task_json(1, attempt=2), task_json(2), task_json(3))

    def handler(task: Task, context: TaskContext) -> None:
        context.update_task_user_metadata({"uploadedAt": 1})

    raised = run_until_stopped(make_worker(fake, handler))

    assert isinstance(raised, AccessRefused)
    assert (raised.error.status, raised.error.code) == (403, "FORBIDDEN")
    assert "check its token (JOBNIK_TOKEN)" in str(raised)
    assert fake.reports == []  # no attempt spent on a FAILED report
    (released,) = fake.releases
    assert released.path == f"/v1/tasks/{task_json(1)['id']}/release"
    assert released.body["attempt"] == 2
    assert released.body["reason"].startswith("access refused: 403 FORBIDDEN")
    assert len(fake.dequeues) == 1  # and no more work asked for
    assert len(fake.queue) == 2


@pytest.mark.parametrize("status", [401, 403])
def test_a_refused_dequeue_stops_the_worker_saying_why(status: int) -> None:
    fake = FakeApi(refused_paths=("/tasks/dequeue",), refused_status=status)
    worker = make_worker(fake, lambda task, context: None, concurrency=3)

    raised = run_until_stopped(worker)

    assert isinstance(raised, AccessRefused)
    assert raised.error.status == status
    assert len(fake.dequeues) <= 3  # each poller's first try, no backing off and polling on


def test_a_refused_report_stops_the_worker() -> None:
    fake = FakeApi(refused_paths=("/status",), refused_status=401)
    fake.add(task_json(1), task_json(2))

    raised = run_until_stopped(make_worker(fake, lambda task, context: None))

    assert isinstance(raised, AccessRefused)
    assert len(fake.reports) == 1
    assert len(fake.queue) == 1


# -- the task context -----------------------------------------------------------------------


def test_the_stage_and_job_are_fetched_once_per_task() -> None:
    fake = FakeApi()
    fake.add(task_json(1), task_json(2))
    seen: list[tuple[str, str]] = []

    def handler(task: Task, context: TaskContext) -> None:
        for _ in range(3):
            seen.append((context.stage.data["resolution"], context.job.data["mapId"]))

    worker = make_worker(fake, handler)

    with running(worker):
        wait_until(lambda: len(fake.reports) == 2)

    assert seen == [("high", "map-1")] * 6
    assert len(fake.seen("GET", "")) == 4  # one stage and one job per task


def test_context_log_appends_lines_with_the_attempt() -> None:
    fake = FakeApi()
    fake.add(task_json(1, attempt=3))

    def handler(task: Task, context: TaskContext) -> None:
        context.log("started", "step 1")
        context.log("done")

    worker = make_worker(fake, handler)

    with running(worker):
        wait_until(lambda: len(fake.reports) == 1)

    assert [r.body for r in fake.seen("POST", "/logs")] == [
        {"attempt": 3, "lines": ["started", "step 1"]},
        {"attempt": 3, "lines": ["done"]},
    ]


# -- heartbeats and cancellation ------------------------------------------------------------


def test_a_heartbeat_answering_cancelled_sets_context_cancelled() -> None:
    fake = FakeApi()
    fake.add(task_json(1, attempt=2))
    observed: list[tuple[bool, str | None]] = []

    def handler(task: Task, context: TaskContext) -> None:
        observed.append((context.cancelled, context.cancel_reason))
        context.wait_cancelled(TIMEOUT)
        observed.append((context.cancelled, context.cancel_reason))

    worker = make_worker(fake, handler, heartbeat_interval=0.05)

    with running(worker):
        wait_until(lambda: len(fake.heartbeats) >= 2)
        fake.cancelled = True
        wait_until(lambda: len(fake.reports) == 1)

    assert observed == [(False, None), (True, "job aborted")]
    assert {h.body["attempt"] for h in fake.heartbeats} == {2}
    assert fake.reports[0].body == {"status": "COMPLETED", "attempt": 2}


def test_a_refused_heartbeat_cancels_the_handler_as_lease_lost() -> None:
    fake = FakeApi(heartbeat_status=409)
    fake.add(task_json(1))
    reasons: list[str | None] = []

    def handler(task: Task, context: TaskContext) -> None:
        context.wait_cancelled(TIMEOUT)
        reasons.append(context.cancel_reason)

    worker = make_worker(fake, handler, heartbeat_interval=0.05)

    with running(worker):
        wait_until(lambda: len(reasons) == 1)

    assert reasons == ["lease lost"]


def test_heartbeats_come_every_interval_while_a_handler_runs() -> None:
    fake = FakeApi()
    fake.add(task_json(1))
    worker = make_worker(fake, lambda task, context: time.sleep(0.5), heartbeat_interval=0.1)

    with running(worker):
        wait_until(lambda: len(fake.reports) == 1)

    assert 3 <= len(fake.heartbeats) <= 7


def test_a_report_waits_for_a_heartbeat_in_flight_and_no_heartbeat_follows_it() -> None:
    gate = threading.Event()
    fake = FakeApi(heartbeat_gate=gate)
    fake.add(task_json(1, attempt=2))
    worker = make_worker(
        fake,
        lambda task, context: wait_until(lambda: fake.heartbeats_held == 1),
        heartbeat_interval=0.05,
    )

    with running(worker):
        wait_until(lambda: worker.stats.running == 1 and fake.heartbeats_held == 1)
        time.sleep(0.2)  # the handler has returned; its heartbeat is still on the wire
        held_reports = len(fake.reports)
        gate.set()
        wait_until(lambda: len(fake.reports) == 1)
        time.sleep(0.2)  # a few more heartbeat intervals

    assert held_reports == 0, "the report overtook the heartbeat in flight"
    (report,) = fake.reports
    assert [h.time < report.time for h in fake.heartbeats] == [True]


# -- stopping -------------------------------------------------------------------------------


def test_stop_waits_for_running_handlers_and_returns_once_they_finish() -> None:
    fake = FakeApi()
    fake.add(task_json(1), task_json(2), task_json(3))
    started = threading.Semaphore(0)

    def handler(task: Task, context: TaskContext) -> None:
        started.release()
        # busy until the stop, then a while longer: a loaded machine cannot let one finish
        # (and the worker dequeue the third) before the test stops it
        deadline = time.monotonic() + TIMEOUT
        while not worker.stopping and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.3)

    worker = make_worker(fake, handler, concurrency=2, grace_period=10.0)
    thread = threading.Thread(target=worker.run, kwargs={"install_signal_handlers": False})
    thread.start()
    for _ in range(2):
        assert started.acquire(timeout=TIMEOUT)
    dequeues = len(fake.dequeues)

    began = time.monotonic()
    worker.stop()
    thread.join(TIMEOUT)
    took = time.monotonic() - began

    assert not thread.is_alive()
    assert took < 2.0
    assert [r.body["status"] for r in fake.reports] == ["COMPLETED", "COMPLETED"]
    assert fake.releases == []
    assert len(fake.dequeues) == dequeues  # stopped polling: the third task stays queued
    assert len(fake.queue) == 1


def test_stop_hands_back_a_task_whose_handler_outlives_the_grace_period() -> None:
    fake = FakeApi()
    fake.add(task_json(1, attempt=1), task_json(2, attempt=5))
    started = threading.Semaphore(0)
    slow_done = threading.Event()
    reasons: list[str | None] = []

    def handler(task: Task, context: TaskContext) -> None:
        started.release()
        if task.data["n"] == 1:
            time.sleep(0.1)
            return
        context.wait_cancelled(TIMEOUT)
        reasons.append(context.cancel_reason)
        time.sleep(0.2)  # and keeps going a little after being told
        slow_done.set()

    worker = make_worker(fake, handler, concurrency=2, grace_period=0.5)
    thread = threading.Thread(target=worker.run, kwargs={"install_signal_handlers": False})
    thread.start()
    for _ in range(2):
        assert started.acquire(timeout=TIMEOUT)

    began = time.monotonic()
    worker.stop()
    thread.join(TIMEOUT)
    took = time.monotonic() - began
    assert slow_done.wait(TIMEOUT)

    assert not thread.is_alive()
    assert 0.45 <= took < 2.0
    assert [r.body for r in fake.reports] == [{"status": "COMPLETED", "attempt": 1}]
    assert [(r.path, r.body) for r in fake.releases] == [
        (
            f"/v1/tasks/{task_json(2)['id']}/release",
            {"attempt": 5, "reason": "worker shutting down"},
        )
    ]
    assert reasons == ["worker shutting down"]


def test_draining_keeps_the_heartbeat_interval() -> None:
    fake = FakeApi()
    fake.add(task_json(1))
    started = threading.Event()

    def handler(task: Task, context: TaskContext) -> None:
        started.set()
        time.sleep(0.5)

    worker = make_worker(fake, handler, heartbeat_interval=0.2, grace_period=5.0)

    with running(worker):
        assert started.wait(TIMEOUT)
        worker.stop()
        wait_until(lambda: len(fake.reports) == 1)

    assert len(fake.heartbeats) <= 5


def test_a_handler_that_returns_when_told_of_shutdown_is_handed_back_not_reported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class PreemptedContext(TaskContext):
        def cancel(self, reason: str) -> None:
            super().cancel(reason)
            time.sleep(0.2)  # the OS may switch threads right here

    monkeypatch.setattr(worker_loop, "TaskContext", PreemptedContext)
    fake = FakeApi()
    fake.add(task_json(1))
    started = threading.Event()

    def handler(task: Task, context: TaskContext) -> None:
        started.set()
        context.wait_cancelled(TIMEOUT)  # returns early: nothing finished

    worker = make_worker(fake, handler, grace_period=0.2)

    with running(worker):
        assert started.wait(TIMEOUT)
        worker.stop()
        wait_until(lambda: len(fake.releases) == 1)
        time.sleep(0.3)

    assert fake.reports == []


@pytest.mark.parametrize(
    ("returned", "why"),
    [
        ({"score": float("nan")}, "body/result/score is nan"),
        ({"score": float("inf")}, "body/result/score is inf"),
        ({"big": 2**64}, "body/result/big is an integer beyond 64 bits"),
        ({"text": "a\x00b"}, "body/result/text contains a NUL character"),
        ({"text": "\udc00"}, "lone surrogate"),
    ],
)
def test_a_result_the_sdk_cannot_send_reports_the_task_failed_with_the_reason(
    returned: object, why: str
) -> None:
    (report,), worker = reports_after_returning(returned)

    assert report.body["status"] == "FAILED"
    assert report.body["reason"].startswith("the handler's result could not be reported")
    assert why in report.body["reason"]
    assert (worker.stats.done, worker.stats.failed) == (0, 1)


def test_a_result_the_server_refuses_reports_the_task_failed_with_its_reason() -> None:
    (completed, failed), _ = reports_after_returning(
        {"deep": "enough"}, reports=2, refuse_results=True
    )

    assert completed.body["status"] == "COMPLETED"
    assert failed.body["status"] == "FAILED"
    assert "400 JSON_TOO_DEEP" in failed.body["reason"]
