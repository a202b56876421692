"""The StageTypeLimits aggregate: a stage type's flow control, enforced at the claim across every
worker and server process.

- a concurrency limit: at most `max_in_progress` tasks of the type IN_PROGRESS at once;
- a rate limit: at most `rate_starts` task starts per `rate_interval_seconds`, a token bucket
  that holds `rate_starts` tokens and refills at that rate (projections/store: the buckets);
- a per-key concurrency limit: at most `max_in_progress_per_key` tasks of the type IN_PROGRESS at
  once for each concurrency key, a job's key being its `concurrencyKey` or, without one, the job
  itself (`gate_of`);
- a per-key rate limit: at most `key_rate_starts` task starts per `key_rate_interval_seconds` for
  each concurrency key, a token bucket per key;
- its queue order: first in, first out, or fair turns between jobs (domain/turns.py).

One aggregate per stage type, its id derived from the type (`limit_id`), so setting a type's
limits twice at once cannot make two. An operator sets, changes and removes each, every change
an event with its actor and reason; an aggregate whose limits were removed stays (with its
read-model row), and setting one again changes it back.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any, Final
from uuid import UUID, uuid5

from jobnik.domain.base import Entity, cause
from jobnik.domain.errors import InvalidConcurrencyKey, InvalidLimit, LimitNotFound
from jobnik.domain.principals import Principal
from jobnik.domain.turns import FIFO, QUEUE_ORDERS

_NAMESPACE: Final = UUID("5d0c7f5e-8a1b-4f56-9c1e-3b7f4a2d9e61")
MAX_IN_PROGRESS: Final = 1_000_000  # the highest concurrency limit, and rate, one may set
# The highest per-key limit, and per-key rate: a command that queues or ends a key's task reads up
# to that many of its queued tasks (the first it may admit), so the limit bounds that work.
MAX_PER_KEY: Final = 1_000
MAX_INTERVAL: Final = 366 * 24 * 3600  # a rate's longest interval, in seconds
STAGE_TYPE_MAX: Final = 50  # as a stage's type (api/schemas.py: StageType)
# How many stage types may have a limit in force at once: each is a row every claim of its type,
# every scrape of the metrics and every page of GET /v1/limits reads.
MAX_LIMITED_TYPES: Final = 1_000
CONCURRENCY_KEY_MAX: Final = 100  # characters of a job's concurrency key


def check_concurrency_key(key: str | None) -> None:
    """InvalidConcurrencyKey unless `key` is None or 1 to CONCURRENCY_KEY_MAX characters."""
    if key is not None and not (isinstance(key, str) and 1 <= len(key) <= CONCURRENCY_KEY_MAX):
        raise InvalidConcurrencyKey(f"concurrencyKey is 1 to {CONCURRENCY_KEY_MAX} characters")


def gate_of(job_id: UUID, concurrency_key: str | None) -> str:
    """The key a job's tasks count against under a per-key limit: its concurrency key, or the
    job itself (the prefixes keep a key from ever naming a job)."""
    return f"j:{job_id}" if concurrency_key is None else f"k:{concurrency_key}"


def limit_id(stage_type: str) -> UUID:
    """The id of `stage_type`'s limits (the same type always gives the same id)."""
    return uuid5(_NAMESPACE, f"stage-type:{stage_type}")


