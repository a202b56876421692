"""GET /v1/activity and GET /v1/jobs/{jobId}/activity: tasks minute by minute, per stage type and
per job, from the `activity` catch-up projection (the console's charts read the same)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Annotated, Final
from uuid import UUID

from fastapi import APIRouter, Depends, Path, Query, Request
from starlette.concurrency import run_in_threadpool

from jobnik.api.activity_schemas import ActivityOut, JobActivityOut, JobMinuteOut, TypeActivityOut
from jobnik.api.deps import SettingsDep, ViewsDep, reject_unknown_query
from jobnik.api.openapi import setting_maximum
from jobnik.api.permissions import authorize, needs
from jobnik.api.routes.catchup import MinPosition, WaitersDep
from jobnik.api.schemas import INT32_MAX
from jobnik.domain.errors import InvalidRequest
from jobnik.domain.principals import Permission
from jobnik.projections.catchup.activity import WINDOW_MINUTES, Activity
from jobnik.projections.queries.activity import ActivityViews

MAX_POINTS: Final = 14_400  # minutes one answer holds at most (ten stage types' day)
router = APIRouter(
    prefix="/v1",
    tags=["operations"],
    dependencies=[Depends(authorize), Depends(reject_unknown_query)],
)


async def get_activity(request: Request) -> ActivityViews:
    activity: ActivityViews = request.app.state.activity
    return activity


async def get_now(request: Request) -> datetime:
    clock: Callable[[], datetime] = request.app.state.clock
    return clock()


ActivityDep = Annotated[ActivityViews, Depends(get_activity)]
NowDep = Annotated[datetime, Depends(get_now)]


@router.get("/activity", openapi_extra=needs(Permission.READ))
async def get_activity_by_stage_type(
    activity: ActivityDep,
    now: NowDep,
    settings: SettingsDep,
    waiters: WaitersDep,
    minutes: Annotated[
        int, Query(ge=1, le=WINDOW_MINUTES, description="the window: the last N minutes")
    ] = 60,
    stage_type: Annotated[str | None, Query(description="this stage type only")] = None,
    page: Annotated[int, Query(ge=1, le=INT32_MAX, description="the page, from 1")] = 1,
    page_size: Annotated[
        int,
        Query(
            ge=1,
            le=INT32_MAX,
            description="stage types per page, 1 to JOBNIK_MAX_PAGE_SIZE; a page holds at most "
            "14400 minutes in all (fewer stage types when page_size times minutes is more)",
            json_schema_extra=setting_maximum("max_page_size"),
        ),
    ] = 10,
    min_position: MinPosition = None,
) -> ActivityOut:
    """jobnik: per stage type (those with queued tasks or activity in the window, by name, a
    page of them), every minute of the last `minutes` (up to a day): tasks queued, dequeued,
    completed, retried and failed, and the queued tasks at the minute's end, exact as of the
    activity projection's position (it may trail the log by a moment)."""
    if page_size > settings.max_page_size:
        raise InvalidRequest(f"request/query/page_size must be <= {settings.max_page_size}")
    # A page's minutes are bounded in all: fewer stage types to a page, where a refusal would
    # turn down a request its document (which can bound each parameter, not their product) allows.
    page_size = min(page_size, MAX_POINTS // minutes)
    await waiters.wait(Activity.name, min_position)
    total, found = await run_in_threadpool(
        activity.stage_types,
        now,
        minutes,
        stage_type=stage_type,
        offset=(page - 1) * page_size,
        limit=page_size,
    )
    return ActivityOut(total=total, items=[TypeActivityOut.of(a) for a in found])


@router.get("/jobs/{jobId}/activity", openapi_extra=needs(Permission.READ))
async def get_job_activity(
    activity: ActivityDep,
    views: ViewsDep,
    waiters: WaitersDep,
    job_id: Annotated[UUID, Path(alias="jobId")],
    min_position: MinPosition = None,
) -> JobActivityOut:
    """jobnik: the job's completed tasks minute by minute, from its first minute with a
    completion to its last (kept a day, counted back from the log's newest event)."""
    await run_in_threadpool(views.job, job_id)  # JOB_NOT_FOUND
    await waiters.wait(Activity.name, min_position)
    minutes = await run_in_threadpool(activity.job, job_id)
    return JobActivityOut(job_id=job_id, minutes=[JobMinuteOut.of(m) for m in minutes])
