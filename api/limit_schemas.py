"""Wire shapes of the concurrency limits: a limit to set, and a limit in force with its use."""

from __future__ import annotations

from datetime import datetime

from pydantic import Field

from jobnik.api.operator_schemas import Reason
from jobnik.api.schemas import ApiModel, OutModel
from jobnik.domain.limits import MAX_IN_PROGRESS
from jobnik.projections.queries.limits import LimitView


class LimitBody(ApiModel):
    """The limit to set; a value out of range is refused as INVALID_LIMIT."""

    max_in_progress: int = Field(
        description="at most this many tasks of the stage type IN_PROGRESS at once",
        json_schema_extra={"minimum": 1, "maximum": MAX_IN_PROGRESS},
    )
    reason: Reason | None = None


class LimitOut(OutModel):
    """A stage type's concurrency limit: its value, its use now (tasks IN_PROGRESS) and the room
    left, and who set it last, why and when."""

    stage_type: str
    max_in_progress: int
    in_progress: int
    room: int
    updated_by: str
    reason: str | None = None
    creation_time: datetime
    update_time: datetime

    @classmethod
    def of(cls, v: LimitView) -> LimitOut:
        return cls(
            stage_type=v.stage_type,
            max_in_progress=v.max_in_progress,
            in_progress=v.in_progress,
            room=v.room,
            updated_by=v.updated_by,
            reason=v.reason,
            creation_time=v.creation_time,
            update_time=v.update_time,
        )


class LimitsOut(ApiModel):
    """The limits in force, by stage type."""

    total: int = Field(ge=0)
    items: list[LimitOut]
