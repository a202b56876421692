"""An archived job's rows leave every catch-up projection that keeps rows per job, stage or task
(on both backends): the rows are gone after archiving, the answers that span jobs are unchanged,
a rebuild ends with the same rows, verify is clean, and a seed copied by an older version that
kept those rows loses them when a rebuild plants it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest

from jobnik.api.archives import Archiver
from jobnik.domain.application import Jobnik, NewJob, NewStage, NewTask
from jobnik.domain.principals import Actor, Principal, Role
from jobnik.domain.schedule_commands import NewSchedule, ScheduleCommands
from jobnik.domain.statuses import JobStatus, TaskStatus
from jobnik.domain.timing import Timing
from jobnik.projections.catchup.registry import CATCH_UP
from jobnik.projections.queries.activity import ActivityViews
from jobnik.projections.queries.catchup_views import CatchUpViews
from jobnik.projections.queries.operations import OperationsViews
from jobnik.projections.queries.schedules import ScheduleViews
from jobnik.projections.rebuild.bluegreen import rebuild
from jobnik.projections.rebuild.verify import verify
from jobnik.projections.store.base import SqlStore

from .test_archives import PER_JOB, PER_TASK, Clock, ended_job, settle, spanning, without
from .test_schedules import TEMPLATE

ALICE = Principal("alice", Role.PRODUCER)
NAMES = [p.name for p in CATCH_UP]
PERIOD = 3600  # (the archived jobs' activity minutes are within the day the projection keeps)


@dataclass
class World:
    clock: Clock
    engine: Jobnik
    archiver: Archiver


@pytest.fixture
def world(store: SqlStore, tmp_path: Path) -> World:
    """A clock, an engine on it and an archiver of the jobs ended `PERIOD` ago."""
    clock = Clock()
    (tmp_path / "archive").mkdir()
    return World(
        clock,
        Jobnik(store, clock=clock),
        Archiver(store, tmp_path / "archive", PERIOD, clock=clock),
    )


def jobs_with_every_kind_of_row(engine: Jobnik, clock: Clock) -> tuple[list[UUID], UUID]:
    """Ended jobs that give each per-job table a row: one whose task's lease expired once, one
    FAILED with tasks still queued, a schedule's run (aborted); and the schedule's id."""
    job = engine.create_job(NewJob(name="nightly", data={}))
    stage = engine.add_stage(job.id, NewStage(type="nightly-work", data={}))
    engine.add_tasks(stage.id, [NewTask(data={}, max_attempts=2)])
    engine.dequeue("nightly-work", lease_seconds=60)
    clock.advance(120)
    assert engine.sweep() == 1
    task = engine.dequeue("nightly-work")
    engine.report_task(task.id, TaskStatus.COMPLETED, attempt=task.attempt)
    failed = ended_job(engine, "nightly", "FAILED", tasks=3)
    schedule = ScheduleCommands(engine).create(
        NewSchedule("hourly", Timing(None, "UTC", 60), TEMPLATE), by=ALICE
    )
    clock.advance(61)
    assert ScheduleCommands(engine).sweep().fired == 1
    [run] = ScheduleViews(engine.store).runs(schedule.id, None, 10)
    engine.set_job_status(run.job_id, JobStatus.ABORTED, by=Actor.API, reason="done with it")
    return [job.id, failed, run.job_id], schedule.id


def answers(store: SqlStore, schedule_id: UUID) -> dict[str, Any]:
    """The reads that span jobs: lastStatus and counts per name, events by type, failures by
    cause, each stage type's activity, the schedule's outcomes."""
    catchup = CatchUpViews(store)
    ops = OperationsViews(store)
    schedule = ScheduleViews(store).get(schedule_id)
    far = Clock().now + timedelta(days=30)  # (a minute after every event)
    return {
        "definitions": [catchup.job_definition(n) for n in ("nightly", TEMPLATE.name)],
        "events": ops.events_appended(),
        "failures": ops.failures(),
        "activity": ActivityViews(store).stage_types(far, 24 * 60, limit=100),
        "schedule": (schedule.counts, schedule.failing),
    }


def counts(answered: dict[str, Any]) -> dict[str, Any]:
    """The answers but the activity's queued tasks (an archived job's leave them, and a type
    with none queued and nothing done in the window is not shown)."""
    _, types = answered["activity"]
    done = {
        t.stage_type: [
            (m.start, m.enqueued, m.dequeued, m.completed, m.retried, m.failed)
            for m in t.minutes
            if m.enqueued or m.dequeued or m.completed or m.retried or m.failed
        ]
        for t in types
    }
    return {**answered, "activity": {t: ms for t, ms in done.items() if ms}}


def test_an_archived_jobs_rows_leave_each_per_job_table_and_no_spanning_count_changes(
    store: SqlStore, world: World
) -> None:
    clock, engine, archiver = world.clock, world.engine, world.archiver
    due, schedule_id = jobs_with_every_kind_of_row(engine, clock)
    clock.advance(2 * PERIOD)
    kept = ended_job(engine, "nightly")
    settle(store)
    before, answered = spanning(store), answers(store, schedule_id)
    schedules = ScheduleViews(store)
    assert [r.status for r in schedules.runs(schedule_id, None, 10)] == ["ABORTED"]

    assert sorted(archiver.run().archived, key=str) == sorted(due, key=str)
    settle(store)
    after = spanning(store)

    gone = without(before, due, clock.now)  # (and the FAILED job's queued tasks)
    for table in PER_JOB | PER_TASK:  # (each held rows of the archived jobs)
        assert len(gone[table]) < len(before[table]), table
    assert after == gone
    assert without(after, [kept], clock.now) != after  # (the live job keeps its rows)
    assert counts(answers(store, schedule_id)) == counts(answered)
    assert [r.status for r in schedules.runs(schedule_id, None, 10)] == ["ARCHIVED"]
    assert schedules.get(schedule_id).last_status == "ARCHIVED"
    assert ActivityViews(store).job(due[0]) == []
    assert verify(store, names=NAMES) == []
    rebuild(store, names=NAMES)
    assert spanning(store) == after
    assert counts(answers(store, schedule_id)) == counts(answered)


def test_a_seed_an_older_version_copied_with_archived_jobs_rows_loses_them_when_planted(
    store: SqlStore, world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock, engine, archiver = world.clock, world.engine, world.archiver
    first, schedule_id = jobs_with_every_kind_of_row(engine, clock)
    clock.advance(2 * PERIOD)
    settle(store)
    with monkeypatch.context() as older:  # (a version that kept an archived job's rows)
        for projection in CATCH_UP:
            older.setattr(type(projection), "leave_with_job", ())
        assert len(archiver.run().archived) == 3
        second = ended_job(engine, "nightly")  # after the seed: its run copies the seed again
        clock.advance(2 * PERIOD)
        assert archiver.run().archived == [second]
        settle(store)
        kept = spanning(store)
    answered = answers(store, schedule_id)

    rebuild(store, names=NAMES)

    assert spanning(store) == without(kept, [*first, second]) != kept
    assert answers(store, schedule_id) == answered
    assert verify(store, names=NAMES) == []


def fire_keys(store: SqlStore) -> list[dict[str, Any]]:
    with store.cursor(write=False) as cur:
        return cur.all("SELECT * FROM schedule_fires_v1 ORDER BY schedule_id, nominal_time")


def test_an_archived_schedule_runs_fire_key_stays_through_an_inline_rebuild(
    store: SqlStore, world: World
) -> None:
    clock, engine, archiver = world.clock, world.engine, world.archiver
    _, schedule_id = jobs_with_every_kind_of_row(engine, clock)
    clock.advance(2 * PERIOD)
    settle(store)
    assert len(archiver.run().archived) == 3
    settle(store)
    fires = fire_keys(store)

    differences = verify(store, names=["inline"])
    rebuild(store, names=["inline"])

    assert differences == []
    assert fire_keys(store) == fires != []
    assert [r.status for r in ScheduleViews(store).runs(schedule_id, None, 10)] == ["ARCHIVED"]


def queued(store: SqlStore, now: datetime) -> dict[str, int]:
    """Each stage type's queued tasks: the activity's count, and the queues' count."""
    _, activity = ActivityViews(store).stage_types(now, 24 * 60, limit=100)
    queues = OperationsViews(store).queues(now)
    assert {q.stage_type: q.queued for q in queues if q.queued} == {
        t.stage_type: t.queued for t in activity if t.queued
    }
    return {t.stage_type: t.queued for t in activity}


def test_an_archived_failed_jobs_queued_tasks_leave_its_stage_types_queued_count(
    store: SqlStore, world: World
) -> None:
    clock, engine, archiver = world.clock, world.engine, world.archiver
    failed = ended_job(engine, "nightly", "FAILED", tasks=3)
    clock.advance(2 * PERIOD)
    live = engine.create_job(NewJob(name="nightly", data={}))
    stage = engine.add_stage(live.id, NewStage(type="nightly-work", data={}))
    engine.add_tasks(stage.id, [NewTask(data={})])
    settle(store)
    assert queued(store, clock.now) == {"nightly-work": 3}

    assert archiver.run().archived == [failed]
    settle(store)

    assert queued(store, clock.now) == {"nightly-work": 1}
    assert verify(store, names=NAMES) == []
    rebuild(store, names=NAMES)
    assert queued(store, clock.now) == {"nightly-work": 1}
