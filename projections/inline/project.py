"""The inline read models as a pure function: an event (and its log position) → row operations.

The same function drives the live write path and `jobnik projections rebuild`, so a rebuilt read
model equals its live twin row for row.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from eventsourcing.domain import DomainEventProtocol

from jobnik.domain.jobs import Job
from jobnik.domain.limits import gate_of
from jobnik.domain.stages import Stage
from jobnik.domain.statuses import JobStatus, Priority, StageStatus
from jobnik.projections.inline.archives import ARCHIVE_PROJECT, job_rows
from jobnik.projections.inline.history import entity_row
from jobnik.projections.inline.limits import LIMIT_PROJECT
from jobnik.projections.inline.ops import (
    Add,
    Delete,
    Gate,
    IndexEvent,
    Insert,
    Op,
    QueueChange,
    Update,
    own_row,
)
from jobnik.projections.inline.queue import is_open
from jobnik.projections.inline.schedules import SCHEDULE_PROJECT
from jobnik.projections.inline.tables import (
    ENTITY_JOBS,
    JOBS,
    LOGS,
    QUEUE,
    STAGES,
    SUMMARIES,
    TASKS,
)
from jobnik.projections.inline.task_ops import TASK_PROJECT
from jobnik.projections.inline.tokens import TOKEN_PROJECT

# Status strings as plain constants, not `Enum.value` lookups: the projection runs for every
# event of a rebuild.
JOB_IN_PROGRESS: Final = JobStatus.IN_PROGRESS.value
JOB_PAUSED: Final = JobStatus.PAUSED.value
JOB_PENDING: Final = JobStatus.PENDING.value
STAGE_IN_PROGRESS: Final = StageStatus.IN_PROGRESS.value
STAGE_PENDING: Final = StageStatus.PENDING.value


def _job(e: Any, **values: Any) -> Update:
    return own_row(JOBS, e, values)


def _stage(e: Any, **values: Any) -> Update:
    return own_row(STAGES, e, values)


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
                "not_before": e.not_before,
                "retry_policy": e.retry_policy,
                "deadline": e.deadline,
                "schedule_to_start_seconds": e.schedule_to_start_seconds,
                "fairness_key": e.fairness_key,
                "fairness_weight": e.fairness_weight,
                "concurrency_key": e.concurrency_key,
                "gate": gate_of(e.originator_id, e.concurrency_key),
            },
        )
    ]


def _ended(
    row: Callable[..., Update], key: str, status: JobStatus | StageStatus
) -> Callable[[Any, int], list[Op]]:
    """A job or stage reached a final status: stamp it, and its tasks leave the queue. A FAILED
    one's tasks still queued stay in the queue, closed, as a paused job's do: a rerun opens them
    again (StageReopened, JobReopened)."""

    value = status.value
    if status in (JobStatus.FAILED, StageStatus.FAILED):
        closed = {"job_open" if key == "job_id" else "stage_open": is_open(value)}

        def failed(e: Any, _: int) -> list[Op]:
            return [
                row(e, status=value, end_time=e.timestamp),
                QueueChange({key: e.originator_id}, closed, e.timestamp),
            ]

        return failed

    def project(e: Any, _: int) -> list[Op]:
        return [
            row(e, status=value, end_time=e.timestamp),
            Delete(QUEUE, {key: e.originator_id}),
        ]

    return project


def _job_reopened(e: Job.JobReopened, _: int) -> list[Op]:
    return [
        _job(
            e,
            status=e.status,
            end_time=None,
            completed_stages=e.completed_stages,
            percentage=e.percentage,
            completing=e.completing,
            deadline=None,
        ),
        QueueChange({"job_id": e.originator_id}, {"job_open": is_open(e.status)}, e.timestamp),
    ]


def _stage_reopened(e: Stage.StageReopened, _: int) -> list[Op]:
    return [
        _stage(e, status=e.status, end_time=None, deadline=None),
        QueueChange({"stage_id": e.originator_id}, {"stage_open": is_open(e.status)}, e.timestamp),
    ]


def _stage_released(e: Stage.StageReleased, _: int) -> list[Op]:
    """Its queued tasks can be dequeued, their turns moved to the queue's head (domain/turns.py)."""
    key = {"stage_id": e.originator_id}
    return [
        _stage(e, status=STAGE_PENDING),
        QueueChange(key, {"stage_open": is_open(STAGE_PENDING)}, e.timestamp),
        *([Add(QUEUE, key, {"turn": e.turn_shift})] if e.turn_shift else []),
    ]


