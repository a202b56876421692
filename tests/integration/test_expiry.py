"""The schedule-to-start limit on both backends: the SQL works an expiry out exactly as the
in-memory rows do (a rebuild from the log equals the live queue), the sweeper expires what is
due once, and the run statistics and the operations counters count expired tasks apart."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from jobnik.domain.application import Jobnik, NewJob, NewStage, NewTask
from jobnik.domain.principals import Actor
from jobnik.domain.statuses import JobStatus, TaskStatus
from jobnik.projections.catchup.registry import CATCH_UP
from jobnik.projections.catchup.runner import catch_up
from jobnik.projections.queries.catchup_views import CatchUpViews
from jobnik.projections.queries.operations import OperationsViews
from jobnik.projections.rebuild.bluegreen import rebuild
from jobnik.projections.rebuild.verify import verify
from jobnik.projections.store.base import SqlStore

from ..unit.builders import HeldClock
from .test_delays import snapshot

T0 = datetime(2030, 1, 1, 12, 0, 0, 123456, tzinfo=UTC)  # (microseconds: exact arithmetic)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def expiries(store: SqlStore) -> dict[Any, Any]:
    with store.cursor(write=False) as cur:
        rows = cur.all("SELECT task_id, expires_at FROM queue_v1")
    return {r["task_id"]: r["expires_at"] for r in rows}


def test_expiries_are_worked_out_alike_live_and_in_a_rebuild(store: SqlStore) -> None:
    clock = HeldClock(T0)
    app = Jobnik(store, clock=clock)
    job = app.create_job(NewJob(name="limited", data={}, schedule_to_start_seconds=90))
    first = app.add_stage(job.id, NewStage(type="exp-a", data={}, schedule_to_start_seconds=60))
    later = app.add_stage(job.id, NewStage(type="exp-b", data={}))
    now, delayed, moved = app.add_tasks(
        first.id, [NewTask(data={}), NewTask(data={}, not_before=at(300)), NewTask(data={})]
    )
    [waiting] = app.add_tasks(later.id, [NewTask(data={})])
    clock.now = at(10.5)
    app.reschedule_task(moved.id, at(40.25), reason="later", by=Actor.API)

    found = expiries(store)
    assert found[now.id] == at(60)
    assert found[delayed.id] == at(360)
    assert found[moved.id] == at(100.25)
    assert found[waiting.id] is None  # its stage is not released yet
    clock.now = at(20)
    app.set_job_status(job.id, JobStatus.PAUSED)
    assert set(expiries(store).values()) == {None}
    clock.now = at(50)
    app.set_job_status(job.id, JobStatus.PENDING)
    assert expiries(store)[now.id] == at(110)
    live = snapshot(store)

    rebuild(store)

    assert snapshot(store) == live
    assert verify(store) == []


def test_the_sweeper_expires_once_and_the_counters_count_it_apart(store: SqlStore) -> None:
    clock = HeldClock(T0)
    app = Jobnik(store, clock=clock)
    job = app.create_job(NewJob(name="expiring", data={}))
    stage = app.add_stage(job.id, NewStage(type="exp-c", data={}, schedule_to_start_seconds=30))
    late = app.create_job(NewJob(name="late", data={}, deadline=at(20)))
    tasks = app.add_tasks(stage.id, [NewTask(data={}) for _ in range(3)])
    started = app.dequeue("exp-c")
    clock.now = at(30)

    assert app.expire_queued() == 2
    assert app.expire_queued() == 0
    assert app.expire_deadlines() == 1

    with store.session(write=False) as s:
        statuses = sorted(s.task(t.id).status for t in tasks)
        assert statuses == [TaskStatus.FAILED, TaskStatus.FAILED, TaskStatus.IN_PROGRESS]
        assert s.job(job.id).status == JobStatus.FAILED
    app.report_task(started.id, TaskStatus.COMPLETED)  # a running attempt still finishes
    for projection in CATCH_UP:
        while catch_up(store, projection, 50):
            pass
    stats = CatchUpViews(store).job_statistics(job.id)
    assert (stats.counts.expired, stats.counts.successful, stats.counts.obsolete) == (2, 1, 0)
    [queue] = [q for q in OperationsViews(store).queues(clock.now) if q.stage_type == "exp-c"]
    assert queue.counters["failed_expired"] == 2
    assert queue.counters["failed_error"] == 0
    assert OperationsViews(store).failures() == {
        ("stage", "expired"): 1,  # the first expiry fails the stage, the second only its task
        ("job", "expired"): 1,
        ("job", "deadline"): 1,
    }
    assert late.id != job.id
    assert verify(store) == []
