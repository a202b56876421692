"""Concurrency limits per stage type on both backends: a claim never takes a type's tasks in
progress over its limit, even with 8 claimers at once; other types go on; each change is an
event; a rebuild restores the limits and verify is clean."""

from __future__ import annotations

import random
import threading
import time
from typing import Any

import pytest

from jobnik.domain.application import Jobnik, NewJob, NewStage, NewTask
from jobnik.domain.errors import InvalidLimit, LimitNotFound, TaskNotFound
from jobnik.domain.limit_commands import LimitCommands
from jobnik.domain.limits import limit_id
from jobnik.domain.principals import Principal, Role
from jobnik.domain.statuses import TaskStatus
from jobnik.domain.tasks import Task
from jobnik.projections.rebuild.bluegreen import rebuild
from jobnik.projections.rebuild.verify import verify
from jobnik.projections.store.base import SqlStore

from .test_rebuild import snapshot
from .threads import in_threads

OPS = Principal("ops", Role.OPERATOR)


def queue(jobnik: Jobnik, stage_type: str, n: int) -> list[Task]:
    job = jobnik.create_job(NewJob("work", {}))
    stage = jobnik.add_stage(job.id, NewStage(stage_type, {}))
    return jobnik.add_tasks(stage.id, [NewTask({"i": i}) for i in range(n)])


def claim(jobnik: Jobnik, stage_type: str) -> Task | None:
    try:
        return jobnik.dequeue(stage_type)
    except TaskNotFound:
        return None


def in_progress(store: SqlStore, stage_type: str) -> int:
    with store.cursor(write=False) as cur:
        row = cur.one(
            store.dialect.params(
                "SELECT count(*) AS n FROM tasks_v1 WHERE stage_type = %(t)s "
                "AND status = 'IN_PROGRESS'"
            ),
            {"t": stage_type},
        )
    assert row is not None
    return int(row["n"])


def test_a_claim_takes_no_more_than_the_limit_and_other_types_go_on(
    jobnik: Jobnik, limits: LimitCommands
) -> None:
    queue(jobnik, "render", 6)
    queue(jobnik, "encode", 2)
    limits.set("render", 2, by=OPS, reason="licence for 2")

    first, second = claim(jobnik, "render"), claim(jobnik, "render")
    assert first is not None
    assert second is not None
    assert claim(jobnik, "render") is None  # at its limit: held back
    assert claim(jobnik, "encode") is not None  # another type is not

    jobnik.report_task(first.id, TaskStatus.COMPLETED)
    assert claim(jobnik, "render") is not None  # room again
    assert claim(jobnik, "render") is None

    limits.set("render", 4, by=OPS)
    assert [t.stage_type for t in jobnik.dequeue_batch("render", 10)] == ["render"] * 2

    limits.remove("render", by=OPS, reason="licence server gone")
    assert claim(jobnik, "render") is not None  # no limit: what is queued


def test_a_lowered_limit_holds_claims_back_until_the_tasks_in_progress_are_fewer(
    jobnik: Jobnik, limits: LimitCommands
) -> None:
    queue(jobnik, "render", 5)
    running = [claim(jobnik, "render") for _ in range(3)]
    limits.set("render", 1, by=OPS)
    assert claim(jobnik, "render") is None
    assert jobnik.dequeue_batch("render", 5) == []
    for task in running[:2]:
        assert task is not None
        jobnik.report_task(task.id, TaskStatus.COMPLETED)
    assert claim(jobnik, "render") is None  # one still in progress: the limit's one
    assert running[2] is not None
    jobnik.report_task(running[2].id, TaskStatus.FAILED)  # RETRIED: back in the queue
    assert claim(jobnik, "render") is not None


def test_each_change_is_an_event_with_its_actor_and_reason(
    store: SqlStore, limits: LimitCommands
) -> None:
    limits.set("render", 2, by=OPS, reason="licence for 2")
    limits.set("render", 2, by=OPS, reason="the same again")  # no change, no event
    limits.set("render", 3, by=OPS, reason="a third seat")
    limits.remove("render", by=OPS, reason="licence server gone")
    limits.set("render", 1, by=OPS)
    found = list(store.log_app.events.get(limit_id("render")))
    assert [(type(e).__name__, e.actor, e.reason) for e in found] == [
        ("LimitsCreated", "ops", None),
        ("ConcurrencyLimitSet", "ops", "licence for 2"),
        ("ConcurrencyLimitSet", "ops", "a third seat"),
        ("ConcurrencyLimitRemoved", "ops", "licence server gone"),
        ("ConcurrencyLimitSet", "ops", None),
    ]


