"""Concurrency limit commands: an operator sets, changes and removes a stage type's limit."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from jobnik.domain.commands import command
from jobnik.domain.errors import LimitNotFound
from jobnik.domain.limits import ConcurrencyLimit, check_limit, limit_id
from jobnik.domain.ports import Store
from jobnik.domain.principals import Actor, Principal


class LimitCommands:
    """The limits' commands, each one transaction."""

    def __init__(self, store: Store, clock: Callable[[], datetime]) -> None:
        self.store = store
        self.clock = clock

    @command
    def set(
        self,
        stage_type: str,
        max_in_progress: int,
        *,
        by: Principal = Actor.API,
        reason: str | None = None,
    ) -> ConcurrencyLimit:
        """At most `max_in_progress` tasks of `stage_type` in progress from now on (tasks
        already in progress over it go on; no claim takes more until they are fewer). Setting
        the value it has changes nothing."""
        check_limit(stage_type, max_in_progress)
        now = self.clock()
        with self.store.session(write=True) as s:
            try:
                limit = s.limit(limit_id(stage_type))
            except LimitNotFound:
                limit = ConcurrencyLimit.create(
                    stage_type, max_in_progress, now=now, actor=by, reason=reason
                )
            else:
                limit.change(max_in_progress, now, by, reason)
            s.save(limit)
        return limit

    @command
    def remove(
        self, stage_type: str, *, by: Principal = Actor.API, reason: str | None = None
    ) -> ConcurrencyLimit:
        """The stage type's claims take what is queued again; LimitNotFound when it has no
        limit."""
        with self.store.session(write=True) as s:
            limit = s.limit(limit_id(stage_type))
            limit.remove(self.clock(), by, reason)
            s.save(limit)
        return limit
