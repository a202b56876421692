"""Stage type limit commands: an operator sets, changes and removes a stage type's concurrency
limit, per-key concurrency limit, rate limit and per-key rate limit, and sets its queue order,
each change one transaction and one event."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from jobnik.domain.commands import command
from jobnik.domain.errors import LimitNotFound, TooManyLimits
from jobnik.domain.limits import (
    MAX_LIMITED_TYPES,
    MAX_PER_KEY,
    StageTypeLimits,
    check_limit,
    check_order,
    check_rate,
    limit_id,
)
from jobnik.domain.ports import Session, Store
from jobnik.domain.principals import Actor, Principal


class LimitCommands:
    """The limits' commands, each one transaction."""

    def __init__(self, store: Store, clock: Callable[[], datetime]) -> None:
        self.store = store
        self.clock = clock

    def _limits(self, s: Session, stage_type: str, now: datetime, by: Principal) -> StageTypeLimits:
        """The stage type's limits, made when it has none yet; TooManyLimits when it has none
        in force and MAX_LIMITED_TYPES other types have."""
        try:
            limits = s.limit(limit_id(stage_type))
        except LimitNotFound:
            limits = StageTypeLimits.create(stage_type, now=now, actor=by)
        if not limits.in_force and s.limited_types_besides(stage_type) >= MAX_LIMITED_TYPES:
            raise TooManyLimits(
                f"{MAX_LIMITED_TYPES} stage types have a limit: remove one before limiting "
                f"'{stage_type}'"
            )
        return limits

    def _set(
        self, stage_type: str, by: Principal, change: Callable[[StageTypeLimits, datetime], object]
    ) -> StageTypeLimits:
        """`change` the stage type's limits (made when it has none yet), in one transaction."""
        now = self.clock()
        with self.store.session(write=True) as s:
            limits = self._limits(s, stage_type, now, by)
            change(limits, now)
            s.save(limits)
        return limits

    def _remove(
        self, stage_type: str, change: Callable[[StageTypeLimits, datetime], object]
    ) -> StageTypeLimits:
        """`change` the stage type's limits (LimitNotFound when it has none), in one
        transaction."""
        with self.store.session(write=True) as s:
            limits = s.limit(limit_id(stage_type))
            change(limits, self.clock())
            s.save(limits)
        return limits

    @command
    def set(
        self,
        stage_type: str,
        max_in_progress: int,
        *,
        by: Principal = Actor.API,
        reason: str | None = None,
    ) -> StageTypeLimits:
        """At most `max_in_progress` tasks of `stage_type` in progress from now on (tasks
        already in progress over it go on; no claim takes more until they are fewer). Setting
        the value it has changes nothing."""
        check_limit(stage_type, max_in_progress)
        return self._set(
            stage_type,
            by,
            lambda limits, now: limits.set_concurrency(max_in_progress, now, by, reason),
        )

    @command
    def remove(
        self, stage_type: str, *, by: Principal = Actor.API, reason: str | None = None
    ) -> StageTypeLimits:
        """The stage type's claims are no longer held to a number in progress; LimitNotFound
        when it has no concurrency limit."""
        return self._remove(
            stage_type, lambda limits, now: limits.remove_concurrency(now, by, reason)
        )

    @command
    def set_key_limit(
        self,
        stage_type: str,
        max_in_progress: int,
        *,
        by: Principal = Actor.API,
        reason: str | None = None,
    ) -> StageTypeLimits:
        """At most `max_in_progress` tasks of `stage_type` in progress at once per concurrency
        key (a job's `concurrencyKey`, else the job) from now on; as `set`, tasks in progress
        over it go on. Setting the value it has changes nothing."""
        check_limit(stage_type, max_in_progress, MAX_PER_KEY)
        return self._set(
            stage_type,
            by,
            lambda limits, now: limits.set_key_limit(max_in_progress, now, by, reason),
        )

    @command
    def remove_key_limit(
        self, stage_type: str, *, by: Principal = Actor.API, reason: str | None = None
    ) -> StageTypeLimits:
        """LimitNotFound when the stage type has no per-key limit."""
        return self._remove(
            stage_type, lambda limits, now: limits.remove_key_limit(now, by, reason)
        )

    @command
    def set_rate(
        self,
        stage_type: str,
        starts: int,
        interval_seconds: int,
        *,
        by: Principal = Actor.API,
        reason: str | None = None,
    ) -> StageTypeLimits:
        """At most `starts` task starts of `stage_type` per `interval_seconds` from now on: a
        bucket of `starts` tokens, refilled continuously at that rate, each claim taking one
        per task."""
        check_rate(stage_type, starts, interval_seconds)
        return self._set(
            stage_type,
            by,
            lambda limits, now: limits.set_rate(starts, interval_seconds, now, by, reason),
        )

    @command
    def remove_rate(
        self, stage_type: str, *, by: Principal = Actor.API, reason: str | None = None
    ) -> StageTypeLimits:
        """LimitNotFound when the stage type has no rate limit."""
        return self._remove(stage_type, lambda limits, now: limits.remove_rate(now, by, reason))

    @command
    def set_key_rate(
        self,
        stage_type: str,
        starts: int,
        interval_seconds: int,
        *,
        by: Principal = Actor.API,
        reason: str | None = None,
    ) -> StageTypeLimits:
        """At most `starts` task starts of `stage_type` per `interval_seconds` per concurrency
        key from now on: a bucket of `starts` tokens per key, refilled continuously at that rate,
        each claim taking one per task of the key."""
        check_rate(stage_type, starts, interval_seconds, MAX_PER_KEY)
        return self._set(
            stage_type,
            by,
            lambda limits, now: limits.set_key_rate(starts, interval_seconds, now, by, reason),
        )

    @command
    def remove_key_rate(
        self, stage_type: str, *, by: Principal = Actor.API, reason: str | None = None
    ) -> StageTypeLimits:
        """LimitNotFound when the stage type has no per-key rate limit."""
        return self._remove(stage_type, lambda limits, now: limits.remove_key_rate(now, by, reason))

    @command
    def set_order(
        self,
        stage_type: str,
        order: str,
        *,
        by: Principal = Actor.API,
        reason: str | None = None,
    ) -> StageTypeLimits:
        """Take `stage_type`'s queued tasks in `order` from now on: "fifo", first in, first out
        (the default), or "fair", turns between the jobs of one priority (domain/turns.py).
        Tasks queued before keep their turns. Setting the order it has changes nothing."""
        check_order(stage_type, order)
        return self._set(
            stage_type, by, lambda limits, now: limits.set_order(order, now, by, reason)
        )
