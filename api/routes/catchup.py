"""Reads of the catch-up projections: lastStatus per job name and run statistics per job.

Both may lag the log by a moment. `min_position` (a write's `X-Jobnik-Position`) waits until the
projection has caught up with it, for a few seconds at most; the answer carries the position it
reflects in `X-Jobnik-Projection-Position` (projections/queries/catchup_views.py).
"""

from __future__ import annotations

from typing import Annotated
from uuid import UUID

from fastapi import APIRouter, Depends, Path, Query, Request
from starlette.concurrency import run_in_threadpool

from jobnik.api.deps import ViewsDep, reject_unknown_query
from jobnik.api.errors import error_answers
from jobnik.api.history_schemas import JobDefinitionOut, JobRunOut, JobStatisticsOut
from jobnik.api.permissions import authorize, needs
from jobnik.api.schemas import INT64_MAX
from jobnik.api.segments import SegmentRoute
from jobnik.api.waiters import Waiters
from jobnik.domain.errors import ArchiveUnreachable, JobNotFound
from jobnik.domain.principals import Permission
from jobnik.domain.runs import run_state
from jobnik.projections.catchup.last_status import LastStatus
from jobnik.projections.catchup.run_stats import RunStats
from jobnik.projections.queries.catchup_views import CatchUpViews
from jobnik.projections.queries.views import Views

P = Permission
router = APIRouter(
    prefix="/v1",
    route_class=SegmentRoute,  # a job name may hold "/" (%2F)
    tags=["history"],
    dependencies=[Depends(authorize), Depends(reject_unknown_query)],
)


async def get_catchup(request: Request) -> CatchUpViews:
    catchup: CatchUpViews = request.app.state.catchup
    return catchup


async def get_waiters(request: Request) -> Waiters:
    waiters: Waiters = request.app.state.waiters
    return waiters


CatchUpDep = Annotated[CatchUpViews, Depends(get_catchup)]
WaitersDep = Annotated[Waiters, Depends(get_waiters)]
MinPosition = Annotated[
    int | None,
    Query(
        ge=0,
        le=INT64_MAX,
        description="jobnik: wait (JOBNIK_MIN_POSITION_WAIT seconds at most) until the projection "
        "has applied this log position, e.g. a write's X-Jobnik-Position; 503 TOO_MANY_WAITERS "
        "with Retry-After when JOBNIK_MAX_WAITERS reads already wait",
    ),
]


@router.get("/job-definitions/{name}", openapi_extra=needs(P.READ))
async def get_job_definition(
    catchup: CatchUpDep,
    waiters: WaitersDep,
    name: Annotated[str, Path()],
    min_position: MinPosition = None,
) -> JobDefinitionOut:
    """lastStatus of the latest job of this name, lastInteraction, and job counts by status."""
    await waiters.wait(LastStatus.name, min_position)
    return JobDefinitionOut.of(await run_in_threadpool(catchup.job_definition, name))


@router.get(
    "/jobs/{jobId}/statistics",
    openapi_extra=needs(P.READ),
    responses=error_answers(
        JobNotFound, (ArchiveUnreachable, "the job was archived: its history is its archive's")
    ),
)
async def get_job_statistics(
    catchup: CatchUpDep,
    waiters: WaitersDep,
    job_id: Annotated[UUID, Path(alias="jobId")],
    min_position: MinPosition = None,
) -> JobStatisticsOut:
    """The job's task counters, per stage and in all; kept after the job is deleted, until it
    is archived."""
    await waiters.wait(RunStats.name, min_position)
    return JobStatisticsOut.of(await run_in_threadpool(catchup.job_statistics, job_id))


@router.get("/jobs/{jobId}/run", openapi_extra=needs(P.READ))
async def get_job_run(
    views: ViewsDep,
    catchup: CatchUpDep,
    waiters: WaitersDep,
    job_id: Annotated[UUID, Path(alias="jobId")],
    min_position: MinPosition = None,
) -> JobRunOut:
    """The job as a run: its state (PREPARING … SUCCEEDED), mode, times, counters per stage."""
    await waiters.wait(RunStats.name, min_position)
    return await run_in_threadpool(job_run, views, catchup, job_id)


def job_run(views: Views, catchup: CatchUpViews, job_id: UUID) -> JobRunOut:
    """The job as a run (its state and counters), as `GET /v1/jobs/{jobId}/run` answers."""
    job = views.job(job_id).job
    held = views.held_by_workers(job_id)
    try:
        statistics = catchup.job_statistics(job_id)
    except JobNotFound:  # the catch-up projection has not seen the job yet
        statistics = None
    return JobRunOut.of(job, run_state(job, held), statistics)
