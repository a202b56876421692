"""Wire shapes of the operators' reads: each stage type's queue, and stuck work.

Fields without a value answer `null` (these shapes keep every key)."""

from __future__ import annotations

from datetime import datetime
from typing import Literal, cast
from uuid import UUID

from pydantic import Field

from jobnik.api.limit_schemas import QueueOrder
from jobnik.api.schemas import ApiModel
from jobnik.projections.queries.limits import LimitView
from jobnik.projections.queries.operations import Queue, Stuck

StuckKind = Literal[
    "LEASE_EXPIRED_REPEATEDLY",
    "DELEGATION_NOT_REDISPATCHED",
    "JOB_IDLE",
    "QUEUE_NOT_DEQUEUED",
    "SCHEDULE_RUNS_FAILING",
]


class QueueOut(ApiModel):
    """One stage type's tasks: queued (PENDING or RETRIED), in progress, completed, failed; the
    oldest task a dequeue could take now and how long it has waited; the last dequeue; its
    concurrency limit (null: none) and the queued tasks waiting on it, and those its per-key
    limit holds back; the queued tasks waiting for their time; its queue order."""

    stage_type: str
    queued: int
    oldest_queued_at: datetime | None
    oldest_queued_age_seconds: float | None
    in_progress: int
    completed: int
    failed: int
    last_dequeue_at: datetime | None
    max_in_progress: int | None = Field(
        default=None, description="the stage type's concurrency limit (null: none)"
    )
    held_back: int = Field(
        default=0, description="queued tasks beyond the room the concurrency limit leaves"
    )
    held_by_key: int = Field(
        default=0,
        description="queued tasks a per-key limit holds back: their key has no room",
    )
    delayed: int = Field(
        default=0,
        description="queued tasks waiting for their not-before time (a delay, a retry's backoff)",
    )
    order: QueueOrder = Field(
        default="fifo",
        description="the order its queued tasks are dequeued in after job priority: fifo, or "
        "fair (the jobs of one priority take turns)",
    )

    @classmethod
    def of(cls, q: Queue, now: datetime, limit: LimitView | None = None) -> QueueOut:
        oldest = q.oldest_queued_at
        return cls(
            stage_type=q.stage_type,
            queued=q.queued,
            oldest_queued_at=oldest,
            oldest_queued_age_seconds=(
                max(0.0, (now - oldest).total_seconds()) if oldest is not None else None
            ),
            in_progress=q.in_progress,
            completed=q.completed,
            failed=q.failed,
            last_dequeue_at=q.last_dequeue_at,
            max_in_progress=limit.max_in_progress if limit is not None else None,
            held_back=limit.held_back if limit is not None else 0,
            held_by_key=limit.held_by_key if limit is not None else 0,
            delayed=q.delayed,
            order=cast(QueueOrder, limit.queue_order) if limit is not None else "fifo",
        )


class QueuesOut(ApiModel):
    """A page of stage types' queues, by stage type, and how many stage types have tasks."""

    total: int = Field(ge=0)
    items: list[QueueOut]


class StuckOut(ApiModel):
    """Work that is not moving: what kind, why (in words), since when, and what it is."""

    kind: StuckKind
    reason: str
    since: datetime
    job_id: UUID | None = Field(description="the job, or null (QUEUE_NOT_DEQUEUED)")
    stage_id: UUID | None
    task_id: UUID | None
    stage_type: str | None
    schedule_id: UUID | None = Field(
        default=None, description="the schedule (SCHEDULE_RUNS_FAILING), or null"
    )

    @classmethod
    def of(cls, s: Stuck) -> StuckOut:
        return cls(
            kind=s.kind,  # type: ignore[arg-type]
            reason=s.reason,
            since=s.since,
            job_id=s.job_id,
            stage_id=s.stage_id,
            task_id=s.task_id,
            stage_type=s.stage_type,
            schedule_id=s.schedule_id,
        )


class StuckListOut(ApiModel):
    items: list[StuckOut]
