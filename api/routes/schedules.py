"""/v1/schedules: create, list, read, pause, resume, trigger, backfill and delete schedules, and
read their runs. Producers create and steer them, operators delete them, readers read them."""

from __future__ import annotations

from typing import Annotated
from uuid import UUID

from fastapi import APIRouter, Depends, Path, Query, Request

from jobnik.api.deps import reject_unknown_query
from jobnik.api.errors import error_answers
from jobnik.api.operator_schemas import MALFORMED, REASON_MAX, REASON_TEXT
from jobnik.api.pages import PageDep
from jobnik.api.permissions import PrincipalDep, authorize, needs
from jobnik.api.schedule_schemas import (
    NEXT_MAX,
    BackfillBody,
    BackfillOut,
    CreateSchedule,
    ReasonBody,
    RunStartedOut,
    ScheduleOut,
    SchedulePageOut,
    ScheduleRunOut,
    ScheduleRunsOut,
)
from jobnik.api.schemas import DateTimeQuery, Message
from jobnik.domain.errors import (
    BackfillTooLarge,
    InvalidBackfill,
    InvalidCron,
    InvalidInterval,
    InvalidJobTemplate,
    InvalidTimezone,
    ScheduleExists,
    ScheduleNotFound,
    TimingRequired,
    UnknownPolicy,
)
from jobnik.domain.principals import Permission
from jobnik.domain.schedule_commands import NewSchedule, ScheduleCommands
from jobnik.domain.timing import Timing
from jobnik.projections.queries.schedules import ScheduleViews

P = Permission
router = APIRouter(
    prefix="/v1",
    tags=["schedules"],
    dependencies=[Depends(authorize), Depends(reject_unknown_query)],
)


async def get_schedules(request: Request) -> ScheduleCommands:
    schedules: ScheduleCommands = request.app.state.schedules
    return schedules


async def get_schedule_views(request: Request) -> ScheduleViews:
    views: ScheduleViews = request.app.state.schedule_views
    return views


SchedulesDep = Annotated[ScheduleCommands, Depends(get_schedules)]
ScheduleViewsDep = Annotated[ScheduleViews, Depends(get_schedule_views)]
ScheduleId = Annotated[UUID, Path(alias="scheduleId")]
NO_SCHEDULE = (ScheduleNotFound, "no such schedule (or it was deleted)")
Next = Annotated[int, Query(ge=0, le=NEXT_MAX, description="how many next fire times to list")]


@router.post(
    "/schedules",
    status_code=201,
    responses=error_answers(
        MALFORMED,
        InvalidCron,
        InvalidTimezone,
        InvalidInterval,
        TimingRequired,
        UnknownPolicy,
        InvalidJobTemplate,
        ScheduleExists,
    ),
    openapi_extra=needs(P.PRODUCE),
)
def create_schedule(
    body: CreateSchedule, schedules: SchedulesDep, views: ScheduleViewsDep, by: PrincipalDep
) -> ScheduleOut:
    """jobnik: a schedule: a job template run at each nominal time of a cron expression in a
    time zone, or of an interval. Its clock starts now: the first run is at the first nominal
    time after now. A wall-clock time the zone skips (clocks moving forward) runs at the end of
    the gap, once; one that happens twice (clocks moving back) runs once, at the first."""
    new = NewSchedule(
        name=body.name,
        timing=Timing(body.cron, body.timezone, body.interval_seconds),
        job=body.job.template(),
        overlap=body.overlap_policy,
        catchup=body.catchup_policy,
        catchup_window_seconds=body.catchup_window_seconds,
    )
    schedule = schedules.create(new, by=by)
    return ScheduleOut.of(views.get(schedule.id))


@router.get("/schedules", openapi_extra=needs(P.READ))
def list_schedules(
    views: ScheduleViewsDep,
    paging: PageDep,
    name: Annotated[str | None, Query(max_length=100, description="only this one")] = None,
    next: Next = 5,
) -> SchedulePageOut:
    """jobnik: the schedules, by name, a page at a time (`{total, items}`)."""
    offset = (paging.page - 1) * paging.page_size
    total, found = views.page(name, offset, paging.page_size)
    return SchedulePageOut(total=total, items=[ScheduleOut.of(v, next) for v in found])


