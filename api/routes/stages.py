"""/v1/stages: read, summary, user metadata, status (release), tasks of a stage, dequeue."""

from __future__ import annotations

from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Body, Depends, Path, Query, Response

from jobnik.api.deps import (
    AsOfQuery,
    JobnikDep,
    OnceDep,
    TraceDep,
    ViewsDep,
    reject_unknown_query,
)
from jobnik.api.permissions import PrincipalDep, authorize, needs
from jobnik.api.schemas import (
    CreateTask,
    Message,
    StageOut,
    StageStatusChange,
    StageType,
    SummaryOut,
    TaskOut,
)
from jobnik.domain.application import NewTask
from jobnik.domain.principals import Permission
from jobnik.domain.statuses import StageStatus

P = Permission
router = APIRouter(
    prefix="/v1", tags=["stages"], dependencies=[Depends(authorize), Depends(reject_unknown_query)]
)

StageId = Annotated[UUID, Path(alias="stageId")]
ReturnTasks = Annotated[bool, Query(alias="should_return_tasks")]
NewTasks = Annotated[list[CreateTask], Body(min_length=1)]


@router.get("/stages", openapi_extra=needs(P.READ))
def get_stages(
    views: ViewsDep,
    job_id: UUID | None = None,
    stage_type: Annotated[StageType | None, Query()] = None,
    stage_operation_status: StageStatus | None = None,
    should_return_tasks: ReturnTasks = False,
) -> list[StageOut]:
    """Stages matching job, type and status."""
    found = views.stages(
        job_id=job_id,
        stage_type=stage_type,
        status=stage_operation_status,
        with_tasks=should_return_tasks,
    )
    return [StageOut.of(s) for s in found]


@router.get("/stages/{stageId}", openapi_extra=needs(P.READ))
def get_stage_by_id(
    views: ViewsDep,
    stage_id: StageId,
    should_return_tasks: ReturnTasks = False,
    as_of: AsOfQuery = None,
) -> StageOut:
    """One stage, with its tasks on request; `as_of` shows it as it was then."""
    return StageOut.of(views.stage(stage_id, with_tasks=should_return_tasks, as_of=as_of))


@router.get("/stages/{stageId}/summary", openapi_extra=needs(P.READ))
def get_stage_summary(views: ViewsDep, stage_id: StageId) -> SummaryOut:
    """The stage's task counters."""
    return SummaryOut.of(views.summary(stage_id))


@router.patch("/stages/{stageId}/user-metadata", openapi_extra=needs(P.PRODUCE))
def update_stage_user_metadata(
    jobnik: JobnikDep,
    stage_id: StageId,
    body: Annotated[dict[str, Any], Body()],
    by: PrincipalDep,
) -> Message:
    """Replace the stage's user metadata (any status)."""
    jobnik.replace_stage_user_metadata(stage_id, body, by=by)
    return Message(code="STAGE_MODIFIED_SUCCESSFULLY")


@router.put("/stages/{stageId}/status", openapi_extra=needs(P.PRODUCE))
def update_stage_status(
    jobnik: JobnikDep, stage_id: StageId, body: StageStatusChange, by: PrincipalDep
) -> Message:
    """Release a CREATED or WAITING stage (PENDING) once the previous stage has completed."""
    jobnik.release_stage(stage_id, by=by)
    return Message(code="STAGE_MODIFIED_SUCCESSFULLY")


@router.get("/stages/{stageId}/tasks", openapi_extra=needs(P.READ))
def get_tasks_by_stage_id(views: ViewsDep, stage_id: StageId) -> list[TaskOut]:
    """The stage's tasks."""
    return [TaskOut.of(t) for t in views.tasks_of_stage(stage_id)]


@router.post(
    "/stages/{stageId}/tasks",
    status_code=201,
    response_model=list[TaskOut],
    openapi_extra=needs(P.PRODUCE),
)
def add_tasks(
    jobnik: JobnikDep,
    stage_id: StageId,
    body: NewTasks,
    incoming: TraceDep,
    once: OnceDep,
    by: PrincipalDep,
) -> Any:
    """Add tasks to a CREATED, PENDING or WAITING stage; they start PENDING."""
    new = [
        NewTask(
            data=t.data,
            user_metadata=t.user_metadata,
            max_attempts=t.max_attempts,
            **t.trace(incoming),  # type: ignore[arg-type]
        )
        for t in body
    ]
    return once(lambda: [TaskOut.of(t) for t in jobnik.add_tasks(stage_id, new, by=by)])


# a type may hold "/" (%2F)
@router.patch(
    "/stages/{stageType:path}/tasks/dequeue", response_model=TaskOut, openapi_extra=needs(P.WORK)
)
def dequeue_task(
    jobnik: JobnikDep,
    stage_type: Annotated[StageType, Path(alias="stageType")],
    lease_seconds: Annotated[
        int | None,
        Query(ge=1, le=7 * 24 * 3600, description="jobnik: lease for a client that heartbeats"),
    ] = None,
    *,
    by: PrincipalDep,
) -> Response:
    """Claim the highest-priority, longest-waiting eligible task of this stage type."""
    return TaskOut.of(jobnik.dequeue(stage_type, lease_seconds, by=by)).response()
