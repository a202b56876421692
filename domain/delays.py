"""When a task may be dequeued: a not-before time, and the wait a retry policy puts before a
retried task's next attempt.

Both are decided here, once, by the command that records them: a retry's due time (jitter
included) is a field of its `TaskRetried` event, never worked out again when it is read.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final
from uuid import UUID

from jobnik.domain.errors import (
    InvalidDeadline,
    InvalidNotBefore,
    InvalidRetryPolicy,
    InvalidScheduleToStart,
    JobnikError,
)

# The longest wait a policy may name (about 115 days): a due time stays far inside the calendar.
MAX_DELAY_SECONDS: Final = 10_000_000.0
MAX_COEFFICIENT: Final = 1000.0


@dataclass(frozen=True)
class RetryPolicy:
    """Retry n (n = 1 for the first retry) waits `initial_seconds * coefficient ** (n - 1)`,
    at most `max_seconds`, less a jitter: a fraction of it up to `jitter` (0: none, 1: up to the
    whole wait), the same for a given task and retry."""

    initial_seconds: float
    coefficient: float = 2.0
    max_seconds: float = 3600.0
    jitter: float = 0.0

    def __post_init__(self) -> None:
        def refuse(why: str) -> None:
            raise InvalidRetryPolicy(f"retry policy: {why}")

        values = (self.initial_seconds, self.coefficient, self.max_seconds, self.jitter)
        if not all(isinstance(v, int | float) and math.isfinite(v) for v in values):
            refuse("every value must be a finite number")
        if not 0 < self.initial_seconds <= MAX_DELAY_SECONDS:
            refuse(f"initialSeconds must be above 0 and at most {MAX_DELAY_SECONDS:g}")
        if not 1 <= self.coefficient <= MAX_COEFFICIENT:
            refuse(f"coefficient must be at least 1 and at most {MAX_COEFFICIENT:g}")
        if not self.initial_seconds <= self.max_seconds <= MAX_DELAY_SECONDS:
            refuse(f"maxSeconds must be at least initialSeconds and at most {MAX_DELAY_SECONDS:g}")
        if not 0 <= self.jitter <= 1:
            refuse("jitter must be between 0 and 1")

    def base_delay(self, retry: int) -> float:
        """Retry `retry`'s wait before jitter (seconds)."""
        if retry <= 1 or self.coefficient == 1:
            return self.initial_seconds
        if (retry - 1) * math.log(self.coefficient) >= math.log(
            self.max_seconds / self.initial_seconds
        ):
            return self.max_seconds  # (and the power below, not worked out, cannot overflow)
        return min(self.initial_seconds * self.coefficient ** (retry - 1), self.max_seconds)

    def delay(self, retry: int, task_id: UUID) -> float:
        """Retry `retry` of task `task_id`'s wait (seconds), jitter taken off: within
        [base * (1 - jitter), base]."""
        base = self.base_delay(retry)
        return base * (1 - self.jitter * jitter_fraction(task_id, retry))

    def due(self, retry: int, task_id: UUID, now: datetime) -> datetime:
        """When retry `retry` of `task_id`, decided at `now`, may be dequeued."""
        return now + timedelta(seconds=self.delay(retry, task_id))

    def to_dict(self) -> dict[str, float]:
        return {k: float(v) for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, values: dict[str, Any] | None) -> RetryPolicy | None:
        return None if values is None else cls(**values)


def jitter_fraction(task_id: UUID, retry: int) -> float:
    """A number in [0, 1) fixed by the task and the retry: the same on every server."""
    digest = hashlib.sha256(f"{task_id}:{retry}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def parse_not_before(text: str | None) -> datetime | None:
    """An ISO 8601 time with its offset (`2026-01-02T03:04:05Z`, `...+02:00`), in UTC; None
    stays None. InvalidNotBefore when it does not parse or names no offset."""
    return parse_instant(text, "notBefore", InvalidNotBefore)


def parse_instant(text: str | None, name: str, error: type[JobnikError]) -> datetime | None:
    """`text`, the field `name`, as an instant in UTC (None stays None); `error` when it does
    not parse or names no offset."""
    if text is None:
        return None
    try:
        value = datetime.fromisoformat(text.strip())
    except ValueError:
        raise error(f"{name} {text!r} is not an ISO 8601 time") from None
    if value.tzinfo is None or value.utcoffset() is None:
        raise error(f"{name} {text!r} names no time zone offset (add Z or +hh:mm)")
    try:
        return value.astimezone(UTC)
    except OverflowError:  # (e.g. 0001-01-01T00:00:00+14:00: before the calendar's start)
        raise error(f"{name} {text!r} is outside the calendar in UTC") from None


def check_deadline(deadline: datetime | None, now: datetime) -> None:
    """InvalidDeadline when `deadline` is not later than `now`."""
    if deadline is not None and deadline <= now:
        raise InvalidDeadline(f"deadline {deadline.isoformat()} is not later than now")


def check_schedule_to_start(seconds: int | None) -> None:
    """InvalidScheduleToStart unless `seconds` is None or a whole number from 1 to
    MAX_DELAY_SECONDS: how long a queued task may wait to be dequeued before it expires."""
    if seconds is None:
        return
    if isinstance(seconds, bool) or not isinstance(seconds, int):
        raise InvalidScheduleToStart(f"scheduleToStartSeconds {seconds!r} is not a whole number")
    if not 1 <= seconds <= MAX_DELAY_SECONDS:
        raise InvalidScheduleToStart(
            f"scheduleToStartSeconds must be from 1 to {MAX_DELAY_SECONDS:,.0f}, not {seconds}"
        )


def latest(*times: datetime | None) -> datetime | None:
    """The latest of the times given (None: none given)."""
    present = [t for t in times if t is not None]
    return max(present) if present else None
