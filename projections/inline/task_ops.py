"""The task events' row operations (tasks, stage summaries, the queue, task logs): the task half
of the inline projection (`project.PROJECT`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from jobnik.domain.statuses import TaskStatus
from jobnik.domain.tasks import Task
from jobnik.projections.inline.ops import (
    Add,
    Delete,
    Enqueue,
    Gate,
    Insert,
    Op,
    QueueChange,
    Update,
    own_row,
)
from jobnik.projections.inline.tables import LOGS, QUEUE, SUMMARIES, TASKS

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
# (plain strings, as project.py's job and stage statuses, and for the same reason)
TASK_ABORTED: Final = TaskStatus.ABORTED.value
TASK_COMPLETED: Final = TaskStatus.COMPLETED.value
TASK_FAILED: Final = TaskStatus.FAILED.value
TASK_IN_PROGRESS: Final = TaskStatus.IN_PROGRESS.value
TASK_PENDING: Final = TaskStatus.PENDING.value
TASK_RETRIED: Final = TaskStatus.RETRIED.value


def _task(e: Any, **values: Any) -> Update:
    return own_row(TASKS, e, values)


def _summary(e: Any, **deltas: int) -> Add:
    return Add(SUMMARIES, {"stage_id": e.stage_id}, deltas)


def _gate(e: Any) -> Gate:
    """The task's key may admit another of its queued tasks, or hold one (inline/gates.py)."""
    return Gate({"stage_id": e.stage_id})


def _ended(e: Any) -> Gate:
    """The task left IN_PROGRESS and the queue is as it was: only a per-key limit's room changed
    (a per-key rate's tokens did not), so only such a limit's gates are worked out again."""
    return Gate({"ended_stage_id": e.stage_id})


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
                "not_before": e.not_before,
                "retry_policy": e.retry_policy,
            },
        ),
        _summary(e, pending=1, total=1),
        Enqueue(e.originator_id, e.stage_id, position, e.timestamp, e.not_before, e.turn),
        _gate(e),
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
            not_before=None,
        ),
        _summary(e, **{_SUMMARY_OF[e.previous]: -1, "in_progress": 1}),
        Delete(QUEUE, {"task_id": e.originator_id}),
    ]


def _task_retried(e: Task.TaskRetried, position: int) -> list[Op]:
    return [
        _task(
            e,
            status=TASK_RETRIED,
            attempts=e.attempts,
            lease_expires_at=None,
            not_before=e.not_before,
        ),
        _summary(e, in_progress=-1, retried=1),
        Enqueue(e.originator_id, e.stage_id, position, e.timestamp, e.not_before, e.turn),
        _gate(e),
    ]


def _task_aborted(e: Task.TaskAborted, _: int) -> list[Op]:
    return [
        _task(e, status=TASK_ABORTED, end_time=e.timestamp, lease_expires_at=None, not_before=None),
        _summary(e, **{_SUMMARY_OF[e.previous]: -1, "aborted": 1}),
        Delete(QUEUE, {"task_id": e.originator_id}),
        _gate(e),
    ]


def _task_returned(e: Task.TaskReturned, position: int) -> list[Op]:
    return [
        _task(e, status=TASK_PENDING, lease_expires_at=None, not_before=None),
        _summary(e, in_progress=-1, pending=1),
        Enqueue(e.originator_id, e.stage_id, position, e.timestamp, turn=e.turn),
        _gate(e),
    ]


def _task_delegated(e: Task.TaskDelegated, _: int) -> list[Op]:
    return [
        _task(
            e, status=TaskStatus.DELEGATED.value, lease_expires_at=None, delegated_at=e.timestamp
        ),
        Add(TASKS, {"id": e.originator_id}, {"delegations": 1}),
        _summary(e, in_progress=-1, delegated=1),
        _ended(e),
    ]


def _task_redispatched(e: Task.TaskRedispatched, position: int) -> list[Op]:
    return [
        _task(e, status=TaskStatus.PENDING.value, delegated_at=None, not_before=None),
        _summary(e, delegated=-1, pending=1),
        Enqueue(e.originator_id, e.stage_id, position, e.timestamp, turn=e.turn),
        _gate(e),
    ]


def _task_logged(e: Task.TaskLogged, position: int) -> list[Op]:
    """One row per append, as the event is one: its cost does not grow with its lines' count."""
    row = {
        "task_id": e.originator_id,
        "position": position,
        "job_id": e.job_id,
        "attempt": e.attempt,
        "actor": e.actor,
        "time": e.timestamp,
        "line_count": len(e.lines),
        "lines": list(e.lines),
    }
    return [_task(e), Insert(LOGS, row)]


def _task_rerun(e: Task.TaskRerun, position: int) -> list[Op]:
    return [
        _task(
            e,
            status=TASK_PENDING,
            attempts=0,
            end_time=None,
            lease_expires_at=None,
            result=None,
            not_before=None,
        ),
        _summary(e, **{_SUMMARY_OF[e.previous]: -1, "pending": 1}),
        Enqueue(e.originator_id, e.stage_id, position, e.timestamp, turn=e.turn),
        _gate(e),
    ]


def _task_rescheduled(e: Task.TaskRescheduled, _: int) -> list[Op]:
    return [
        _task(e, not_before=e.not_before),
        QueueChange({"task_id": e.originator_id}, {"not_before": e.not_before}, e.timestamp),
        _gate(e),
    ]


def _task_failed(e: Task.TaskFailed, _: int) -> list[Op]:
    """Failed for good: from IN_PROGRESS, or (expired) from the queue, which it leaves."""
    row = _task(
        e, status=TASK_FAILED, attempts=e.attempts, end_time=e.timestamp, lease_expires_at=None
    )
    if e.previous is None:
        return [row, _summary(e, in_progress=-1, failed=1), _ended(e)]
    return [
        row,
        _summary(e, **{_SUMMARY_OF[e.previous]: -1, "failed": 1}),
        Delete(QUEUE, {"task_id": e.originator_id}),
        _gate(e),
    ]


TASK_PROJECT: Final[Mapping[type, Callable[[Any, int], list[Op]]]] = {
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
        _ended(e),
    ],
    Task.TaskDelegated: _task_delegated,
    Task.TaskChildEnded: lambda e, _: [_task(e)],
    Task.TaskRedispatched: _task_redispatched,
    Task.TaskRetried: _task_retried,
    Task.TaskFailed: _task_failed,
    Task.TaskAborted: _task_aborted,
    Task.TaskRerun: _task_rerun,
    Task.TaskUserMetadataReplaced: lambda e, _: [_task(e, user_metadata=e.user_metadata)],
    Task.TaskLeaseExtended: lambda e, _: [_task(e, lease_expires_at=e.lease_expires_at)],
    Task.TaskReturned: _task_returned,
    Task.TaskRescheduled: _task_rescheduled,
    Task.TaskAttemptRefused: lambda e, _: [_task(e)],
    Task.TaskLogged: _task_logged,
}
