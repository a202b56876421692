"""/v1/jobs: create, find, read, delete, status, priority, user metadata, stages of a job."""

from __future__ import annotations

from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Body, Depends, Path, Query, Response

from jobnik.api import archives
from jobnik.api.archive_schemas import EraseJob
from jobnik.api.bodies import GatedRoute
from jobnik.api.deps import (
    AsOfQuery,
    JobnikDep,
    OnceDep,
    TraceDep,
    ViewsDep,
    reject_unknown_query,
)
from jobnik.api.errors import error_answers
from jobnik.api.operator_schemas import (
    BAD_NOT_BEFORE,
    JOB_NOT_ENDED,
    MALFORMED,
    REASON_MAX,
    REASON_TEXT,
    JobCounts,
    JobRerunRequest,
    JobStatusChange,
    PriorityChange,
    RerunOut,
    Reschedule,
)
from jobnik.api.pages import PagingDep, answer, page_schema, render_one
from jobnik.api.permissions import PrincipalDep, authorize, needs
from jobnik.api.routes.archives import ArchiverDep
from jobnik.api.schemas import (
    CreateJob,
    CreateStage,
    DateTimeQuery,
    JobName,
    JobOut,
    Message,
    Payload,
    StageOut,
)
from jobnik.domain.application import NewJob, NewStage
from jobnik.domain.delays import parse_not_before
from jobnik.domain.errors import (
    ArchiveUnreachable,
    IllegalJobTransition,
    JobInFiniteState,
    JobNotEnded,
    JobNotFound,
    JobNotInFiniteState,
    RerunSkipsStages,
    StageNotInJob,
    TooManyChildJobs,
)
from jobnik.domain.ports import Summary
from jobnik.domain.principals import Permission
from jobnik.domain.statuses import JobStatus, Priority
from jobnik.projections.queries.results import StageView

P = Permission
router = APIRouter(
    prefix="/v1",
    route_class=GatedRoute,
    tags=["jobs"],
    dependencies=[Depends(authorize), Depends(reject_unknown_query)],
)

JobId = Annotated[UUID, Path(alias="jobId")]
NO_JOB = (JobNotFound, "no such job (or it was deleted)")
ReturnStages = Annotated[bool, Query(alias="should_return_stages")]
ReturnTasks = Annotated[bool, Query(alias="should_return_tasks")]
Metadata = Annotated[Payload, Body()]


@router.get(
    "/jobs", response_model=None, responses={200: page_schema(JobOut)}, openapi_extra=needs(P.READ)
)
def find_jobs(
    views: ViewsDep,
    paging: PagingDep,
    job_name: Annotated[JobName | None, Query()] = None,
    priority: Priority | None = None,
    from_date: DateTimeQuery | None = None,
    end_date: DateTimeQuery | None = None,
    should_return_stages: ReturnStages = False,
    parent_task_id: Annotated[
        UUID | None, Query(description="jobnik: the child jobs of this task")
    ] = None,
    parent_job_id: Annotated[
        UUID | None, Query(description="jobnik: the child jobs of this job's tasks")
    ] = None,
    status: Annotated[JobStatus | None, Query(description="jobnik: jobs in this status")] = None,
    newest_first: Annotated[
        bool, Query(description="jobnik: a page's order, newest job first (pages only)")
    ] = False,
) -> Response:
    """Jobs matching name, priority, creation-time range, parent and status, oldest first;
    their stages on request. Paged (`page`, `page_size`) or a plain array (see
    `JOBNIK_LIST_SHAPE`)."""
    found = views.jobs(
        name=job_name,
        priority=priority,
        from_date=from_date,
        end_date=end_date,
        with_stages=should_return_stages,
        parent_task_id=parent_task_id,
        parent_job_id=parent_job_id,
        status=status,
    )
    return answer(views, found, paging, JobOut.of, lambda j: f"job {j.job.id}", newest_first)


@router.get("/job-counts", openapi_extra=needs(P.READ))
def count_jobs(
    views: ViewsDep,
    job_name: Annotated[JobName | None, Query()] = None,
    priority: Priority | None = None,
    from_date: DateTimeQuery | None = None,
    end_date: DateTimeQuery | None = None,
    parent_job_id: UUID | None = None,
) -> JobCounts:
    """jobnik: how many jobs match name, priority, creation-time range and parent, in all and
    per status (the console's counts)."""
    found = views.jobs(
        name=job_name,
        priority=priority,
        from_date=from_date,
        end_date=end_date,
        parent_job_id=parent_job_id,
    )
    return JobCounts.of(views.counts_by_status(found))