@pytest.mark.parametrize(
    ("stage_type", "value"), [("render", 0), ("render", -3), ("x" * 51, 2), ("", 2)]
)
def test_a_bad_limit_is_refused_and_writes_nothing(
    store: SqlStore, limits: LimitCommands, stage_type: str, value: int
) -> None:
    before = store.log_app.recorder.max_notification_id()
    with pytest.raises(InvalidLimit):
        limits.set(stage_type, value, by=OPS)
    assert store.log_app.recorder.max_notification_id() == before
    with pytest.raises(LimitNotFound):
        limits.remove("render", by=OPS)


def test_rebuilt_limits_equal_their_live_twins_and_verify_is_clean(
    store: SqlStore, jobnik: Jobnik, limits: LimitCommands
) -> None:
    queue(jobnik, "render", 3)
    limits.set("render", 2, by=OPS, reason="licence for 2")
    limits.set("encode", 5, by=OPS)
    limits.remove("encode", by=OPS)
    claim(jobnik, "render")
    live = snapshot(store)
    assert len(live["stage_type_limits_v1"]) == 2

    rebuild(store)

    assert snapshot(store) == live
    assert verify(store) == []
    claim(jobnik, "render")
    assert claim(jobnik, "render") is None  # the rebuilt limit still holds


# -- under concurrency -------------------------------------------------------------------------


