"""Schedules on both backends, with a controlled clock: exactly once per nominal time, the overlap
and catch-up policies, pause, resume, trigger, backfill, delete, and the zone's clock changes."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID
from zoneinfo import ZoneInfo

import pytest

from jobnik.domain.application import Jobnik
from jobnik.domain.errors import (
    BackfillTooLarge,
    InvalidBackfill,
    ScheduleExists,
    ScheduleNotFound,
)
from jobnik.domain.principals import Actor, Principal, Role
from jobnik.domain.schedule_commands import NewSchedule, ScheduleCommands
from jobnik.domain.schedules import JobTemplate, StageTemplate, TaskTemplate
from jobnik.domain.statuses import JobStatus, TaskStatus
from jobnik.domain.timing import Timing
from jobnik.projections.catchup.registry import CATCH_UP
from jobnik.projections.catchup.runner import catch_up
from jobnik.projections.rebuild import parallel
from jobnik.projections.rebuild.bluegreen import rebuild
from jobnik.projections.rebuild.verify import verify
from jobnik.projections.store.base import SqlStore

from .test_rebuild import snapshot

START = datetime(2026, 1, 5, 12, 0, 30, tzinfo=UTC)
ALICE = Principal("alice", Role.PRODUCER)
TEMPLATE = JobTemplate(
    name="nightly",
    data={"region": "north"},
    stages=(
        StageTemplate("render", {}, {}, (TaskTemplate({"tile": 1}), TaskTemplate({"tile": 2}))),
    ),
)


class Clock:
    def __init__(self, now: datetime = START) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now

    def at(self, when: datetime) -> None:
        self.now = when

    def advance(self, **delta: float) -> None:
        self.now += timedelta(**delta)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def jobs(store: SqlStore, clock: Clock) -> Jobnik:
    return Jobnik(store, clock=clock)


@pytest.fixture
def schedules(jobs: Jobnik) -> ScheduleCommands:
    return ScheduleCommands(jobs)


def every_minute(schedules: ScheduleCommands, name: str = "nightly", **policies: Any) -> Any:
    return schedules.create(
        NewSchedule(name, Timing(None, "UTC", 60), TEMPLATE, **policies), by=ALICE
    )


def rows(store: SqlStore, sql: str, **params: Any) -> list[dict[str, Any]]:
    with store.cursor(write=False) as cur:
        return cur.all(store.dialect.params(sql), params)


def runs(store: SqlStore) -> list[tuple[datetime, UUID, str]]:
    """Every run's (nominal time, job, trigger), by nominal time."""
    found = rows(
        store,
        "SELECT nominal_time, job_id, started_by FROM schedule_fires_v1 ORDER BY nominal_time",
    )
    return [(r["nominal_time"].astimezone(UTC), r["job_id"], r["started_by"]) for r in found]


def schedule_row(store: SqlStore, schedule_id: UUID) -> dict[str, Any]:
    [row] = rows(
        store,
        "SELECT * FROM schedules_v1 WHERE id = %(i)s",
        i=store.dialect.dump("id", schedule_id),
    )
    return row


def events(store: SqlStore, aggregate_id: UUID) -> list[Any]:
    return list(store.log_app.events.get(aggregate_id))


def minute(n: int) -> datetime:
    """The nominal time n minutes after START's minute."""
    return START.replace(second=0) + timedelta(minutes=n)


def end(jobs: Jobnik, job_id: UUID) -> None:
    jobs.set_job_status(job_id, JobStatus.ABORTED, by=Actor.API, reason="done with it")


# -- exactly once ----------------------------------------------------------------------------