@router.get(
    "/schedules/{scheduleId}",
    responses=error_answers(NO_SCHEDULE),
    openapi_extra=needs(P.READ),
)
def get_schedule(views: ScheduleViewsDep, schedule_id: ScheduleId, next: Next = 5) -> ScheduleOut:
    """jobnik: a schedule: its timing, job template and policies, its next fire times, its
    last run and its counts."""
    return ScheduleOut.of(views.get(schedule_id), next)


@router.get(
    "/schedules/{scheduleId}/runs",
    responses=error_answers(NO_SCHEDULE),
    openapi_extra=needs(P.READ),
)
def list_runs(
    views: ScheduleViewsDep,
    schedule_id: ScheduleId,
    before: Annotated[
        DateTimeQuery | None,
        Query(description="only runs of earlier nominal times (the next page)"),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
) -> ScheduleRunsOut:
    """jobnik: the schedule's runs, latest nominal time first, each with its job's status."""
    views.get(schedule_id)  # ScheduleNotFound
    found = views.runs(schedule_id, before, limit)
    return ScheduleRunsOut(items=[ScheduleRunOut.of(r) for r in found])


@router.post(
    "/schedules/{scheduleId}/pause",
    responses=error_answers(MALFORMED, NO_SCHEDULE),
    openapi_extra=needs(P.PRODUCE),
)
def pause_schedule(
    schedules: SchedulesDep,
    views: ScheduleViewsDep,
    schedule_id: ScheduleId,
    by: PrincipalDep,
    body: ReasonBody | None = None,
) -> ScheduleOut:
    """jobnik: nothing fires until it is resumed (pausing a paused schedule changes nothing);
    `reason` is recorded on the event."""
    schedules.pause(schedule_id, by=by, reason=body.reason if body else None)
    return ScheduleOut.of(views.get(schedule_id))


@router.post(
    "/schedules/{scheduleId}/resume",
    responses=error_answers(MALFORMED, NO_SCHEDULE),
    openapi_extra=needs(P.PRODUCE),
)
def resume_schedule(
    schedules: SchedulesDep,
    views: ScheduleViewsDep,
    schedule_id: ScheduleId,
    by: PrincipalDep,
    body: ReasonBody | None = None,
) -> ScheduleOut:
    """jobnik: the clock goes on from now; what fell due while paused does not run."""
    schedules.resume(schedule_id, by=by, reason=body.reason if body else None)
    return ScheduleOut.of(views.get(schedule_id))


@router.post(
    "/schedules/{scheduleId}/trigger",
    status_code=201,
    responses=error_answers(MALFORMED, NO_SCHEDULE),
    openapi_extra=needs(P.PRODUCE),
)
def trigger_schedule(
    schedules: SchedulesDep,
    schedule_id: ScheduleId,
    by: PrincipalDep,
    body: ReasonBody | None = None,
) -> RunStartedOut:
    """jobnik: a run now (its nominal time is now), whatever the overlap policy, paused or
    not."""
    return RunStartedOut.of(
        schedules.trigger(schedule_id, by=by, reason=body.reason if body else None)
    )


@router.post(
    "/schedules/{scheduleId}/backfill",
    status_code=201,
    responses=error_answers(MALFORMED, InvalidBackfill, BackfillTooLarge, NO_SCHEDULE),
    openapi_extra=needs(P.PRODUCE),
)
def backfill_schedule(
    schedules: SchedulesDep, schedule_id: ScheduleId, body: BackfillBody, by: PrincipalDep
) -> BackfillOut:
    """jobnik: a run for each nominal time from `start` to `end` (both included) that has none
    yet, at once and side by side, whatever the overlap policy."""
    done = schedules.backfill(schedule_id, body.start, body.end, by=by, reason=body.reason)
    return BackfillOut.of(done)


@router.delete(
    "/schedules/{scheduleId}",
    responses=error_answers(MALFORMED, NO_SCHEDULE),
    openapi_extra=needs(P.OPERATE),
)
def delete_schedule(
    schedules: SchedulesDep,
    schedule_id: ScheduleId,
    by: PrincipalDep,
    reason: Annotated[str | None, Query(max_length=REASON_MAX, description=REASON_TEXT)] = None,
) -> Message:
    """jobnik: the schedule stops and is gone from the lists; its runs' jobs and every event
    stay."""
    schedules.delete(schedule_id, by=by, reason=reason)
    return Message(code="SCHEDULE_DELETED_SUCCESSFULLY")
