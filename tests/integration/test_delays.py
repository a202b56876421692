"""Delayed work and retry backoff on both backends, with a controlled clock: the claim never
hands out a task before its time (several dequeuers at once), a ready task is never held up by
delayed ones, retries wait as their policy says, and a rebuild from the log equals the live read
models with delayed tasks in them."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import uuid4

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobnik.domain.application import Jobnik, NewJob, NewStage, NewTask
from jobnik.domain.delays import RetryPolicy
from jobnik.domain.errors import TaskNotFound
from jobnik.domain.principals import Actor
from jobnik.domain.statuses import Priority, TaskStatus
from jobnik.projections.inline.tables import PRIMARY_KEYS, TABLES
from jobnik.projections.rebuild.bluegreen import rebuild
from jobnik.projections.rebuild.verify import verify
from jobnik.projections.store.base import SqlStore
from jobnik.projections.store.postgres import PostgresStore
from jobnik.scripts.bench.claim_plan import claim_plan, plan_problems

from ..unit.builders import HeldClock

T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
DEQUEUERS = 4


def at(seconds: int | None) -> datetime | None:
    return None if seconds is None else T0 + timedelta(seconds=seconds)


def stage_of(app: Jobnik, type: str, priority: Priority = Priority.MEDIUM, **stage: Any) -> Any:
    job = app.create_job(NewJob(name="delayed", data={}, priority=priority))
    return app.add_stage(job.id, NewStage(type=type, data={}, **stage))


def drain(app: Jobnik, stage_type: str) -> list[Any]:
    """Dequeue from `DEQUEUERS` threads at once until none finds a task; every task taken."""
    taken: list[Any] = []
    lock = threading.Lock()

    def work() -> None:
        while True:
            try:
                task = app.dequeue(stage_type, by=Actor.WORKER)
            except TaskNotFound:
                return
            with lock:
                taken.append(task)

    threads = [threading.Thread(target=work) for _ in range(DEQUEUERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return taken


@settings(
    max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    delays=st.lists(st.one_of(st.none(), st.integers(-60, 600)), min_size=1, max_size=24),
    steps=st.lists(st.integers(1, 240), min_size=1, max_size=4),
)
def test_a_delayed_task_is_never_dequeued_early_by_concurrent_dequeuers(
    store: SqlStore, delays: list[int | None], steps: list[int]
) -> None:
    clock = HeldClock(T0)
    app = Jobnik(store, clock=clock)
    stage_type = f"delayed-{uuid4().hex}"  # (examples share the database)
    stage = stage_of(app, stage_type)
    tasks = app.add_tasks(stage.id, [NewTask(data={}, not_before=at(d)) for d in delays])
    due = {t.id: t.not_before for t in tasks}
    seen: set[Any] = set()

    for step in [0, *steps]:
        clock.now += timedelta(seconds=step)
        taken = drain(app, stage_type)
        ids = [t.id for t in taken]
        assert len(ids) == len(set(ids))  # each at most once
        assert not seen & set(ids)
        seen |= set(ids)
        for task_id in ids:
            when = due[task_id]
            assert when is None or when <= clock.now  # never before its time
        # every task whose time has come was handed out
        assert seen == {i for i, when in due.items() if when is None or when <= clock.now}


def test_a_ready_task_is_claimed_past_many_delayed_ones_of_higher_priority(
    store: SqlStore,
) -> None:
    clock = HeldClock(T0)
    app = Jobnik(store, clock=clock)
    delayed = stage_of(app, "mixed", Priority.VERY_HIGH)
    app.add_tasks(delayed.id, [NewTask(data={}, not_before=at(3600)) for _ in range(50)])
    ready = stage_of(app, "mixed", Priority.LOW)
    [task] = app.add_tasks(ready.id, [NewTask(data={})])

    assert app.dequeue("mixed").id == task.id
    assert app.dequeue_batch("mixed", 10) == []
    clock.now = T0 + timedelta(seconds=3600)
    assert len(app.dequeue_batch("mixed", 100)) == 50


def test_retries_wait_as_the_policy_says_and_jobniks_default_retries_at_once(
    store: SqlStore,
) -> None:
    clock = HeldClock(T0)
    app = Jobnik(store, clock=clock, retry_policy=RetryPolicy(2, 2, 5))  # the server's
    own = stage_of(app, "backoff", retry_policy=RetryPolicy(10, 3, 60))
    [task] = app.add_tasks(own.id, [NewTask(data={}, max_attempts=5)])
    for wait in (10, 30, 60):
        app.dequeue("backoff")
        retried = app.report_task(task.id, TaskStatus.FAILED)
        assert retried.not_before == clock.now + timedelta(seconds=wait)
        clock.now += timedelta(seconds=wait - 1)
        assert app.dequeue_batch("backoff", 5) == []
        clock.now += timedelta(seconds=1)

    server = stage_of(app, "server")
    [other] = app.add_tasks(server.id, [NewTask(data={})])
    app.dequeue("server")
    assert app.report_task(other.id, TaskStatus.FAILED).not_before == clock.now + timedelta(
        seconds=2
    )

    plain = Jobnik(store, clock=clock)  # no server policy: Jobnik's behaviour
    jobnik_stage = stage_of(plain, "at-once")
    [third] = plain.add_tasks(jobnik_stage.id, [NewTask(data={})])
    plain.dequeue("at-once")
    assert plain.report_task(third.id, TaskStatus.FAILED).not_before is None
    assert plain.dequeue("at-once").id == third.id


def snapshot(store: SqlStore) -> dict[str, list[dict[str, Any]]]:
    with store.cursor(write=False) as cur:
        return {t: cur.all(f"SELECT * FROM {t} ORDER BY {PRIMARY_KEYS[t]}") for t in TABLES}


def test_a_rebuild_with_delayed_retried_and_rescheduled_tasks_equals_the_live_read_models(
    store: SqlStore,
) -> None:
    clock = HeldClock(T0)
    app = Jobnik(store, clock=clock)
    job = app.create_job(
        NewJob(name="later", data={}, not_before=at(30), retry_policy=RetryPolicy(5, 2, 50, 0.5))
    )
    stage = app.add_stage(job.id, NewStage(type="rebuilt", data={}, not_before=at(10)))
    tasks = app.add_tasks(stage.id, [NewTask(data={"i": i}, max_attempts=4) for i in range(6)])
    app.reschedule_task(tasks[0].id, None, reason="now", by=Actor.API)
    app.reschedule_task(tasks[1].id, at(900), reason="later", by=Actor.API)
    clock.now = T0 + timedelta(seconds=30)
    for task in app.dequeue_batch("rebuilt", 3):
        app.report_task(task.id, TaskStatus.FAILED)
    other = app.add_stage(job.id, NewStage(type="second", data={}))
    app.add_tasks(other.id, [NewTask(data={}, not_before=at(50))])
    app.reschedule_stage(other.id, at(70), reason="postponed", by=Actor.API)
    app.reschedule_job(job.id, at(80), reason="all of it", by=Actor.API)
    late = app.create_job(NewJob(name="late", data={}, deadline=at(100)))
    held = app.add_stage(late.id, NewStage(type="late", data={}, deadline=at(90)))
    app.add_tasks(held.id, [NewTask(data={}) for _ in range(2)])
    app.add_stage(late.id, NewStage(type="later", data={}))
    clock.now = T0 + timedelta(seconds=200)
    assert app.expire_deadlines() == 2  # the stage's deadline, then the job's: one failure
    live = snapshot(store)
    assert any(r["not_before"] for r in live["queue_v1"])
    assert any(r["retry_policy"] for r in live["tasks_v1"])

    rebuild(store)

    assert snapshot(store) == live
    assert verify(store) == []


def test_the_claim_stays_two_index_probes_with_many_delayed_tasks(store: SqlStore) -> None:
    clock = HeldClock(T0)
    app = Jobnik(store, clock=clock)
    stage = stage_of(app, "probed")
    for _ in range(4):
        app.add_tasks(stage.id, [NewTask(data={}, not_before=at(3600)) for _ in range(500)])
    app.add_tasks(stage.id, [NewTask(data={})])
    if isinstance(store, PostgresStore):
        with store.cursor(write=True) as cur:
            cur.execute("ANALYZE queue_v1", {})

    plan = claim_plan(store, "probed")

    assert plan_problems(store, plan) == []
    assert "queue_v1_due" in "\n".join(plan)


def test_deadlines_fail_what_has_not_ended_once_and_nothing_else(store: SqlStore) -> None:
    clock = HeldClock(T0)
    app = Jobnik(store, clock=clock)
    jobs = [app.create_job(NewJob(name="dl", data={}, deadline=at(10 * (i + 1)))) for i in range(3)]
    stages = [app.add_stage(j.id, NewStage(type=f"dl-{i}", data={})) for i, j in enumerate(jobs)]
    for each in stages:
        app.add_tasks(each.id, [NewTask(data={})])
    app.dequeue("dl-2")
    clock.now = T0 + timedelta(seconds=25)

    assert app.expire_deadlines() == 2
    assert app.expire_deadlines() == 0

    with store.session(write=False) as s:
        assert [s.job(j.id).status for j in jobs] == ["FAILED", "FAILED", "IN_PROGRESS"]
        assert [s.stage(e.id).status for e in stages] == ["ABORTED", "ABORTED", "IN_PROGRESS"]
    clock.now = T0 + timedelta(seconds=31)
    assert app.expire_deadlines() == 1