def test_a_schedule_fires_once_per_nominal_time_with_its_job_naming_it(
    store: SqlStore, schedules: ScheduleCommands, clock: Clock
) -> None:
    schedule = every_minute(schedules, overlap="allowAll", catchup="all")
    assert schedules.sweep().fired == 0  # nothing due before the first minute
    clock.advance(seconds=40)  # 12:01:10
    assert schedules.sweep().fired == 1
    assert schedules.sweep().fired == 0  # the same moment again: nothing more
    clock.advance(minutes=2)  # 12:03:10: the 12:02 and 12:03 runs
    assert schedules.sweep().fired == 2
    assert [(t, s) for t, _, s in runs(store)] == [(minute(n), "schedule") for n in (1, 2, 3)]

    [(nominal, job_id, _), *_] = runs(store)
    job_events = events(store, job_id)
    assert [type(e).__name__ for e in job_events[:2]] == ["JobCreated", "JobCreatedBySchedule"]
    named = job_events[1]
    assert (named.schedule_id, named.schedule_name, named.nominal_time) == (
        schedule.id,
        "nightly",
        nominal,
    )
    assert (named.actor, named.trigger) == ("system", "schedule")
    row = schedule_row(store, schedule.id)
    assert (row["fired"], row["last_fire_time"], row["next_fire_at"]) == (3, minute(3), minute(4))
    stages = rows(
        store,
        "SELECT type FROM stages_v1 WHERE job_id = %(j)s",
        j=store.dialect.dump("job_id", job_id),
    )
    assert [s["type"] for s in stages] == ["render"]


