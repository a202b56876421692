"""Time in what a producer sends: not-before times, retry policies and deadlines."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any


@dataclass(frozen=True)
class RetryPolicy:
    """How long a retried task waits before its next attempt: retry n waits
    `initial_seconds * coefficient ** (n - 1)`, at most `max_seconds`, less up to `jitter`
    (0 to 1) of it. The server refuses one out of bounds (ApiError, 400 INVALID_RETRY_POLICY)."""

    initial_seconds: float
    coefficient: float = 2.0
    max_seconds: float = 3600.0
    jitter: float = 0.0

    def to_json(self) -> dict[str, float]:
        return {
            "initialSeconds": self.initial_seconds,
            "coefficient": self.coefficient,
            "maxSeconds": self.max_seconds,
            "jitter": self.jitter,
        }


def instant(value: datetime) -> str:
    """`value` as the API reads a not-before time: ISO 8601 with its offset. A naive datetime
    names no instant: ValueError."""
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError("a not-before time needs a time zone (e.g. datetime.now(UTC))")
    return value.isoformat()


def timing(
    not_before: datetime | None,
    retry_policy: RetryPolicy | None,
    deadline: datetime | None,
    schedule_to_start_seconds: int | None = None,
) -> dict[str, Any]:
    """The body fields of a job's or stage's creation that say when its tasks may run, how
    they retry, by when it must have ended, and how long a task may wait in the queue."""
    body: dict[str, Any] = {}
    if schedule_to_start_seconds is not None:
        body["scheduleToStartSeconds"] = schedule_to_start_seconds
    if not_before is not None:
        body["notBefore"] = instant(not_before)
    if retry_policy is not None:
        body["retryPolicy"] = retry_policy.to_json()
    if deadline is not None:
        body["deadline"] = instant(deadline)
    return body