def _job_resumed(e: Job.JobResumed, _: int) -> list[Op]:
    return [
        _job(e, status=e.status),
        QueueChange({"job_id": e.originator_id}, {"job_open": is_open(e.status)}, e.timestamp),
    ]


def _job_priority_changed(e: Job.JobPriorityChanged, _: int) -> list[Op]:
    rank = Priority(e.priority).rank
    return [
        _job(e, priority=e.priority, priority_rank=rank),
        Update(QUEUE, {"job_id": e.originator_id}, {"priority_rank": rank}),
    ]


def _job_deleted(e: Job.JobDeleted, _: int) -> list[Op]:
    return job_rows(e.originator_id)


def _job_erased(e: Job.JobErased, _: int) -> list[Op]:
    """The user data of the job's rows goes (its events' were rewritten in the same
    transaction: a rebuild finds none to write)."""
    job = {"job_id": e.originator_id}
    erased: dict[str, Any] = {"data": {}, "user_metadata": {}}
    return [
        _job(e, **erased),
        Update(STAGES, job, erased),
        Update(TASKS, job, {**erased, "result": None}),
        Delete(LOGS, job),
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
                "not_before": e.not_before,
                "retry_policy": e.retry_policy,
                "deadline": e.deadline,
                "schedule_to_start_seconds": e.schedule_to_start_seconds,
            },
        ),
        Insert(SUMMARIES, {"stage_id": e.originator_id, "job_id": e.job_id}),
    ]


def _gated(handler: Callable[[Any, int], list[Op]]) -> Callable[[Any, int], list[Op]]:
    """`handler`, followed by a `Gate` for each job or stage whose queued tasks it changes: they
    may now pass their key's per-key limit, or no longer (inline/gates.py)."""

    def project(e: Any, position: int) -> list[Op]:
        ops = handler(e, position)
        return [*ops, *(Gate(key) for op in ops if (key := _queue_key(op)) is not None)]

    return project


def _queue_key(op: Op) -> Mapping[str, Any] | None:
    """The job or stage whose queue rows `op` changes, if it changes a job's or stage's."""
    queue = isinstance(op, QueueChange) or (
        isinstance(op, Update | Add | Delete) and op.table == QUEUE
    )
    return op.key if queue and ("job_id" in op.key or "stage_id" in op.key) else None  # type: ignore[union-attr]


_JOBS_AND_STAGES: Final[Mapping[type, Callable[[Any, int], list[Op]]]] = {
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
        QueueChange({"job_id": e.originator_id}, {"job_open": is_open(JOB_PAUSED)}, e.timestamp),
    ],
    Job.JobResumed: _job_resumed,
    Job.JobProgressed: lambda e, _: [
        _job(e, completed_stages=e.completed_stages, percentage=e.percentage)
    ],
    Job.JobCompleted: _ended(_job, "job_id", JobStatus.COMPLETED),
    Job.JobFailed: _ended(_job, "job_id", JobStatus.FAILED),
    Job.JobAborted: _ended(_job, "job_id", JobStatus.ABORTED),
    Job.JobReopened: _job_reopened,
    Job.JobPriorityChanged: _job_priority_changed,
    Job.JobUserMetadataReplaced: lambda e, _: [_job(e, user_metadata=e.user_metadata)],
    Job.JobRescheduled: lambda e, _: [_job(e, not_before=e.not_before)],
    Job.JobDeleted: _job_deleted,
    Job.JobErased: _job_erased,
    Stage.StageAdded: _stage_added,
    Stage.StageReleased: _stage_released,
    Stage.StageStarted: lambda e, _: [_stage(e, status=STAGE_IN_PROGRESS, start_time=e.timestamp)],
    Stage.StageCompleted: _ended(_stage, "stage_id", StageStatus.COMPLETED),
    Stage.StageFailed: _ended(_stage, "stage_id", StageStatus.FAILED),
    Stage.StageAborted: _ended(_stage, "stage_id", StageStatus.ABORTED),
    Stage.StageReopened: _stage_reopened,
    Stage.StageUserMetadataReplaced: lambda e, _: [_stage(e, user_metadata=e.user_metadata)],
    Stage.StageRescheduled: lambda e, _: [_stage(e, not_before=e.not_before)],
}

PROJECT: Final[Mapping[type, Callable[[Any, int], list[Op]]]] = {
    **{kind: _gated(handler) for kind, handler in _JOBS_AND_STAGES.items()},
    **TASK_PROJECT,
    **TOKEN_PROJECT,
    **SCHEDULE_PROJECT,
    **LIMIT_PROJECT,
    **ARCHIVE_PROJECT,
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
