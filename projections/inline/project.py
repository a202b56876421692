"""The inline read models as a pure function: an event (and its log position) → row operations.

The same function drives the live write path and `jobnik projections rebuild`, so a rebuilt read
model equals its live twin row for row.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from eventsourcing.domain import DomainEventProtocol

from jobnik.domain.jobs import Job
from jobnik.domain.stages import Stage
from jobnik.domain.statuses import JobStatus, Priority, StageStatus, TaskStatus
from jobnik.domain.tasks import Task
from jobnik.projections.inline.history import entity_row
from jobnik.projections.inline.ops import Add, Delete, Enqueue, IndexEvent, Insert, Op, Update
from jobnik.projections.inline.queue import is_open
from jobnik.projections.inline.tables import (
    ENTITY_JOBS,
    JOBS,
    LOGS,
    QUEUE,
    STAGES,
    SUMMARIES,
    TASKS,
)
from jobnik.projections.inline.tokens import TOKEN_PROJECT

# A stage summary's counter by task status (snake_case here, camelCase on the wire).
SUMMARY_KEY: Final = {
    TaskStatus.PENDING: "pending",
    TaskStatus.IN_PROGRESS: "in_progress",
    TaskStatus.COMPLETED: "completed",
    TaskStatus.FAILED: "failed",
    TaskStatus.CREATED: "created",
    TaskStatus.RETRIED: "retried",
    TaskStatus.ABORTED: "aborted",
    TaskStatus.DELEGATED: "delegated",
}
_SUMMARY_OF: Final = {status.value: key for status, key in SUMMARY_KEY.items()}
# Status strings as plain constants, not `Enum.value` lookups: the projection runs for every
# event of a rebuild.
JOB_IN_PROGRESS: Final = JobStatus.IN_PROGRESS.value
JOB_PAUSED: Final = JobStatus.PAUSED.value
JOB_PENDING: Final = JobStatus.PENDING.value
STAGE_IN_PROGRESS: Final = StageStatus.IN_PROGRESS.value
STAGE_PENDING: Final = StageStatus.PENDING.value
TASK_ABORTED: Final = TaskStatus.ABORTED.value
TASK_COMPLETED: Final = TaskStatus.COMPLETED.value
TASK_FAILED: Final = TaskStatus.FAILED.value
TASK_IN_PROGRESS: Final = TaskStatus.IN_PROGRESS.value
TASK_PENDING: Final = TaskStatus.PENDING.value
TASK_RETRIED: Final = TaskStatus.RETRIED.value


def _updates(table: str) -> Callable[..., Update]:
    """The Update an event of an aggregate makes to its row of `table`: its version, its update
    time, and `values`."""

    def update(e: Any, **values: Any) -> Update:
        return Update(
            table,
            {"id": e.originator_id},
            {"version": e.originator_version, "update_time": e.timestamp, **values},
        )

    return update


_job, _stage, _task = _updates(JOBS), _updates(STAGES), _updates(TASKS)


def _summary(e: Any, **deltas: int) -> Add:
    return Add(SUMMARIES, {"stage_id": e.stage_id}, deltas)


def _job_created(e: Job.JobCreated, _: int) -> list[Op]:
    return [
        Insert(
            JOBS,
            {
                "id": e.originator_id,
                "version": e.originator_version,
                "name": e.name,
                "data": e.data,
                "priority": e.priority,
                "priority_rank": Priority(e.priority).rank,
                "user_metadata": e.user_metadata,
                "status": JOB_PENDING,
                "percentage": 0,
                "traceparent": e.traceparent,
                "tracestate": e.tracestate,
                "started": False,
                "stage_count": 0,
                "completed_stages": 0,
                "creation_time": e.timestamp,
                "update_time": e.timestamp,
                "start_time": None,
                "end_time": None,
                "mode": e.mode,
                "parent_task_id": e.parent_task_id,
                "parent_job_id": e.parent_job_id,
                "completion_stages": 0,
                "finishing": False,
                "completing": False,
                "finish_time": None,
            },
        )
    ]


def _ended(
    row: Callable[..., Update], key: str, status: JobStatus | StageStatus
) -> Callable[[Any, int], list[Op]]:
    """A job or stage reached a final status: stamp it, and its tasks leave the queue."""

    value = status.value

    def project(e: Any, _: int) -> list[Op]:
        return [
            row(e, status=value, end_time=e.timestamp),
            Delete(QUEUE, {key: e.originator_id}),
        ]

    return project


def _job_resumed(e: Job.JobResumed, _: int) -> list[Op]:
    return [
        _job(e, status=e.status),
        Update(QUEUE, {"job_id": e.originator_id}, {"job_open": is_open(e.status)}),
    ]


def _job_priority_changed(e: Job.JobPriorityChanged, _: int) -> list[Op]:
    rank = Priority(e.priority).rank
    return [
        _job(e, priority=e.priority, priority_rank=rank),
        Update(QUEUE, {"job_id": e.originator_id}, {"priority_rank": rank}),
    ]


def _job_deleted(e: Job.JobDeleted, _: int) -> list[Op]:
    job = {"job_id": e.originator_id}
    return [
        Delete(QUEUE, job),
        Delete(LOGS, job),
        Delete(TASKS, job),
        Delete(SUMMARIES, job),
        Delete(STAGES, job),
        Delete(JOBS, {"id": e.originator_id}),
    ]


def _stage_added(e: Stage.StageAdded, _: int) -> list[Op]:
    return [
        Insert(
            STAGES,
            {
                "id": e.originator_id,
                "version": e.originator_version,
                "job_id": e.job_id,
                "stage_order": e.order,
                "type": e.type,
                "data": e.data,
                "user_metadata": e.user_metadata,
                "status": e.status,
                "traceparent": e.traceparent,
                "tracestate": e.tracestate,
                "creation_time": e.timestamp,
                "update_time": e.timestamp,
                "start_time": None,
                "end_time": None,
                "completion": e.completion,
                "failure_patterns": e.failure_patterns,
            },
        ),
        Insert(SUMMARIES, {"stage_id": e.originator_id, "job_id": e.job_id}),
    ]


def _task_created(e: Task.TaskCreated, position: int) -> list[Op]:
    return [
        Insert(
            TASKS,
            {
                "id": e.originator_id,
                "version": e.originator_version,
                "stage_id": e.stage_id,
                "job_id": e.job_id,
                "stage_type": e.stage_type,
                "data": e.data,
                "user_metadata": e.user_metadata,
                "status": TASK_PENDING,
                "attempts": 0,
                "max_attempts": e.max_attempts,
                "attempt": 0,
                "lease_seconds": 0,
                "lease_expires_at": None,
                "traceparent": e.traceparent,
                "tracestate": e.tracestate,
                "creation_time": e.timestamp,
                "update_time": e.timestamp,
                "start_time": None,
                "end_time": None,
                "result": None,
                "delegations": 0,
                "delegated_at": None,
                "holder": None,
            },
        ),
        _summary(e, pending=1, total=1),
        Enqueue(e.originator_id, e.stage_id, position),
    ]


def _task_dequeued(e: Task.TaskDequeued, _: int) -> list[Op]:
    return [
        _task(
            e,
            status=TASK_IN_PROGRESS,
            start_time=e.timestamp,
            attempt=e.attempt,
            lease_seconds=e.lease_seconds,
            lease_expires_at=e.lease_expires_at,
            holder=e.holder,
        ),
        _summary(e, **{_SUMMARY_OF[e.previous]: -1, "in_progress": 1}),
        Delete(QUEUE, {"task_id": e.originator_id}),
    ]


def _task_retried(e: Task.TaskRetried, position: int) -> list[Op]:
    return [
        _task(e, status=TASK_RETRIED, attempts=e.attempts, lease_expires_at=None),
        _summary(e, in_progress=-1, retried=1),
        Enqueue(e.originator_id, e.stage_id, position),
    ]


def _task_aborted(e: Task.TaskAborted, _: int) -> list[Op]:
    return [
        _task(e, status=TASK_ABORTED, end_time=e.timestamp, lease_expires_at=None),
        _summary(e, **{_SUMMARY_OF[e.previous]: -1, "aborted": 1}),
        Delete(QUEUE, {"task_id": e.originator_id}),
    ]


def _task_returned(e: Task.TaskReturned, position: int) -> list[Op]:
    return [
        _task(e, status=TASK_PENDING, lease_expires_at=None),
        _summary(e, in_progress=-1, pending=1),
        Enqueue(e.originator_id, e.stage_id, position),
    ]


def _task_delegated(e: Task.TaskDelegated, _: int) -> list[Op]:
    return [
        _task(
            e, status=TaskStatus.DELEGATED.value, lease_expires_at=None, delegated_at=e.timestamp
        ),
        Add(TASKS, {"id": e.originator_id}, {"delegations": 1}),
        _summary(e, in_progress=-1, delegated=1),
    ]


def _task_redispatched(e: Task.TaskRedispatched, position: int) -> list[Op]:
    return [
        _task(e, status=TaskStatus.PENDING.value, delegated_at=None),
        _summary(e, delegated=-1, pending=1),
        Enqueue(e.originator_id, e.stage_id, position),
    ]


def _task_logged(e: Task.TaskLogged, position: int) -> list[Op]:
    lines: list[Op] = [
        Insert(
            LOGS,
            {
                "task_id": e.originator_id,
                "position": position,
                "line_no": i,
                "job_id": e.job_id,
                "attempt": e.attempt,
                "time": e.timestamp,
                "line": line,
            },
        )
        for i, line in enumerate(e.lines)
    ]
    return [_task(e), *lines]


PROJECT: Final[Mapping[type, Callable[[Any, int], list[Op]]]] = {
    Job.JobCreated: _job_created,
    Job.StageAppended: lambda e, _: [
        _job(e, stage_count=e.order),
        *([Add(JOBS, {"id": e.originator_id}, {"completion_stages": 1})] if e.completion else []),
    ],
    Job.JobFinishing: lambda e, _: [_job(e, finishing=True, finish_time=e.timestamp)],
    Job.JobCompleting: lambda e, _: [_job(e, completing=True)],
    Job.JobStarted: lambda e, _: [
        _job(e, status=JOB_IN_PROGRESS, started=True, start_time=e.timestamp)
    ],
    Job.JobPaused: lambda e, _: [
        _job(e, status=JOB_PAUSED),
        Update(QUEUE, {"job_id": e.originator_id}, {"job_open": is_open(JOB_PAUSED)}),
    ],
    Job.JobResumed: _job_resumed,
    Job.JobProgressed: lambda e, _: [
        _job(e, completed_stages=e.completed_stages, percentage=e.percentage)
    ],
    Job.JobCompleted: _ended(_job, "job_id", JobStatus.COMPLETED),
    Job.JobFailed: _ended(_job, "job_id", JobStatus.FAILED),
    Job.JobAborted: _ended(_job, "job_id", JobStatus.ABORTED),
    Job.JobPriorityChanged: _job_priority_changed,
    Job.JobUserMetadataReplaced: lambda e, _: [_job(e, user_metadata=e.user_metadata)],
    Job.JobDeleted: _job_deleted,
    Stage.StageAdded: _stage_added,
    Stage.StageReleased: lambda e, _: [
        _stage(e, status=STAGE_PENDING),
        Update(QUEUE, {"stage_id": e.originator_id}, {"stage_open": is_open(STAGE_PENDING)}),
    ],
    Stage.StageStarted: lambda e, _: [_stage(e, status=STAGE_IN_PROGRESS, start_time=e.timestamp)],
    Stage.StageCompleted: _ended(_stage, "stage_id", StageStatus.COMPLETED),
    Stage.StageFailed: _ended(_stage, "stage_id", StageStatus.FAILED),
    Stage.StageAborted: _ended(_stage, "stage_id", StageStatus.ABORTED),
    Stage.StageUserMetadataReplaced: lambda e, _: [_stage(e, user_metadata=e.user_metadata)],
    Task.TaskCreated: _task_created,
    Task.TaskDequeued: _task_dequeued,
    Task.TaskCompleted: lambda e, _: [
        _task(
            e,
            status=TASK_COMPLETED,
            end_time=e.timestamp,
            lease_expires_at=None,
            result=e.result,
        ),
        _summary(e, in_progress=-1, completed=1),
    ],
    Task.TaskDelegated: _task_delegated,
    Task.TaskChildEnded: lambda e, _: [_task(e)],
    Task.TaskRedispatched: _task_redispatched,
    Task.TaskRetried: _task_retried,
    Task.TaskFailed: lambda e, _: [
        _task(
            e,
            status=TASK_FAILED,
            attempts=e.attempts,
            end_time=e.timestamp,
            lease_expires_at=None,
        ),
        _summary(e, in_progress=-1, failed=1),
    ],
    Task.TaskAborted: _task_aborted,
    Task.TaskUserMetadataReplaced: lambda e, _: [_task(e, user_metadata=e.user_metadata)],
    Task.TaskLeaseExtended: lambda e, _: [_task(e, lease_expires_at=e.lease_expires_at)],
    Task.TaskReturned: _task_returned,
    Task.TaskAttemptRefused: lambda e, _: [_task(e)],
    Task.TaskLogged: _task_logged,
    **TOKEN_PROJECT,
}


def project(event: DomainEventProtocol[Any], position: int) -> list[Op]:
    """The row operations `event`, stored at log `position`, makes to the inline read models."""
    ops = project_rows(event, position)
    ops.append(IndexEvent(event.originator_id, position))  # the history index (history.py)
    return ops


def project_rows(event: DomainEventProtocol[Any], position: int) -> list[Op]:
    """`project` but for the event's IndexEvent: the rebuild's fold files a page's events
    together (rebuild/fold.py)."""
    handler = PROJECT.get(type(event))
    ops = handler(event, position) if handler else []  # a new list: ours to extend
    entity = entity_row(event)  # the history index (history.py)
    if entity is not None:
        ops.append(Insert(ENTITY_JOBS, entity))
    return ops
