"""Schedules' clocks as properties, on the in-memory store: however the sweeps fall and the
runs end, every nominal time is dealt with once (run, skipped, buffered or missed), and no
nominal time runs twice."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import example, given, settings
from hypothesis import strategies as st

from jobnik.domain.application import Jobnik
from jobnik.domain.principals import Actor
from jobnik.domain.schedule_commands import NewSchedule, ScheduleCommands
from jobnik.domain.schedules import JobTemplate
from jobnik.domain.statuses import JobStatus
from jobnik.domain.timing import Timing

from ..memory import MemoryStore

START = datetime(2026, 3, 28, 22, 0, 7, tzinfo=UTC)
TIMINGS = [Timing(None, "UTC", 60), Timing("*/7 * * * *", "Europe/Berlin", None)]


@settings(max_examples=40, deadline=None)
@given(
    timing=st.sampled_from(TIMINGS),
    overlap=st.sampled_from(["skip", "bufferOne", "allowAll", "cancelPrevious"]),
    catchup=st.sampled_from(["all", "latest"]),
    window=st.sampled_from([60, 600, 3600]),
    steps=st.lists(
        st.tuples(st.integers(0, 2400), st.booleans(), st.booleans()), min_size=1, max_size=25
    ),
)
@example(  # a trigger runs a time the clock then buffers: its release is skipped, not dealt twice
    timing=TIMINGS[0],
    overlap="bufferOne",
    catchup="latest",
    window=60,
    steps=[(1013, False, True), (0, True, False), (0, False, False)],
)
def test_every_nominal_time_is_dealt_with_once(
    timing: Timing,
    overlap: str,
    catchup: str,
    window: int,
    steps: list[tuple[int, bool, bool]],
) -> None:
    now = [START]
    jobs = Jobnik(MemoryStore(), clock=lambda: now[0])  # type: ignore[arg-type]
    schedules = ScheduleCommands(jobs)
    template = JobTemplate(name="tick", data={}, hook="tick")
    schedule = schedules.create(
        NewSchedule("tick", timing, template, overlap, catchup, window), by=Actor.API
    )
    store: MemoryStore = jobs.store  # type: ignore[assignment]
    for seconds, end_last, trigger in steps:
        now[0] += timedelta(seconds=seconds)
        if trigger:
            schedules.trigger(schedule.id, by=Actor.API)
        schedules.sweep()
        with store.session(write=False) as s:
            last = s.schedule(schedule.id).last_job_id
            going = last is not None and not s.job(last).is_final
        if end_last and going:
            assert last is not None
            jobs.set_job_status(last, JobStatus.ABORTED, by=Actor.API)

    events = store.events_of(schedule.id)
    row = store.tables.one("schedules_v1", id=schedule.id)
    fires = store.tables.rows["schedule_fires_v1"]
    keys = [(f["schedule_id"], f["nominal_time"]) for f in fires]
    assert len(keys) == len(set(keys))  # no nominal time ran twice
    assert len(fires) == sum(1 for e in events if type(e).__name__ == "ScheduleFired")

    def count(kind: str, trigger: str | None = None) -> int:
        return sum(
            getattr(e, "count", 1)
            for e in events
            if type(e).__name__ == kind and getattr(e, "trigger", trigger) == trigger
        )

    # A buffered nominal time is dealt with when it is buffered; its release (a run, or a skip
    # when a trigger ran that time meanwhile) is not a second dealing.
    buffered = {e.nominal_time for e in events if type(e).__name__ == "ScheduleFireBuffered"}
    released = sum(
        1
        for e in events
        if type(e).__name__ == "ScheduleFireSkipped"
        and e.because == "alreadyRan"
        and e.nominal_time in buffered
    )
    dealt = (
        count("ScheduleFired", "schedule")
        + count("ScheduleFireSkipped")
        - released
        + count("ScheduleFireBuffered")
        + count("ScheduleFiresMissed")
    )
    assert dealt == timing.count(START, row["cursor_time"], 100_000)  # each one: once
    assert row["next_fire_at"] == timing.next_after(row["cursor_time"])
    assert row["cursor_time"] <= now[0]
    if overlap != "allowAll" and not any(trigger for _, _, trigger in steps):
        by_clock = [f for f in fires if f["started_by"] in ("schedule", "buffered")]
        assert sum(1 for f in by_clock if _going(store, f["job_id"])) <= 1


def _going(store: MemoryStore, job_id: object) -> bool:
    row = store.tables.maybe("jobs_v1", id=job_id)
    return row is not None and row["status"] not in ("COMPLETED", "FAILED", "ABORTED")
