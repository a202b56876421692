"""Wire shapes of the activity reads: each stage type's tasks minute by minute, a job's
completed tasks minute by minute."""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from pydantic import Field

from jobnik.api.schemas import ApiModel
from jobnik.projections.queries.activity import JobMinute, Minute, TypeActivity


class MinuteOut(ApiModel):
    """One minute of a stage type (its start, UTC): tasks queued (created, retried, handed back,
    dispatched again or rerun), dequeued, completed, retried after a failed attempt and failed
    for good, and its queued tasks (PENDING or RETRIED) at the minute's end."""

    start: datetime
    enqueued: int
    dequeued: int
    completed: int
    retried: int
    failed: int
    queued: int

    @classmethod
    def of(cls, m: Minute) -> MinuteOut:
        return cls(**vars(m))


class TypeActivityOut(ApiModel):
    stage_type: str
    queued: int = Field(description="its queued tasks now, as GET /v1/queues counts them")
    minutes: list[MinuteOut] = Field(description="every minute of the window, oldest first")

    @classmethod
    def of(cls, a: TypeActivity) -> TypeActivityOut:
        return cls(
            stage_type=a.stage_type,
            queued=a.queued,
            minutes=[MinuteOut.of(m) for m in a.minutes],
        )


class ActivityOut(ApiModel):
    total: int = Field(description="stage types with queued tasks or activity in the window")
    items: list[TypeActivityOut]


class JobMinuteOut(ApiModel):
    start: datetime
    completed: int

    @classmethod
    def of(cls, m: JobMinute) -> JobMinuteOut:
        return cls(start=m.start, completed=m.completed)


class JobActivityOut(ApiModel):
    job_id: UUID
    minutes: list[JobMinuteOut] = Field(
        description="from the job's first minute with a completed task to its last, oldest "
        "first, within the day of activity kept"
    )