@pytest.mark.parametrize(("batch", "order"), [(1, "fifo"), (3, "fifo"), (1, "fair"), (3, "fair")])
def test_eight_concurrent_claimers_never_exceed_the_limit_and_leave_nothing_behind(
    store: SqlStore, jobnik: Jobnik, limits: LimitCommands, batch: int, order: str
) -> None:
    """8 threads claim (one task or a batch), hold, and complete until the queue is empty;
    meanwhile a watcher reads the database's count of tasks in progress. Neither the claimers'
    own count (which never exceeds the database's: it rises after a claim commits and falls
    before a report) nor the database's ever exceeds the limit, and every task completes; in
    either queue order (fair: four jobs take turns)."""
    limit, total = 3, 40
    limits.set_order("render", order, by=OPS)
    for _ in range(4):
        queue(jobnik, "render", total // 4)
    limits.set("render", limit, by=OPS)
    lock = threading.Lock()
    held = {"now": 0, "most": 0, "done": 0}
    sampled: list[int] = []
    finished = threading.Event()

    def claimer(seed: int) -> None:
        rng = random.Random(seed)
        while True:
            with lock:
                if held["done"] == total:
                    return
            tasks = (
                jobnik.dequeue_batch("render", batch)
                if batch > 1
                else [t for t in [claim(jobnik, "render")] if t is not None]
            )
            if not tasks:
                time.sleep(0.002)
                continue
            with lock:
                held["now"] += len(tasks)
                held["most"] = max(held["most"], held["now"])
            time.sleep(rng.random() * 0.005)
            with lock:
                held["now"] -= len(tasks)
            for task in tasks:
                jobnik.report_task(task.id, TaskStatus.COMPLETED)
            with lock:
                held["done"] += len(tasks)

    def watcher() -> None:
        while not finished.is_set():
            sampled.append(in_progress(store, "render"))
            time.sleep(0.001)

    watching = threading.Thread(target=watcher)
    watching.start()
    errors = in_threads(claimer)
    finished.set()
    watching.join()

    assert errors == []
    assert held["done"] == total
    assert 1 <= held["most"] <= limit
    assert sampled
    assert max(sampled) <= limit
    assert in_progress(store, "render") == 0


@pytest.mark.parametrize("order", ["fifo", "fair"])
def test_a_claim_succeeds_exactly_when_a_task_is_queued_and_the_limit_has_room(
    jobnik: Jobnik, limits: LimitCommands, order: str
) -> None:
    """A random walk of claims, batches, reports and limit changes against a model: each claim
    takes min(asked, queued, room) tasks, never fewer (no eligible task is left unclaimed), in
    either queue order (three jobs' tasks)."""
    rng = random.Random(7)
    limits.set_order("render", order, by=OPS)
    queued = {t.id for _ in range(3) for t in queue(jobnik, "render", 10)}
    running: set[Any] = set()
    limit: int | None = None
    for _ in range(120):
        step = rng.choice(["claim", "batch", "report", "report", "limit", "unlimit"])
        room = len(queued) if limit is None else max(0, min(len(queued), limit - len(running)))
        if step in ("claim", "batch"):
            asked = 1 if step == "claim" else rng.randint(1, 4)
            got = jobnik.dequeue_batch("render", asked)
            assert len(got) == min(asked, room)
            queued -= {t.id for t in got}
            running |= {t.id for t in got}
        elif step == "report" and running:
            task_id = rng.choice(sorted(running, key=str))
            status = rng.choice([TaskStatus.COMPLETED, TaskStatus.FAILED])
            task = jobnik.report_task(task_id, status)
            running.discard(task_id)
            if task.status == TaskStatus.RETRIED:
                queued.add(task_id)
        elif step == "limit":
            limit = rng.randint(1, 5)
            limits.set("render", limit, by=OPS)
        elif step == "unlimit" and limit is not None:
            limits.remove("render", by=OPS)
            limit = None


# -- rate limits -------------------------------------------------------------------------------


def refill(store: SqlStore, stage_type: str, seconds: float) -> None:
    """As if `seconds` passed for the stage type's bucket (its refill time moved back)."""
    with store.cursor(write=True) as cur:
        cur.execute(
            store.dialect.params(
                "UPDATE jobnik_buckets SET refilled_at = refilled_at - %(s)s "
                "WHERE stage_type = %(t)s"
            ),
            {"s": seconds, "t": stage_type},
        )


def test_a_rate_admits_its_bucket_then_refills_by_the_databases_clock(
    store: SqlStore, jobnik: Jobnik, limits: LimitCommands
) -> None:
    queue(jobnik, "render", 10)
    queue(jobnik, "encode", 1)
    limits.set_rate("render", 3, 3600, by=OPS, reason="the API allows 3 an hour")
    assert len(jobnik.dequeue_batch("render", 2)) == 2
    assert claim(jobnik, "render") is not None
    assert claim(jobnik, "render") is None  # the bucket is empty
    assert jobnik.dequeue_batch("render", 5) == []
    assert claim(jobnik, "encode") is not None  # another type is not held back

    refill(store, "render", 1200)  # a third of the interval: one token
    assert len(jobnik.dequeue_batch("render", 5)) == 1
    refill(store, "render", 7200)  # two intervals: the bucket holds 3 at most
    assert len(jobnik.dequeue_batch("render", 5)) == 3

    limits.remove_rate("render", by=OPS)
    assert len(jobnik.dequeue_batch("render", 5)) == 3


def test_a_rate_and_a_concurrency_limit_hold_together(
    store: SqlStore, jobnik: Jobnik, limits: LimitCommands
) -> None:
    queue(jobnik, "render", 10)
    limits.set_rate("render", 4, 3600, by=OPS)
    limits.set("render", 2, by=OPS)
    first, _ = jobnik.dequeue_batch("render", 5)  # the concurrency limit binds
    jobnik.report_task(first.id, TaskStatus.COMPLETED)
    assert len(jobnik.dequeue_batch("render", 5)) == 1
    jobnik.report_task(_.id, TaskStatus.COMPLETED)
    assert len(jobnik.dequeue_batch("render", 5)) == 1  # then the rate: 4 started
    assert jobnik.dequeue_batch("render", 5) == []


@pytest.mark.parametrize(("starts", "interval"), [(0, 60), (-1, 60), (5, 0), (5, -60)])
def test_a_bad_rate_is_refused_and_writes_nothing(
    store: SqlStore, limits: LimitCommands, starts: int, interval: int
) -> None:
    before = store.log_app.recorder.max_notification_id()
    with pytest.raises(InvalidLimit):
        limits.set_rate("render", starts, interval, by=OPS)
    assert store.log_app.recorder.max_notification_id() == before
    with pytest.raises(LimitNotFound):
        limits.remove_rate("render", by=OPS)


def test_eight_concurrent_claimers_start_exactly_the_rates_bucket(
    jobnik: Jobnik, limits: LimitCommands
) -> None:
    """A bucket of 10 an hour, 40 tasks queued and 8 claimers (single and batched) asking until
    each has found nothing three times: exactly 10 start, not one more, not one fewer."""
    queue(jobnik, "render", 40)
    limits.set_rate("render", 10, 3600, by=OPS)
    started: list[Task] = []
    lock = threading.Lock()

    def claimer(i: int) -> None:
        empty = 0
        while empty < 3:
            got = jobnik.dequeue_batch("render", 1 + i % 3)
            with lock:
                started.extend(got)
            empty = 0 if got else empty + 1

    errors = in_threads(claimer)
    assert errors == []
    assert len(started) == len({t.id for t in started}) == 10


def test_rebuilt_rates_equal_their_live_twins_and_leave_the_buckets(
    store: SqlStore, jobnik: Jobnik, limits: LimitCommands
) -> None:
    queue(jobnik, "render", 5)
    limits.set_rate("render", 2, 60, by=OPS, reason="two a minute")
    limits.set("render", 4, by=OPS)
    jobnik.dequeue_batch("render", 5)
    live = snapshot(store)
    rebuild(store)
    assert snapshot(store) == live
    assert verify(store) == []
    assert jobnik.dequeue_batch("render", 5) == []  # the bucket, still empty