@router.post(
    "/jobs",
    status_code=201,
    response_model=JobOut,
    responses=error_answers(TooManyChildJobs),
    openapi_extra=needs(P.PRODUCE),
)
def create_job(
    body: CreateJob, jobnik: JobnikDep, incoming: TraceDep, once: OnceDep, by: PrincipalDep
) -> Any:
    """Create a job; it starts PENDING. A retry with the same Idempotency-Key creates nothing."""
    new = NewJob(
        name=body.name,
        data=body.data,
        priority=body.priority,
        user_metadata=body.user_metadata,
        mode=body.mode,
        parent_task_id=body.parent_task_id,
        fairness_key=body.fairness_key,
        fairness_weight=body.fairness_weight,
        concurrency_key=body.concurrency_key,
        **body.timing(),
        **body.trace(incoming),  # type: ignore[arg-type]
    )
    return once(lambda: JobOut.of(jobnik.create_job(new, by=by)))


@router.post("/jobs/{jobId}/finish", status_code=202, openapi_extra=needs(P.PRODUCE))
def finish_job(jobnik: JobnikDep, job_id: JobId, by: PrincipalDep) -> JobOut:
    """jobnik: no new stages or tasks from now on (FINISHING); the job completes, through its
    completion stages if it has any, once its work is done. Repeating it is a no-op; a job that
    has ended is refused (400 JOB_IN_FINITE_STATE)."""
    return JobOut.of(jobnik.finish_job(job_id, by=by))


@router.get("/jobs/{jobId}", response_model=JobOut, openapi_extra=needs(P.READ))
def get_job(
    views: ViewsDep,
    job_id: JobId,
    should_return_stages: ReturnStages = False,
    as_of: AsOfQuery = None,
) -> Response:
    """One job, with its stages on request; `as_of` shows it as it was then (from the events)."""
    job = views.job(job_id, with_stages=should_return_stages, as_of=as_of)
    return render_one(lambda: JobOut.of(job), f"job {job_id}")


@router.delete(
    "/jobs/{jobId}",
    responses=error_answers(
        MALFORMED, (JobNotInFiniteState, "the job has not ended: it cannot be deleted"), NO_JOB
    ),
    openapi_extra=needs(P.OPERATE),
)
def delete_job(
    jobnik: JobnikDep,
    job_id: JobId,
    by: PrincipalDep,
    reason: Annotated[str | None, Query(max_length=REASON_MAX, description=REASON_TEXT)] = None,
) -> Message:
    """Delete a COMPLETED, FAILED or ABORTED job; its history stays in the event log."""
    jobnik.delete_job(job_id, by=by, reason=reason)
    return Message(code="JOB_DELETED_SUCCESSFULLY")


@router.post(
    "/jobs/{jobId}/erase",
    responses=error_answers(MALFORMED, NO_JOB, JobNotEnded, ArchiveUnreachable),
    openapi_extra=needs(P.OPERATE),
)
def erase_job(
    jobnik: JobnikDep, archiver: ArchiverDep, job_id: JobId, body: EraseJob, by: PrincipalDep
) -> Message:
    """jobnik: erase an ended job's user data (the data, user metadata, results and log lines
    of the job, its stages and its tasks) from the log and every read model, keeping its
    events' types, times, statuses and actors; a JobErased event records who and why. An
    archived job's archive is written again without them (an ArchiveErased event records who
    and why; 410 ARCHIVED when its file cannot be read here). No later read, stream, export,
    archive or rebuild returns the erased values. 409 JOB_NOT_ENDED while the job runs."""
    archives.erase_job(jobnik, archiver, job_id, by=by, reason=body.reason)
    return Message(code="JOB_ERASED")


@router.patch("/jobs/{jobId}/user-metadata", openapi_extra=needs(P.PRODUCE))
def update_user_metadata(
    jobnik: JobnikDep, job_id: JobId, body: Metadata, by: PrincipalDep
) -> Message:
    """Replace the job's user metadata (any status)."""
    jobnik.replace_job_user_metadata(job_id, body, by=by)
    return Message(code="JOB_MODIFIED_SUCCESSFULLY")


