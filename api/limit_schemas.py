"""Wire shapes of the stage types' limits: a concurrency limit or a rate to set, and a type's
limits in force with their use."""

from __future__ import annotations

from datetime import datetime
from typing import Literal, cast

from pydantic import Field

from jobnik.api.operator_schemas import Reason
from jobnik.api.schemas import ApiModel, OutModel
from jobnik.domain.limits import MAX_IN_PROGRESS, MAX_INTERVAL, MAX_PER_KEY
from jobnik.projections.queries.limits import LimitView


class LimitBody(ApiModel):
    """The limit to set; a value out of range is refused as INVALID_LIMIT."""

    max_in_progress: int = Field(
        description="at most this many tasks of the stage type IN_PROGRESS at once",
        json_schema_extra={"minimum": 1, "maximum": MAX_IN_PROGRESS},
    )
    reason: Reason | None = None


class KeyLimitBody(ApiModel):
    """The per-key limit to set; a value out of range is refused as INVALID_LIMIT."""

    max_in_progress: int = Field(
        description="at most this many tasks of the stage type IN_PROGRESS at once per "
        "concurrency key (a job's concurrencyKey, or else the job itself)",
        json_schema_extra={"minimum": 1, "maximum": MAX_PER_KEY},
    )
    reason: Reason | None = None


class KeyRateBody(ApiModel):
    """The per-key rate to set; a value out of range (a zero interval too) is refused as
    INVALID_LIMIT."""

    starts: int = Field(
        description="at most this many task starts per interval per concurrency key (each "
        "key's bucket's size)",
        json_schema_extra={"minimum": 1, "maximum": MAX_PER_KEY},
    )
    interval_seconds: int = Field(
        description="the interval, in seconds: each key's bucket refills `starts` tokens over it",
        json_schema_extra={"minimum": 1, "maximum": MAX_INTERVAL},
    )
    reason: Reason | None = None


class RateBody(ApiModel):
    """The rate to set; a value out of range (a zero interval too) is refused as INVALID_LIMIT."""

    starts: int = Field(
        description="at most this many task starts per interval (the bucket's size)",
        json_schema_extra={"minimum": 1, "maximum": MAX_IN_PROGRESS},
    )
    interval_seconds: int = Field(
        description="the interval, in seconds: the bucket refills `starts` tokens over it",
        json_schema_extra={"minimum": 1, "maximum": MAX_INTERVAL},
    )
    reason: Reason | None = None


QueueOrder = Literal["fifo", "fair"]


class OrderBody(ApiModel):
    """The queue order to set."""

    order: QueueOrder = Field(
        description="fifo: first in, first out (the default); fair: the jobs of one priority "
        "take turns, one task of each, then the next of each"
    )
    reason: Reason | None = None


class RateOut(OutModel):
    """A rate limit: `starts` per `intervalSeconds`, and the whole tokens in its bucket now."""

    starts: int
    interval_seconds: int
    tokens: int


class KeyRateOut(OutModel):
    """A per-key rate limit: `starts` per `intervalSeconds` for each concurrency key."""

    starts: int
    interval_seconds: int


class KeyLimitOut(OutModel):
    """The limits per concurrency key: at most `maxInProgress` tasks in progress (absent: none)
    and a rate (absent: none) for each key, and the queued tasks they hold back now (their key
    has no room, or no token)."""

    max_in_progress: int | None = None
    rate: KeyRateOut | None = None
    held_back: int


class LimitOut(OutModel):
    """A stage type's limits: its concurrency limit (absent: none) and its use now (tasks
    IN_PROGRESS), its per-key limit (absent: none), its rate (absent: none), the room a dequeue
    has now, its queue order, and who changed them last, why and when."""

    stage_type: str
    max_in_progress: int | None = None
    in_progress: int
    per_key: KeyLimitOut | None = None
    rate: RateOut | None = None
    room: int
    order: QueueOrder
    updated_by: str
    reason: str | None = None
    creation_time: datetime
    update_time: datetime

    @classmethod
    def of(cls, v: LimitView) -> LimitOut:
        tokens = v.rate_tokens
        rate = (
            RateOut(
                starts=v.rate_starts,
                interval_seconds=v.rate_interval_seconds,
                tokens=int(tokens),
            )
            if v.rate_starts is not None
            and v.rate_interval_seconds is not None
            and tokens is not None
            else None
        )
        return cls(
            stage_type=v.stage_type,
            max_in_progress=v.max_in_progress,
            in_progress=v.in_progress,
            per_key=(
                None
                if not v.keyed
                else KeyLimitOut(
                    max_in_progress=v.max_in_progress_per_key,
                    rate=(
                        None
                        if v.key_rate_starts is None or v.key_rate_interval_seconds is None
                        else KeyRateOut(
                            starts=v.key_rate_starts, interval_seconds=v.key_rate_interval_seconds
                        )
                    ),
                    held_back=v.held_by_key,
                )
            ),
            rate=rate,
            room=v.room,
            order=cast(QueueOrder, v.queue_order),
            updated_by=v.updated_by,
            reason=v.reason,
            creation_time=v.creation_time,
            update_time=v.update_time,
        )


class LimitsOut(ApiModel):
    """The stage types with a limit in force, by stage type."""

    total: int = Field(ge=0)
    items: list[LimitOut]