def _whole(value: Any, low: int, high: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def check_stage_type(stage_type: str) -> None:
    if not 1 <= len(stage_type) <= STAGE_TYPE_MAX:
        raise InvalidLimit(f"a stage type is 1 to {STAGE_TYPE_MAX} characters")


def check_limit(stage_type: str, max_in_progress: int, high: int = MAX_IN_PROGRESS) -> None:
    """InvalidLimit unless `max_in_progress` is 1 to `high` and the stage type is 1 to
    STAGE_TYPE_MAX characters."""
    check_stage_type(stage_type)
    if not _whole(max_in_progress, 1, high):
        raise InvalidLimit(
            f"maxInProgress must be a whole number from 1 to {high}, not {max_in_progress}"
        )


def check_order(stage_type: str, order: str) -> None:
    """InvalidLimit unless `order` is a queue order and the stage type is 1 to STAGE_TYPE_MAX
    characters."""
    check_stage_type(stage_type)
    if order not in QUEUE_ORDERS:
        raise InvalidLimit(f"order must be one of {', '.join(QUEUE_ORDERS)}, not {order!r}")


def check_rate(
    stage_type: str, starts: int, interval_seconds: int, high: int = MAX_IN_PROGRESS
) -> None:
    """InvalidLimit unless `starts` is 1 to `high` and `interval_seconds` 1 to MAX_INTERVAL (a
    zero interval is no rate)."""
    check_stage_type(stage_type)
    if not _whole(starts, 1, high):
        raise InvalidLimit(f"starts must be a whole number from 1 to {high}")
    if not _whole(interval_seconds, 1, MAX_INTERVAL):
        raise InvalidLimit(f"intervalSeconds must be a whole number from 1 to {MAX_INTERVAL}")


class StageTypeLimits(Entity):
    """A stage type's concurrency and rate limits (None: not set, or removed) and its queue
    order."""

    if TYPE_CHECKING:  # set by the events' apply()
        stage_type: str
        max_in_progress: int | None
        rate_starts: int | None
        rate_interval_seconds: int | None
        queue_order: str
        max_in_progress_per_key: int | None
        key_rate_starts: int | None
        key_rate_interval_seconds: int | None

    @property
    def in_force(self) -> bool:
        """Whether anything here holds the type's claims to other than the default."""
        return (
            self.max_in_progress is not None
            or self.rate_starts is not None
            or self.queue_order != FIFO
            or self.max_in_progress_per_key is not None
            or self.key_rate_starts is not None
        )

    class LimitsCreated(Entity.Created):
        """The stage type's first limit; the event setting it follows."""

        stage_type: str

        def apply(self, limits: StageTypeLimits) -> None:
            limits.stage_type, limits.max_in_progress = self.stage_type, None
            limits.rate_starts = limits.rate_interval_seconds = None
            limits.queue_order = FIFO
            limits.max_in_progress_per_key = None
            limits.key_rate_starts = limits.key_rate_interval_seconds = None

    class ConcurrencyLimitSet(Entity.Event):
        """At most `max_in_progress` tasks of the type in progress at once, from now on."""

        stage_type: str
        max_in_progress: int

        def apply(self, limits: StageTypeLimits) -> None:
            limits.max_in_progress = self.max_in_progress

    class ConcurrencyLimitRemoved(Entity.Event):
        stage_type: str

        def apply(self, limits: StageTypeLimits) -> None:
            limits.max_in_progress = None

    class RateLimitSet(Entity.Event):
        """At most `starts` task starts of the type per `interval_seconds`, from now on."""

        stage_type: str
        starts: int
        interval_seconds: int

        def apply(self, limits: StageTypeLimits) -> None:
            limits.rate_starts, limits.rate_interval_seconds = self.starts, self.interval_seconds

    class RateLimitRemoved(Entity.Event):
        stage_type: str

        def apply(self, limits: StageTypeLimits) -> None:
            limits.rate_starts = limits.rate_interval_seconds = None

    class QueueOrderSet(Entity.Event):
        """The type's queued tasks are taken in `order` (fifo or fair) from now on."""

        stage_type: str
        order: str

        def apply(self, limits: StageTypeLimits) -> None:
            limits.queue_order = self.order

    class KeyLimitSet(Entity.Event):
        """At most `max_in_progress` tasks of the type in progress at once per concurrency key
        (`gate_of`), from now on."""

        stage_type: str
        max_in_progress: int

        def apply(self, limits: StageTypeLimits) -> None:
            limits.max_in_progress_per_key = self.max_in_progress

    class KeyLimitRemoved(Entity.Event):
        stage_type: str

        def apply(self, limits: StageTypeLimits) -> None:
            limits.max_in_progress_per_key = None

    class KeyRateSet(Entity.Event):
        """At most `starts` task starts of the type per `interval_seconds` per concurrency key
        (`gate_of`), from now on."""

        stage_type: str
        starts: int
        interval_seconds: int

        def apply(self, limits: StageTypeLimits) -> None:
            limits.key_rate_starts = self.starts
            limits.key_rate_interval_seconds = self.interval_seconds

    class KeyRateRemoved(Entity.Event):
        stage_type: str

        def apply(self, limits: StageTypeLimits) -> None:
            limits.key_rate_starts = limits.key_rate_interval_seconds = None

    @classmethod
    def create(cls, stage_type: str, *, now: datetime, actor: Principal) -> StageTypeLimits:
        check_stage_type(stage_type)
        return cls._create(
            cls.LimitsCreated,
            id=limit_id(stage_type),
            timestamp=now,
            reason=None,
            **cause(actor),
            stage_type=stage_type,
        )

    def set_concurrency(
        self, max_in_progress: int, now: datetime, actor: Principal, reason: str | None
    ) -> bool:
        """False (no event) when the limit already has this value."""
        check_limit(self.stage_type, max_in_progress)
        return self._set_most(
            self.ConcurrencyLimitSet, self.max_in_progress, max_in_progress, now, actor, reason
        )

    def _set_most(
        self,
        event: type[Entity.Event],
        now_set: int | None,
        max_in_progress: int,
        now: datetime,
        actor: Principal,
        reason: str | None,
    ) -> bool:
        """Emit `event` setting `max_in_progress` (checked), unless it is `now_set` already."""
        if now_set == max_in_progress:
            return False
        self._emit(
            event, now, actor, reason, stage_type=self.stage_type, max_in_progress=max_in_progress
        )
        return True

    def _remove(
        self,
        event: type[Entity.Event],
        now_set: int | None,
        what: str,
        now: datetime,
        actor: Principal,
        reason: str | None,
    ) -> None:
        """Emit `event` removing a limit; LimitNotFound when it is not set (`now_set` None)."""
        if now_set is None:
            raise LimitNotFound(f"stage type '{self.stage_type}' has no {what}")
        self._emit(event, now, actor, reason, stage_type=self.stage_type)

    def remove_concurrency(self, now: datetime, actor: Principal, reason: str | None) -> None:
        """LimitNotFound when there is no concurrency limit to remove."""
        self._remove(
            self.ConcurrencyLimitRemoved,
            self.max_in_progress,
            "concurrency limit",
            now,
            actor,
            reason,
        )

    def set_rate(
        self,
        starts: int,
        interval_seconds: int,
        now: datetime,
        actor: Principal,
        reason: str | None,
    ) -> bool:
        """False (no event) when the rate already has these values."""
        check_rate(self.stage_type, starts, interval_seconds)
        now_set = (self.rate_starts, self.rate_interval_seconds)
        return self._set_rate(
            self.RateLimitSet, now_set, starts, interval_seconds, now, actor, reason
        )

    def _set_rate(
        self,
        event: type[Entity.Event],
        now_set: tuple[int | None, int | None],
        starts: int,
        interval_seconds: int,
        now: datetime,
        actor: Principal,
        reason: str | None,
    ) -> bool:
        """Emit `event` setting a rate (checked), unless it is `now_set` already."""
        if now_set == (starts, interval_seconds):
            return False
        self._emit(
            event,
            now,
            actor,
            reason,
            stage_type=self.stage_type,
            starts=starts,
            interval_seconds=interval_seconds,
        )
        return True

    def remove_rate(self, now: datetime, actor: Principal, reason: str | None) -> None:
        """LimitNotFound when there is no rate limit to remove."""
        self._remove(self.RateLimitRemoved, self.rate_starts, "rate limit", now, actor, reason)

    def set_order(self, order: str, now: datetime, actor: Principal, reason: str | None) -> bool:
        """False (no event) when the type's queue already has this order."""
        check_order(self.stage_type, order)
        if self.queue_order == order:
            return False
        self._emit(self.QueueOrderSet, now, actor, reason, stage_type=self.stage_type, order=order)
        return True

    def set_key_limit(
        self, max_in_progress: int, now: datetime, actor: Principal, reason: str | None
    ) -> bool:
        """False (no event) when the per-key limit already has this value."""
        check_limit(self.stage_type, max_in_progress, MAX_PER_KEY)
        return self._set_most(
            self.KeyLimitSet, self.max_in_progress_per_key, max_in_progress, now, actor, reason
        )

    def remove_key_limit(self, now: datetime, actor: Principal, reason: str | None) -> None:
        """LimitNotFound when there is no per-key limit to remove."""
        self._remove(
            self.KeyLimitRemoved, self.max_in_progress_per_key, "per-key limit", now, actor, reason
        )

    def set_key_rate(
        self,
        starts: int,
        interval_seconds: int,
        now: datetime,
        actor: Principal,
        reason: str | None,
    ) -> bool:
        """False (no event) when the per-key rate already has these values."""
        check_rate(self.stage_type, starts, interval_seconds, MAX_PER_KEY)
        now_set = (self.key_rate_starts, self.key_rate_interval_seconds)
        return self._set_rate(
            self.KeyRateSet, now_set, starts, interval_seconds, now, actor, reason
        )

    def remove_key_rate(self, now: datetime, actor: Principal, reason: str | None) -> None:
        """LimitNotFound when there is no per-key rate to remove."""
        self._remove(
            self.KeyRateRemoved, self.key_rate_starts, "per-key rate limit", now, actor, reason
        )
