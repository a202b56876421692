"""/v1/tasks: find, read, user metadata, and the worker's status report."""

from __future__ import annotations

import functools
from typing import Annotated, Any, Final
from uuid import UUID

from fastapi import APIRouter, Body, Depends, Path, Query, Response
from pydantic import AfterValidator, FailFast

from jobnik.api.batch_schemas import ReportAnswer, TaskReport
from jobnik.api.bodies import GatedRoute
from jobnik.api.deps import (
    AsOfQuery,
    JobnikDep,
    OnceDep,
    ViewsDep,
    WorkDep,
    reject_unknown_query,
)
from jobnik.api.errors import error_answers
from jobnik.api.history_schemas import ChildJobOut
from jobnik.api.operator_schemas import (
    BAD_NOT_BEFORE,
    JOB_NOT_ENDED,
    MALFORMED,
    STAGE_NOT_CURRENT,
    RerunOut,
    RerunRequest,
    Reschedule,
)
from jobnik.api.pages import (
    PagingDep,
    answer,
    chunked_array,
    page_schema,
    render,
    render_one,
    task_name,
)
from jobnik.api.permissions import PrincipalDep, authorize, needs
from jobnik.api.schemas import (
    Appended,
    AttemptBody,
    DateTimeQuery,
    GiveBack,
    HeartbeatOut,
    LogLineOut,
    LogLines,
    LogPageOut,
    Message,
    MostItems,
    Payload,
    StageType,
    TaskOut,
    TaskStatusChange,
)
from jobnik.domain.delays import parse_not_before
from jobnik.domain.errors import (
    BatchTooLarge,
    OtherTasksFailed,
    TaskNotFound,
    TaskNotQueued,
    TaskNotRerunnable,
)
from jobnik.domain.principals import Permission
from jobnik.domain.statuses import TaskStatus
from jobnik.projections.queries.logs import CURSOR, LogCursor
from jobnik.projections.queries.results import ChildJob

P = Permission
router = APIRouter(
    prefix="/v1",
    route_class=GatedRoute,
    tags=["tasks"],
    dependencies=[Depends(authorize), Depends(reject_unknown_query)],
)

TaskId = Annotated[UUID, Path(alias="taskId")]
# a batched report's body
Reports = Annotated[
    list[TaskReport],
    Body(min_length=1),
    MostItems("max_batch_size", BatchTooLarge, "tasks"),
    FailFast(),
]


@router.get(
    "/tasks",
    response_model=None,
    responses={200: page_schema(TaskOut)},
    openapi_extra=needs(P.READ),
)
def get_tasks_by_criteria(
    views: ViewsDep,
    paging: PagingDep,
    stage_id: UUID | None = None,
    stage_type: Annotated[StageType | None, Query()] = None,
    from_date: DateTimeQuery | None = None,
    end_date: DateTimeQuery | None = None,
    status: TaskStatus | None = None,
) -> Response:
    """Tasks matching stage, type, creation-time range and status, oldest first. Paged
    (`page`, `page_size`) or a plain array (see `JOBNIK_LIST_SHAPE`)."""
    found = views.tasks(
        stage_id=stage_id,
        stage_type=stage_type,
        from_date=from_date,
        end_date=end_date,
        status=status,
    )
    return answer(views, found, paging, TaskOut.of, task_name)


@router.get("/tasks/{taskId}", response_model=TaskOut, openapi_extra=needs(P.READ))
def get_task_by_id(views: ViewsDep, task_id: TaskId, as_of: AsOfQuery = None) -> Response:
    """One task; `as_of` shows it as it was then."""
    task = views.task(task_id, as_of=as_of)
    return render_one(lambda: TaskOut.of(task), task_name(task))


@router.patch("/tasks/{taskId}/user-metadata", openapi_extra=needs(P.PRODUCE))
def update_task_user_metadata(
    jobnik: JobnikDep, task_id: TaskId, body: Annotated[Payload, Body()], by: PrincipalDep
) -> Message:
    """Replace the task's user metadata (any status)."""
    jobnik.replace_task_user_metadata(task_id, body, by=by)
    return Message(code="TASK_MODIFIED_SUCCESSFULLY")


@router.patch(
    "/tasks/{taskId}/not-before",
    response_model=TaskOut,
    responses=error_answers(
        MALFORMED, BAD_NOT_BEFORE, TaskNotQueued, (TaskNotFound, "no such task")
    ),
    openapi_extra=needs(P.PRODUCE),
)
def reschedule_task(jobnik: JobnikDep, task_id: TaskId, body: Reschedule, by: PrincipalDep) -> Any:
    """jobnik: bring a queued (PENDING or RETRIED) task forward or postpone it: it is not
    dequeued before `notBefore` (null: at once). Recorded with `reason` (TaskRescheduled)."""
    not_before = parse_not_before(body.not_before)
    return TaskOut.of(jobnik.reschedule_task(task_id, not_before, reason=body.reason, by=by))


@router.put("/tasks/{taskId}/status", response_model=TaskOut, openapi_extra=needs(P.WORK))
async def update_task_status(
    work: WorkDep, task_id: TaskId, body: TaskStatusChange, by: PrincipalDep
) -> Response:
    """Report COMPLETED (with an optional result) or FAILED (RETRIED while attempts remain);
    jobnik: DELEGATED once the handler created child jobs (the task waits for them)."""
    task = await work.report_task(
        task_id,
        TaskStatus(body.status),
        attempt=body.attempt,
        reason=body.reason,
        fatal=body.fatal,
        result=body.result,
        by=by,
    )
    return TaskOut.of(task).response()


