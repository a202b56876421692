"""Bodies and answers of the retention and archive routes."""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from pydantic import Field

from jobnik.api.operator_schemas import Reason
from jobnik.api.schemas import ApiModel, OutModel
from jobnik.domain.archives import MAX_PERIOD_SECONDS
from jobnik.projections.queries.archives import Record, Retention


class SetRetention(ApiModel):
    # (the bounds are checked by the command, which names them: INVALID_RETENTION_PERIOD)
    period_seconds: int | None = Field(
        description="jobnik: the name's jobs are archived this many seconds after they end "
        f"(1 to {MAX_PERIOD_SECONDS}); null: the server's default period applies again",
        json_schema_extra={"minimum": 1, "maximum": MAX_PERIOD_SECONDS},
    )
    reason: Reason | None = None


class RetentionOut(OutModel):
    name: str
    period_seconds: int
    set_by: str
    set_time: datetime

    @classmethod
    def of(cls, r: Retention) -> RetentionOut:
        return cls(
            name=r.name, period_seconds=r.period_seconds, set_by=r.set_by, set_time=r.set_time
        )


class RetentionPolicyOut(OutModel):
    """The server's default period (absent: ended jobs are kept) and each name's own."""

    default_seconds: int | None = None
    names: list[RetentionOut]


class ArchiveOut(OutModel):
    """Where an archived job's events are: its file in the archive directory and what it
    holds."""

    job_id: UUID
    name: str
    location: str
    checksum: str
    events: int
    last_position: int
    ended_at: datetime
    archived_by: str
    archived_at: datetime

    @classmethod
    def of(cls, r: Record) -> ArchiveOut:
        f = r.file
        return cls(
            job_id=f.job_id,
            name=f.name,
            location=f.location,
            checksum=f.checksum,
            events=f.events,
            last_position=f.last_position,
            ended_at=f.ended_at,
            archived_by=r.archived_by,
            archived_at=r.archived_at,
        )


class EraseJob(ApiModel):
    reason: Reason = Field(description="jobnik: why; recorded on the JobErased event (required)")
