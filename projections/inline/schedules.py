"""The schedules read models: `schedules_v1`, one row per schedule (its timing, policies, where its
clock stands, its next fire and its counters), and `schedule_fires_v1`, the fire keys.

A fire key, (schedule, nominal time), is the row of one run: the job's own event
(`JobCreatedBySchedule`) inserts it, in the transaction that creates the job, so a second run of
the same key cannot commit (the primary key refuses it). Fire keys stay when the schedule or the
job is deleted, as the job's history does.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from jobnik.domain.jobs import Job
from jobnik.domain.schedules import OVERLAP, Schedule
from jobnik.projections.inline.ops import Add, Delete, Insert, Op, Update, own_row
from jobnik.projections.inline.tables import JOBS, SCHEDULE_FIRES, SCHEDULES

COUNTERS: Final = ("fired", "skipped", "buffered", "missed")


def _row(e: Any, **values: Any) -> Update:
    return own_row(SCHEDULES, e, values)


def _clock(e: Any) -> dict[str, Any]:
    """Where the schedule's clock stands after `e` (a `Schedule.Moved` event)."""
    return {
        "cursor_time": e.cursor,
        "next_fire_at": e.next_fire_at,
        "buffered_time": e.buffered_time,
    }


def _count(e: Any, column: str, n: int = 1) -> Add:
    return Add(SCHEDULES, {"id": e.originator_id}, {column: n})


def _created(e: Any, _: int) -> list[Op]:  # (Schedule.ScheduleCreated: mypy misses `actor`)
    return [
        Insert(
            SCHEDULES,
            {
                "id": e.originator_id,
                "version": e.originator_version,
                "name": e.name,
                "cron": e.cron,
                "timezone": e.timezone,
                "interval_seconds": e.interval_seconds,
                "template": e.template,
                "overlap": e.overlap,
                "catchup": e.catchup,
                "catchup_window": e.catchup_window,
                "paused": False,
                "pause_reason": None,
                "cursor_time": e.cursor,
                "next_fire_at": e.next_fire_at,
                "buffered_time": None,
                "last_job_id": None,
                "last_fire_time": None,
                **dict.fromkeys(COUNTERS, 0),
                "created_by": e.actor,
                "creation_time": e.timestamp,
                "update_time": e.timestamp,
            },
        )
    ]


def _fired(e: Schedule.ScheduleFired, _: int) -> list[Op]:
    last = {"last_job_id": e.job_id, "last_fire_time": e.nominal_time}
    return [_row(e, **_clock(e), **last), _count(e, "fired")]


def _skipped(e: Schedule.ScheduleFireSkipped, _: int) -> list[Op]:
    counted = [_count(e, "skipped")] if e.because == OVERLAP else []
    return [_row(e, **_clock(e)), *counted]


def _run_created(e: Job.JobCreatedBySchedule, _: int) -> list[Op]:
    return [
        own_row(JOBS, e, {}),
        Insert(
            SCHEDULE_FIRES,
            {
                "schedule_id": e.schedule_id,
                "nominal_time": e.nominal_time,
                "job_id": e.originator_id,
                "started_by": e.trigger,
                "fired_at": e.timestamp,
            },
        ),
    ]


SCHEDULE_PROJECT: Final[Mapping[type, Callable[[Any, int], list[Op]]]] = {
    Schedule.ScheduleCreated: _created,
    Schedule.SchedulePaused: lambda e, _: [_row(e, paused=True, pause_reason=e.reason)],
    Schedule.ScheduleResumed: lambda e, _: [_row(e, paused=False, pause_reason=None, **_clock(e))],
    Schedule.ScheduleFired: _fired,
    Schedule.ScheduleFireSkipped: _skipped,
    Schedule.ScheduleFireBuffered: lambda e, _: [_row(e, **_clock(e)), _count(e, "buffered")],
    Schedule.ScheduleFiresMissed: lambda e, _: [
        _row(e, **_clock(e)),
        _count(e, "missed", e.count),
    ],
    Schedule.ScheduleBackfilled: lambda e, _: [_row(e), _count(e, "fired", e.fired)],
    Schedule.ScheduleDeleted: lambda e, _: [Delete(SCHEDULES, {"id": e.originator_id})],
    Job.JobCreatedBySchedule: _run_created,
}