def test_concurrent_sweeps_fire_each_nominal_time_once(
    store: SqlStore, schedules: ScheduleCommands, clock: Clock
) -> None:
    every_minute(schedules, overlap="allowAll", catchup="all")
    clock.advance(minutes=10)
    barrier = threading.Barrier(4)
    errors: list[BaseException] = []

    def sweep() -> None:
        try:
            barrier.wait()
            schedules.sweep()
        except BaseException as e:  # noqa: BLE001 - the main thread reports it
            errors.append(e)

    threads = [threading.Thread(target=sweep) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    assert [t for t, _, _ in runs(store)] == [minute(n) for n in range(1, 11)]
    created = rows(store, "SELECT count(*) AS n FROM jobs_v1")
    assert created[0]["n"] == 10


def test_a_fire_that_did_not_commit_leaves_nothing_and_runs_once_later(
    store: SqlStore, schedules: ScheduleCommands, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    schedule = every_minute(schedules)
    clock.advance(minutes=1)
    from jobnik.domain.schedules import Schedule

    recorded = Schedule.fired

    def crash(*args: Any, **kwargs: Any) -> None:
        raise KeyboardInterrupt("killed between the job's creation and the commit")

    monkeypatch.setattr(Schedule, "fired", crash)
    with pytest.raises(KeyboardInterrupt):
        schedules.sweep()
    assert rows(store, "SELECT id FROM jobs_v1") == []
    assert runs(store) == []
    monkeypatch.setattr(Schedule, "fired", recorded)
    assert schedules.sweep().fired == 1
    assert [t for t, _, _ in runs(store)] == [minute(1)]
    assert schedule_row(store, schedule.id)["fired"] == 1


# -- overlap policies --------------------------------------------------------------------------


def test_overlap_skip_records_the_fire_and_runs_the_next_after_the_run_ended(
    store: SqlStore, jobs: Jobnik, schedules: ScheduleCommands, clock: Clock
) -> None:
    schedule = every_minute(schedules, overlap="skip")
    clock.at(minute(1))
    schedules.sweep()
    clock.at(minute(2))
    schedules.sweep()  # the first run is still going
    [(_, first, _)] = runs(store)
    skipped = [e for e in events(store, schedule.id) if type(e).__name__ == "ScheduleFireSkipped"]
    assert [(e.nominal_time, e.job_id, e.because) for e in skipped] == [
        (minute(2), first, "overlap")
    ]
    end(jobs, first)
    clock.at(minute(3))
    schedules.sweep()
    assert [t for t, _, _ in runs(store)] == [minute(1), minute(3)]
    assert (
        schedule_row(store, schedule.id)["skipped"],
        schedule_row(store, schedule.id)["fired"],
    ) == (1, 2)


def test_overlap_buffer_one_runs_one_waiting_fire_when_the_run_ends(
    store: SqlStore, jobs: Jobnik, schedules: ScheduleCommands, clock: Clock
) -> None:
    schedule = every_minute(schedules, overlap="bufferOne", catchup="all")
    clock.at(minute(1))
    schedules.sweep()
    clock.at(minute(3))
    schedules.sweep()  # 12:02 waits for the first run; 12:03 is skipped (one waits already)
    [(_, first, _)] = runs(store)
    row = schedule_row(store, schedule.id)
    assert (row["buffered"], row["skipped"], row["buffered_time"]) == (1, 1, minute(2))
    schedules.sweep()  # still going: nothing
    assert len(runs(store)) == 1
    end(jobs, first)
    schedules.sweep()
    assert [(t, s) for t, _, s in runs(store)] == [(minute(1), "schedule"), (minute(2), "buffered")]
    assert schedule_row(store, schedule.id)["buffered_time"] is None


def test_overlap_allow_all_runs_beside_the_previous_run(
    store: SqlStore, schedules: ScheduleCommands, clock: Clock
) -> None:
    every_minute(schedules, overlap="allowAll")
    for n in (1, 2, 3):
        clock.at(minute(n))
        schedules.sweep()
    statuses = rows(store, "SELECT status FROM jobs_v1")
    assert [s["status"] for s in statuses] == ["PENDING"] * 3
    assert [t for t, _, _ in runs(store)] == [minute(1), minute(2), minute(3)]


def test_overlap_cancel_previous_aborts_the_running_one_naming_the_schedule(
    store: SqlStore, jobs: Jobnik, schedules: ScheduleCommands, clock: Clock
) -> None:
    every_minute(schedules, overlap="cancelPrevious")
    clock.at(minute(1))
    schedules.sweep()
    first = jobs.dequeue("render")  # the first run is under way
    clock.at(minute(2))
    schedules.sweep()
    (_, first_job, _), (_, second_job, _) = runs(store)
    assert first.job_id == first_job
    aborted = events(store, first_job)[-1]
    assert type(aborted).__name__ == "JobAborted"
    assert aborted.actor == "system"
    assert "schedule 'nightly'" in aborted.reason
    status = {r["id"]: r["status"] for r in rows(store, "SELECT id, status FROM jobs_v1")}
    assert status == {first_job: "ABORTED", second_job: "PENDING"}


# -- catch-up --------------------------------------------------------------------------------


def test_after_downtime_catch_up_all_runs_each_fire_within_the_window_and_misses_older(
    store: SqlStore, schedules: ScheduleCommands, clock: Clock
) -> None:
    schedule = every_minute(
        schedules, overlap="allowAll", catchup="all", catchup_window_seconds=300
    )
    clock.at(minute(20))  # down since the start: 12:01 ... 12:20 due, the last 5 minutes kept
    schedules.sweep()
    assert [t for t, _, _ in runs(store)] == [minute(n) for n in range(15, 21)]
    [missed] = [e for e in events(store, schedule.id) if type(e).__name__ == "ScheduleFiresMissed"]
    assert (missed.first, missed.last, missed.count) == (minute(1), minute(14), 14)
    assert missed.reason == "older than the catch-up window"
    assert schedule_row(store, schedule.id)["missed"] == 14


def test_after_downtime_catch_up_latest_runs_only_the_latest_fire(
    store: SqlStore, schedules: ScheduleCommands, clock: Clock
) -> None:
    schedule = every_minute(schedules, catchup="latest", catchup_window_seconds=300)
    clock.at(minute(20) + timedelta(seconds=5))
    schedules.sweep()
    assert [t for t, _, _ in runs(store)] == [minute(20)]
    missed = [e for e in events(store, schedule.id) if type(e).__name__ == "ScheduleFiresMissed"]
    assert [(e.first, e.last, e.count) for e in missed] == [
        (minute(1), minute(15), 15),  # the window starts at 12:15:05
        (minute(16), minute(19), 4),
    ]
    row = schedule_row(store, schedule.id)
    assert (row["missed"], row["fired"], row["next_fire_at"]) == (19, 1, minute(21))


# -- the operator's commands ---------------------------------------------------------------


def test_pause_resume_trigger_backfill_and_delete_are_events_with_their_actor(
    store: SqlStore, schedules: ScheduleCommands, clock: Clock
) -> None:
    schedule = every_minute(schedules, overlap="allowAll")
    schedules.pause(schedule.id, by=ALICE, reason="maintenance")
    clock.at(minute(5))
    schedules.sweep()
    assert runs(store) == []  # paused: nothing fires
    assert schedule_row(store, schedule.id)["pause_reason"] == "maintenance"
    schedules.resume(schedule.id, by=ALICE, reason="done")
    schedules.sweep()
    assert runs(store) == []  # what fell due while paused does not run
    clock.at(minute(6))
    schedules.sweep()
    clock.advance(seconds=30)
    triggered = schedules.trigger(schedule.id, by=ALICE, reason="rerun for the report")
    assert triggered.job is not None
    backfill = schedules.backfill(schedule.id, minute(-3), minute(0), by=ALICE, reason="history")
    assert len(backfill.runs) == 4
    again = schedules.backfill(schedule.id, minute(-1), minute(1), by=ALICE)
    assert [r.job is None for r in again.runs] == [True, True, False]
    assert [(t, s) for t, _, s in runs(store)] == [
        *((minute(n), "backfill") for n in (-3, -2, -1, 0, 1)),
        (minute(6), "schedule"),
        (clock.now, "trigger"),
    ]
    schedules.delete(schedule.id, by=Principal("olga", Role.OPERATOR), reason="retired")
    with pytest.raises(ScheduleNotFound):
        schedules.pause(schedule.id, by=ALICE)
    log = [(type(e).__name__, e.actor, e.reason) for e in events(store, schedule.id)]
    assert [entry for entry in log if entry[1] != "system"] == [
        ("ScheduleCreated", "alice", None),
        ("SchedulePaused", "alice", "maintenance"),
        ("ScheduleResumed", "alice", "done"),
        ("ScheduleFired", "alice", "rerun for the report"),
        ("ScheduleBackfilled", "alice", "history"),
        ("ScheduleBackfilled", "alice", None),
        ("ScheduleDeleted", "olga", "retired"),
    ]
    assert rows(store, "SELECT id FROM schedules_v1") == []
    assert len(runs(store)) == 7  # the runs' keys and jobs stay


def test_a_backfill_is_bounded_and_ends_by_now(schedules: ScheduleCommands, clock: Clock) -> None:
    schedule = every_minute(schedules)
    with pytest.raises(BackfillTooLarge):
        schedules.backfill(schedule.id, minute(-200), minute(0), by=ALICE)
    with pytest.raises(InvalidBackfill):
        schedules.backfill(schedule.id, minute(0), minute(5), by=ALICE)
    with pytest.raises(InvalidBackfill):
        schedules.backfill(schedule.id, minute(0), minute(-1), by=ALICE)


def test_a_name_is_one_schedule_until_it_is_deleted(schedules: ScheduleCommands) -> None:
    first = every_minute(schedules)
    with pytest.raises(ScheduleExists):
        every_minute(schedules)
    schedules.delete(first.id, by=ALICE)
    assert every_minute(schedules).id != first.id


def test_a_hook_run_is_one_task_naming_the_schedule_and_nominal_time(
    store: SqlStore, jobs: Jobnik, schedules: ScheduleCommands, clock: Clock
) -> None:
    template = JobTemplate(name="nightly", data={"a": 1}, hook="plan-nightly")
    schedule = schedules.create(NewSchedule("hooked", Timing(None, "UTC", 60), template), by=ALICE)
    clock.at(minute(1))
    schedules.sweep()
    task = jobs.dequeue("plan-nightly")
    assert task.data == {
        "scheduleId": str(schedule.id),
        "scheduleName": "hooked",
        "nominalTime": minute(1).isoformat(),
        "trigger": "schedule",
    }


def test_a_nightly_0230_schedule_across_the_zones_clock_changes(
    store: SqlStore, schedules: ScheduleCommands, clock: Clock
) -> None:
    """Berlin, 2026: on 29 March 02:30 does not exist (02:00 → 03:00): the run is at 03:00, once;
    on 25 October 02:30 happens twice (03:00 → 02:00): the run is at the first, once."""
    berlin = ZoneInfo("Europe/Berlin")

    def run_days(start: datetime, days: int) -> None:
        clock.at(start)
        for _ in range(days * 24 * 6):  # a sweep every 10 minutes
            clock.advance(minutes=10)
            schedules.sweep()

    clock.at(datetime(2026, 3, 27, 12, tzinfo=UTC))
    schedule = schedules.create(
        NewSchedule("nightly", Timing("30 2 * * *", "Europe/Berlin", None), TEMPLATE, "allowAll"),
        by=ALICE,
    )
    run_days(clock.now, 4)
    schedules.pause(schedule.id, by=ALICE, reason="until autumn")
    clock.at(datetime(2026, 10, 23, 12, tzinfo=UTC))
    schedules.resume(schedule.id, by=ALICE)
    run_days(clock.now, 4)
    assert [t.astimezone(berlin).isoformat() for t, _, _ in runs(store)] == [
        "2026-03-28T02:30:00+01:00",
        "2026-03-29T03:00:00+02:00",
        "2026-03-30T02:30:00+02:00",
        "2026-03-31T02:30:00+02:00",
        "2026-10-24T02:30:00+02:00",
        "2026-10-25T02:30:00+02:00",
        "2026-10-26T02:30:00+01:00",
        "2026-10-27T02:30:00+01:00",
    ]
    assert schedule_row(store, schedule.id)["missed"] == 0


def schedule_workload(jobs: Jobnik, schedules: ScheduleCommands, clock: Clock) -> None:
    """Every kind of schedule event at least once."""
    skip = every_minute(schedules, "skip", overlap="skip", catchup_window_seconds=120)
    buffer = every_minute(schedules, "buffer", overlap="bufferOne", catchup="all")
    cancel = every_minute(schedules, "cancel", overlap="cancelPrevious")
    hook = schedules.create(
        NewSchedule(
            "hook", Timing("*/2 * * * *", "Europe/Berlin", None), JobTemplate("h", {}, hook="h")
        ),
        by=ALICE,
    )
    for n in (1, 2, 3, 7, 8):
        clock.at(minute(n) + timedelta(seconds=1))
        schedules.sweep()
    jobs.dequeue("render")
    schedules.pause(skip.id, by=ALICE, reason="pause")
    schedules.resume(skip.id, by=ALICE, reason="resume")
    schedules.trigger(buffer.id, by=ALICE, reason="now")
    schedules.backfill(cancel.id, minute(-5), minute(2), by=ALICE, reason="fill")
    schedules.delete(hook.id, by=ALICE, reason="gone")
    for job in rows(jobs.store, "SELECT id FROM jobs_v1 WHERE status = 'PENDING'")[:3]:
        end(jobs, job["id"])
    clock.at(minute(9) + timedelta(seconds=1))
    schedules.sweep()


@pytest.mark.parametrize("processes", [1, 2])
def test_rebuilt_schedules_equal_their_live_twins_and_verify_finds_no_difference(
    store: SqlStore,
    jobs: Jobnik,
    schedules: ScheduleCommands,
    clock: Clock,
    processes: int,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(parallel, "MIN_EVENTS", 0)  # two processes: the routed parts too
    schedule_workload(jobs, schedules, clock)
    live = snapshot(store)
    kinds = {type(e).__name__ for s in live["schedules_v1"] for e in events(store, s["id"])}
    assert {"ScheduleFireSkipped", "ScheduleFireBuffered", "ScheduleFiresMissed"} <= kinds
    assert len(live["schedule_fires_v1"]) > 10

    rebuild(store, processes=processes)

    assert snapshot(store) == live
    assert verify(store) == []


def outcome_rows(store: SqlStore) -> list[dict[str, Any]]:
    return rows(store, "SELECT * FROM schedule_outcomes_v1")


@pytest.mark.parametrize("batch", [1, 1000])
def test_the_runs_outcomes_count_each_end_and_the_failing_streak(
    store: SqlStore, jobs: Jobnik, schedules: ScheduleCommands, clock: Clock, batch: int
) -> None:
    template = JobTemplate(
        "flaky", {}, stages=(StageTemplate("flaky", {}, {}, (TaskTemplate({}, {}, 1),)),)
    )
    schedule = schedules.create(
        NewSchedule("flaky", Timing(None, "UTC", 60), template, "allowAll"), by=ALICE
    )
    ends = ["FAILED", "FAILED", "COMPLETED", "FAILED", "FAILED", "FAILED"]
    for n, outcome in enumerate(ends, start=1):
        clock.at(minute(n))
        schedules.sweep()
        task = jobs.dequeue("flaky")
        jobs.report_task(task.id, TaskStatus(outcome), attempt=task.attempt)
    clock.at(minute(7))
    schedules.sweep()  # a seventh run, not ended
    for projection in CATCH_UP:
        while catch_up(store, projection, batch):
            pass

    [outcome] = outcome_rows(store)
    runs_by_job = {job: t for t, job, _ in runs(store)}
    assert outcome["schedule_id"] == schedule.id
    assert (outcome["completed"], outcome["failed"], outcome["aborted"]) == (1, 5, 0)
    assert outcome["failing"] == 3
    assert runs_by_job[outcome["last_failed_job_id"]] == minute(6)
    assert runs_by_job[outcome["last_job_id"]] == minute(7)
    assert outcome["last_status"] == "PENDING"
    assert verify(store, names=["schedule_runs"]) == []
