"""Reads of the catch-up projections: lastStatus per job name and run statistics per job.

Both may lag the log by a moment. `min_position` (a write's `X-Jobnik-Position`) waits until the
projection has caught up with it, for a few seconds at most; the answer carries the position it
reflects in `X-Jobnik-Projection-Position` (projections/catchup_views.py).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated
from uuid import UUID

from fastapi import APIRouter, Depends, Path, Query, Request

from jobnik.api.deps import reject_unknown_query
from jobnik.api.schemas import OutModel
from jobnik.projections.catchup_views import CatchUpViews
from jobnik.projections.last_status import JobDefinition
from jobnik.projections.run_stats import Counts, JobStatistics

router = APIRouter(prefix="/v1", tags=["history"], dependencies=[Depends(reject_unknown_query)])


def get_catchup(request: Request) -> CatchUpViews:
    catchup: CatchUpViews = request.app.state.catchup
    return catchup


CatchUpDep = Annotated[CatchUpViews, Depends(get_catchup)]
MinPosition = Annotated[
    int | None,
    Query(
        ge=0,
        description="jobnik: wait (a few seconds at most) until the projection has applied this "
        "log position, e.g. a write's X-Jobnik-Position",
    ),
]


class JobDefinitionOut(OutModel):
    name: str
    last_status: str
    last_job_status: str
    last_interaction: datetime
    last_job_id: UUID
    counts: dict[str, int]
    job_status_counts: dict[str, int]

    @classmethod
    def of(cls, d: JobDefinition) -> JobDefinitionOut:
        return cls(
            name=d.name,
            last_status=d.last_status,
            last_job_status=d.last_job_status,
            last_interaction=d.last_interaction,
            last_job_id=d.last_job_id,
            counts=d.counts,
            job_status_counts=d.job_counts,
        )


class TaskCountsOut(OutModel):
    """seed 004's task counters."""

    created_task_count: int
    successful_task_count: int
    retried_after_error_task_count: int
    retried_after_timeout_task_count: int
    failed_after_retry_task_count: int
    failed_without_retry_task_count: int
    canceled_task_count: int
    obsolete_task_count: int

    @staticmethod
    def fields(c: Counts) -> dict[str, int]:
        return {f"{k}_task_count": v for k, v in vars(c).items()}


class _StageHead(OutModel):
    stage_id: UUID
    order: int
    type: str
    start_time: datetime | None = None
    end_time: datetime | None = None


class StageStatisticsOut(TaskCountsOut, _StageHead):  # fields: the head's, then the counts
    """One stage's counters (SMILA's per-worker entry) and its first start and last finish."""


class _JobHead(OutModel):
    job_id: UUID
    name: str
    status: str
    deleted: bool
    creation_time: datetime
    start_time: datetime | None = None
    end_time: datetime | None = None


class JobStatisticsOut(TaskCountsOut, _JobHead):
    """The job's counters (sums over its stages), its times, and each stage's."""

    stages: list[StageStatisticsOut]

    @classmethod
    def of(cls, s: JobStatistics) -> JobStatisticsOut:
        return cls(
            job_id=s.job_id,
            name=s.name,
            status=s.status,
            deleted=s.deleted,
            creation_time=s.creation_time,
            start_time=s.start_time,
            end_time=s.end_time,
            stages=[
                StageStatisticsOut(
                    stage_id=st.stage_id,
                    order=st.order,
                    type=st.type,
                    start_time=st.start_time,
                    end_time=st.end_time,
                    **cls.fields(st.counts),
                )
                for st in s.stages
            ],
            **cls.fields(s.counts),
        )


@router.get("/job-definitions/{name}")
def get_job_definition(
    catchup: CatchUpDep, name: Annotated[str, Path()], min_position: MinPosition = None
) -> JobDefinitionOut:
    """lastStatus of the latest job of this name (seed 001), lastInteraction, counts by status."""
    return JobDefinitionOut.of(catchup.job_definition(name, min_position))


@router.get("/jobs/{jobId}/statistics")
def get_job_statistics(
    catchup: CatchUpDep,
    job_id: Annotated[UUID, Path(alias="jobId")],
    min_position: MinPosition = None,
) -> JobStatisticsOut:
    """The job's run statistics (seed 004), per stage and in all; kept after the job is deleted."""
    return JobStatisticsOut.of(catchup.job_statistics(job_id, min_position))