@router.patch(
    "/jobs/{jobId}/priority",
    responses={
        204: {"description": "unchanged; header Reason says why"},
        **error_answers(MALFORMED, NO_JOB),
    },
    openapi_extra=needs(P.PRODUCE),
)
def update_job_priority(
    jobnik: JobnikDep, job_id: JobId, body: PriorityChange, by: PrincipalDep
) -> Any:
    """Change the job's priority; 204 with a Reason header when it is already that priority.
    jobnik: `reason` is recorded on the change's event."""
    if not jobnik.change_priority(job_id, body.priority, by=by, reason=body.reason):
        return Response(
            status_code=204, headers={"Reason": "PRIORITY_CANNOT_BE_UPDATED_TO_SAME_VALUE"}
        )
    return Message(code="JOB_MODIFIED_SUCCESSFULLY")


@router.patch(
    "/jobs/{jobId}/not-before",
    response_model=JobOut,
    responses=error_answers(MALFORMED, BAD_NOT_BEFORE, JobInFiniteState, NO_JOB),
    openapi_extra=needs(P.PRODUCE),
)
def reschedule_job(jobnik: JobnikDep, job_id: JobId, body: Reschedule, by: PrincipalDep) -> Any:
    """jobnik: bring the job's tasks forward or postpone them: its queued (PENDING, RETRIED)
    tasks, and those added later, are not dequeued before `notBefore` (null: at once). Recorded
    with `reason` (JobRescheduled, and TaskRescheduled for each queued task)."""
    not_before = parse_not_before(body.not_before)
    return JobOut.of(jobnik.reschedule_job(job_id, not_before, reason=body.reason, by=by))


@router.put(
    "/jobs/{jobId}/status",
    responses=error_answers(
        MALFORMED,
        (IllegalJobTransition, "the job's status does not allow it (e.g. it has ended)"),
        NO_JOB,
    ),
    openapi_extra=needs(P.PRODUCE),
)
def update_status(
    jobnik: JobnikDep, job_id: JobId, body: JobStatusChange, by: PrincipalDep
) -> Message:
    """PENDING (resume), PAUSED or ABORTED; abort cascades to stages and queued tasks.
    jobnik: `reason` is recorded on the job's event."""
    jobnik.set_job_status(job_id, JobStatus(body.status), by=by, reason=body.reason)
    return Message(code="JOB_MODIFIED_SUCCESSFULLY")


@router.post(
    "/jobs/{jobId}/rerun",
    responses=error_answers(
        MALFORMED,
        (StageNotInJob, "fromStageId names no stage of this job"),
        JOB_NOT_ENDED,
        RerunSkipsStages,
        NO_JOB,
    ),
    openapi_extra=needs(P.OPERATE),
)
def rerun_job(
    jobnik: JobnikDep,
    job_id: JobId,
    by: PrincipalDep,
    body: Annotated[JobRerunRequest | None, Body()] = None,
) -> RerunOut:
    """jobnik: a FAILED or ABORTED job runs again from its first unfinished stage, or from the
    earlier stage `fromStageId` names; that stage and the ended stages after it reopen. A
    reopened stage that had completed runs all its tasks again, any other its FAILED and
    ABORTED ones and those whose attempt an abort cancelled or, in a stage that waits for its
    turn again, the rerun ended (that attempt's late calls are then 409 STALE_ATTEMPT), each
    with a fresh attempt budget. Answers what the rerun did."""
    body = body or JobRerunRequest()
    return RerunOut.of(jobnik.rerun_job(job_id, body.from_stage_id, by=by, reason=body.reason))


@router.get("/jobs/{jobId}/stages", openapi_extra=needs(P.READ))
def get_stages_by_job_id(
    views: ViewsDep,
    job_id: JobId,
    should_return_tasks: ReturnTasks = False,
) -> list[StageOut]:
    """The job's stages in order."""
    return [StageOut.of(s) for s in views.stages_of_job(job_id, with_tasks=should_return_tasks)]


@router.post(
    "/jobs/{jobId}/stage", status_code=201, response_model=StageOut, openapi_extra=needs(P.PRODUCE)
)
def add_stage(
    jobnik: JobnikDep,
    job_id: JobId,
    body: CreateStage,
    incoming: TraceDep,
    once: OnceDep,
    by: PrincipalDep,
) -> Any:
    """Append a stage: WAITING if asked, PENDING when first, else CREATED until its turn."""
    new = NewStage(
        type=body.type,
        data=body.data,
        user_metadata=body.user_metadata,
        start_as_waiting=body.start_as_waiting,
        completion=body.completion,
        failure_patterns=tuple(body.failure_patterns),
        **body.timing(),
        **body.trace(incoming),  # type: ignore[arg-type]
    )
    return once(lambda: StageOut.of(StageView(jobnik.add_stage(job_id, new, by=by), Summary())))