@router.put(
    "/tasks/status",
    response_model=list[ReportAnswer],
    responses=error_answers(BatchTooLarge),
    openapi_extra=needs(P.WORK),
)
def update_task_statuses(
    jobnik: JobnikDep,
    body: Reports,
    once: OnceDep,
    by: PrincipalDep,
) -> Any:
    """jobnik: report many tasks' outcomes in one transaction, each as `PUT
    /v1/tasks/{taskId}/status` with its attempt would. Each item is answered on its own (a
    stale attempt, an illegal transition or an unknown task refuses that item only), in the
    request's order. At most JOBNIK_MAX_BATCH_SIZE (default 100) items: 400 BATCH_TOO_LARGE
    beyond."""
    answer = once(
        lambda: [ReportAnswer.of(o) for o in jobnik.report_batch([r.report() for r in body], by=by)]
    )
    return answer if isinstance(answer, Response) else ReportAnswer.list_response(answer)


CHILDREN_CHUNK: Final = 50  # child jobs read at a time, each with up to 100 results


@router.get(
    "/tasks/{taskId}/children", response_model=list[ChildJobOut], openapi_extra=needs(P.READ)
)
def get_children(views: ViewsDep, task_id: TaskId) -> Response:
    """jobnik: the task's child jobs (at most JOBNIK_MAX_CHILD_JOBS), oldest first, their
    outcomes and their tasks' results (each child's first 100, `moreResults` if it has more)."""

    def one(child: ChildJob) -> bytes:
        return render(lambda: ChildJobOut.of(child), f"child job {child.job.id}")

    read = functools.partial(views.children, task_id)
    return chunked_array(read, one, chunk=CHILDREN_CHUNK)


@router.post("/tasks/{taskId}/heartbeat", response_model=HeartbeatOut, openapi_extra=needs(P.WORK))
def heartbeat(jobnik: JobnikDep, task_id: TaskId, body: AttemptBody, by: PrincipalDep) -> Response:
    """Extend the attempt's lease; `cancelled` turns true when the job was aborted."""
    beat = jobnik.heartbeat(task_id, body.attempt, by=by)
    t = beat.task
    return HeartbeatOut(
        status=TaskStatus(t.status),
        attempt=t.attempt,
        lease_expires_at=t.lease_expires_at,
        cancelled=beat.cancelled,
    ).response()


@router.post("/tasks/{taskId}/release", openapi_extra=needs(P.WORK))
def give_back(jobnik: JobnikDep, task_id: TaskId, body: GiveBack, by: PrincipalDep) -> TaskOut:
    """Hand an unfinished task back to the queue (no attempt spent)."""
    return TaskOut.of(jobnik.give_back(task_id, body.attempt, body.reason, by=by))


@router.post(
    "/tasks/{taskId}/logs",
    status_code=201,
    openapi_extra=needs(P.WORK),
)
def append_logs(jobnik: JobnikDep, task_id: TaskId, body: LogLines, by: PrincipalDep) -> Appended:
    """Append lines to the log of the task's latest attempt (append-only, kept as events), open
    or ended: `attempt`, when given, must be it (else 409 STALE_ATTEMPT), and with access control
    on the token must be the one that dequeued it (else 403 FORBIDDEN); both refusals are
    recorded. At most JOBNIK_MAX_LOG_LINES (default 1,000) lines per request: 400
    TOO_MANY_LOG_LINES beyond."""
    jobnik.append_log(task_id, body.lines, body.attempt, by=by)
    return Appended(appended=len(body.lines))


def _cursor(text: str | None) -> str | None:
    if text is not None:
        LogCursor.parse(text)  # (its ValueError: 400 VALIDATION_ERROR)
    return text


LogAfter = Annotated[
    str | None,
    Query(
        pattern=f"^{CURSOR.pattern}$",
        description="a page's `next`, or a log position (the lines appended after it)",
    ),
    AfterValidator(_cursor),
]


@router.get("/tasks/{taskId}/logs", response_model=LogPageOut, openapi_extra=needs(P.READ))
def get_logs(
    views: ViewsDep,
    task_id: TaskId,
    after: LogAfter = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> LogPageOut:
    """The task's log lines, oldest first, `limit` at a time; each with its attempt, the actor
    that appended it and its append's log position."""
    page = views.logs.page(task_id, None if after is None else LogCursor.parse(after), limit)
    items = [LogLineOut.model_validate(vars(line)) for line in page.lines]
    return LogPageOut(items=items, next=None if page.next is None else str(page.next))


@router.post(
    "/tasks/{taskId}/rerun",
    responses=error_answers(
        MALFORMED,
        TaskNotRerunnable,
        OtherTasksFailed,
        JOB_NOT_ENDED,
        *STAGE_NOT_CURRENT,
        (TaskNotFound, "no such task (a deleted job's tasks are gone)"),
    ),
    openapi_extra=needs(P.OPERATE),
)
def rerun_task(
    jobnik: JobnikDep,
    task_id: TaskId,
    by: PrincipalDep,
    body: Annotated[RerunRequest | None, Body()] = None,
) -> RerunOut:
    """jobnik: run a FAILED or ABORTED task again, with a fresh attempt budget; its stage and
    job reopen. The other tasks of the stage must not have failed (rerun the stage), and the
    stage must be the job's current one (else rerun the job). Answers what the rerun did."""
    reason = (body or RerunRequest()).reason
    return RerunOut.of(jobnik.rerun_task(task_id, by=by, reason=reason))
