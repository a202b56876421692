"""/v1/stages: read, summary, user metadata, status (release), tasks of a stage, dequeue."""

from __future__ import annotations

from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Body, Depends, Path, Query, Response
from pydantic import FailFast
from starlette.concurrency import run_in_threadpool

from jobnik.api.batch_schemas import BATCH_ANSWER, tasks_response
from jobnik.api.bodies import GatedRoute
from jobnik.api.deps import (
    AsOfQuery,
    JobnikDep,
    OnceDep,
    TraceDep,
    ViewsDep,
    WorkDep,
    reject_unknown_query,
)
from jobnik.api.errors import error_answers
from jobnik.api.openapi import setting_maximum
from jobnik.api.operator_schemas import (
    BAD_NOT_BEFORE,
    JOB_NOT_ENDED,
    MALFORMED,
    STAGE_NOT_CURRENT,
    RerunOut,
    RerunRequest,
    Reschedule,
)
from jobnik.api.pages import PagingDep, answer, page_schema, render_one, task_name
from jobnik.api.permissions import PrincipalDep, authorize, needs
from jobnik.api.schemas import (
    INT32_MAX,
    CreateTask,
    Message,
    MostItems,
    Payload,
    StageOut,
    StageStatusChange,
    StageType,
    SummaryOut,
    TaskOut,
)
from jobnik.domain.application import NewTask
from jobnik.domain.delays import parse_not_before
from jobnik.domain.errors import (
    BatchTooLarge,
    StageInFiniteState,
    StageNotFound,
    StageNotRerunnable,
    TooManyTasks,
)
from jobnik.domain.principals import Permission
from jobnik.domain.statuses import MAX_LEASE_SECONDS, StageStatus

P = Permission
router = APIRouter(
    prefix="/v1",
    route_class=GatedRoute,
    tags=["stages"],
    dependencies=[Depends(authorize), Depends(reject_unknown_query)],
)

StageId = Annotated[UUID, Path(alias="stageId")]
ReturnTasks = Annotated[bool, Query(alias="should_return_tasks")]
NewTasks = Annotated[
    list[CreateTask],
    Body(min_length=1),
    MostItems("max_tasks_per_request", TooManyTasks, "tasks"),
    FailFast(),
]
# The dequeue's query parameters.
LeaseSeconds = Annotated[
    int | None,
    Query(ge=1, le=MAX_LEASE_SECONDS, description="jobnik: lease for a client that heartbeats"),
]
BatchCount = Annotated[
    int | None,
    Query(
        ge=1,
        le=INT32_MAX,
        description="jobnik: claim up to this many tasks in one transaction, each its own "
        "attempt and lease; the answer is then an array (empty when none is queued). At "
        "most JOBNIK_MAX_BATCH_SIZE (default 100): 400 BATCH_TOO_LARGE beyond",
        json_schema_extra=setting_maximum("max_batch_size"),
    ),
]


@router.get(
    "/stages",
    response_model=None,
    responses={200: page_schema(StageOut)},
    openapi_extra=needs(P.READ),
)
def get_stages(
    views: ViewsDep,
    paging: PagingDep,
    job_id: UUID | None = None,
    stage_type: Annotated[StageType | None, Query()] = None,
    stage_operation_status: StageStatus | None = None,
    should_return_tasks: ReturnTasks = False,
) -> Response:
    """Stages matching job, type and status, oldest first; their tasks on request. Paged
    (`page`, `page_size`) or a plain array (see `JOBNIK_LIST_SHAPE`)."""
    found = views.stages(
        job_id=job_id,
        stage_type=stage_type,
        status=stage_operation_status,
        with_tasks=should_return_tasks,
    )
    return answer(views, found, paging, StageOut.of, lambda s: f"stage {s.stage.id}")


@router.get("/stages/{stageId}", response_model=StageOut, openapi_extra=needs(P.READ))
def get_stage_by_id(
    views: ViewsDep,
    stage_id: StageId,
    should_return_tasks: ReturnTasks = False,
    as_of: AsOfQuery = None,
) -> Response:
    """One stage, with its tasks on request; `as_of` shows it as it was then."""
    stage = views.stage(stage_id, with_tasks=should_return_tasks, as_of=as_of)
    return render_one(lambda: StageOut.of(stage), f"stage {stage_id}")


@router.get("/stages/{stageId}/summary", openapi_extra=needs(P.READ))
def get_stage_summary(views: ViewsDep, stage_id: StageId) -> SummaryOut:
    """The stage's task counters."""
    return SummaryOut.of(views.summary(stage_id))


@router.patch("/stages/{stageId}/user-metadata", openapi_extra=needs(P.PRODUCE))
def update_stage_user_metadata(
    jobnik: JobnikDep,
    stage_id: StageId,
    body: Annotated[Payload, Body()],
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


@router.post(
    "/stages/{stageId}/rerun",
    responses=error_answers(
        MALFORMED,
        StageNotRerunnable,
        JOB_NOT_ENDED,
        *STAGE_NOT_CURRENT,
        (StageNotFound, "no such stage (a deleted job's stages are gone)"),
    ),
    openapi_extra=needs(P.OPERATE),
)
def rerun_stage(
    jobnik: JobnikDep,
    stage_id: StageId,
    by: PrincipalDep,
    body: Annotated[RerunRequest | None, Body()] = None,
) -> RerunOut:
    """jobnik: run every FAILED and ABORTED task of the stage again, each with a fresh attempt
    budget (in an aborted job, also those whose attempt the abort cancelled: that attempt's late
    calls are then 409 STALE_ATTEMPT); the stage and its job reopen. The stage must be the job's
    current one (else rerun the job). Answers what the rerun did."""
    reason = (body or RerunRequest()).reason
    return RerunOut.of(jobnik.rerun_stage(stage_id, by=by, reason=reason))


@router.patch(
    "/stages/{stageId}/not-before",
    response_model=StageOut,
    responses=error_answers(
        MALFORMED, BAD_NOT_BEFORE, StageInFiniteState, (StageNotFound, "no such stage")
    ),
    openapi_extra=needs(P.PRODUCE),
)
def reschedule_stage(
    jobnik: JobnikDep, views: ViewsDep, stage_id: StageId, body: Reschedule, by: PrincipalDep
) -> Any:
    """jobnik: bring the stage's tasks forward or postpone them: its queued (PENDING, RETRIED)
    tasks, and those added later, are not dequeued before `notBefore` (null: at once). Recorded
    with `reason` (StageRescheduled, and TaskRescheduled for each queued task)."""
    not_before = parse_not_before(body.not_before)
    jobnik.reschedule_stage(stage_id, not_before, reason=body.reason, by=by)
    return StageOut.of(views.stage(stage_id))


@router.get(
    "/stages/{stageId}/tasks",
    response_model=None,
    responses={200: page_schema(TaskOut)},
    openapi_extra=needs(P.READ),
)
def get_tasks_by_stage_id(views: ViewsDep, paging: PagingDep, stage_id: StageId) -> Response:
    """The stage's tasks, oldest first. Paged (`page`, `page_size`) or a plain array (see
    `JOBNIK_LIST_SHAPE`)."""
    return answer(views, views.tasks_of_stage(stage_id), paging, TaskOut.of, task_name)


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
    """Add tasks to a CREATED, PENDING or WAITING stage; they start PENDING. At most
    JOBNIK_MAX_TASKS_PER_REQUEST (default 1,000) per request: 400 TOO_MANY_TASKS beyond."""
    new = [
        NewTask(
            data=t.data,
            user_metadata=t.user_metadata,
            max_attempts=t.max_attempts,
            not_before=parse_not_before(t.not_before),
            **t.trace(incoming),  # type: ignore[arg-type]
        )
        for t in body
    ]
    return once(lambda: [TaskOut.of(t) for t in jobnik.add_tasks(stage_id, new, by=by)])


# a type may hold "/" (%2F)
@router.patch(
    "/stages/{stageType:path}/tasks/dequeue",
    response_model=None,
    responses={200: BATCH_ANSWER, **error_answers(BatchTooLarge)},
    openapi_extra=needs(P.WORK),
)
async def dequeue_task(
    jobnik: JobnikDep,
    work: WorkDep,
    stage_type: Annotated[StageType, Path(alias="stageType")],
    lease_seconds: LeaseSeconds = None,
    count: BatchCount = None,
    *,
    by: PrincipalDep,
) -> Response:
    """Claim the highest-priority, longest-waiting eligible task of this stage type; with
    `count`, up to that many of them."""
    if count is None:
        return TaskOut.of(await work.dequeue(stage_type, lease_seconds, by=by)).response()
    tasks = await run_in_threadpool(jobnik.dequeue_batch, stage_type, count, lease_seconds, by=by)
    return tasks_response(tasks)
