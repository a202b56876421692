"""The ConcurrencyLimit aggregate: at most `max_in_progress` tasks of a stage type IN_PROGRESS at
once, across every worker and server process.

One aggregate per stage type, its id derived from the type (`limit_id`), so setting a type's
limit twice at once cannot make two. An operator sets, changes and removes it, each an event
with its actor and reason; a removed limit keeps its aggregate (and read-model row), and setting
it again changes it back. The claim enforces it (projections/store: the claim's room).
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Final
from uuid import UUID, uuid5

from jobnik.domain.base import Entity, cause
from jobnik.domain.errors import InvalidLimit, LimitNotFound
from jobnik.domain.principals import Principal

_NAMESPACE: Final = UUID("5d0c7f5e-8a1b-4f56-9c1e-3b7f4a2d9e61")
MAX_IN_PROGRESS: Final = 1_000_000  # the highest limit one may set
STAGE_TYPE_MAX: Final = 50  # as a stage's type (api/schemas.py: StageType)


def limit_id(stage_type: str) -> UUID:
    """The id of `stage_type`'s concurrency limit (the same type always gives the same id)."""
    return uuid5(_NAMESPACE, f"stage-type:{stage_type}")


def check_limit(stage_type: str, max_in_progress: int) -> None:
    """InvalidLimit unless `max_in_progress` is 1 to MAX_IN_PROGRESS and the stage type is 1 to
    STAGE_TYPE_MAX characters."""
    if not 1 <= len(stage_type) <= STAGE_TYPE_MAX:
        raise InvalidLimit(f"a stage type is 1 to {STAGE_TYPE_MAX} characters")
    if isinstance(max_in_progress, bool) or not 1 <= max_in_progress <= MAX_IN_PROGRESS:
        raise InvalidLimit(
            f"maxInProgress must be a whole number from 1 to {MAX_IN_PROGRESS}, "
            f"not {max_in_progress}"
        )


class ConcurrencyLimit(Entity):
    """A stage type's concurrency limit; `max_in_progress` None: removed."""

    if TYPE_CHECKING:  # set by the events' apply()
        stage_type: str
        max_in_progress: int | None

    class LimitSet(Entity.Created):
        """The stage type's first limit."""

        stage_type: str
        max_in_progress: int

        def apply(self, limit: ConcurrencyLimit) -> None:
            limit.stage_type, limit.max_in_progress = self.stage_type, self.max_in_progress

    class LimitChanged(Entity.Event):
        """A new value (also for a limit set again after its removal)."""

        stage_type: str
        max_in_progress: int

        def apply(self, limit: ConcurrencyLimit) -> None:
            limit.max_in_progress = self.max_in_progress

    class LimitRemoved(Entity.Event):
        """No limit from now on: the stage type's claims take what is queued."""

        stage_type: str

        def apply(self, limit: ConcurrencyLimit) -> None:
            limit.max_in_progress = None

    @classmethod
    def create(
        cls,
        stage_type: str,
        max_in_progress: int,
        *,
        now: datetime,
        actor: Principal,
        reason: str | None,
    ) -> ConcurrencyLimit:
        check_limit(stage_type, max_in_progress)
        return cls._create(
            cls.LimitSet,
            id=limit_id(stage_type),
            timestamp=now,
            reason=reason,
            **cause(actor),
            stage_type=stage_type,
            max_in_progress=max_in_progress,
        )

    @property
    def active(self) -> bool:
        return self.max_in_progress is not None

    def change(
        self, max_in_progress: int, now: datetime, actor: Principal, reason: str | None
    ) -> bool:
        """False (no event) when the limit already has this value."""
        check_limit(self.stage_type, max_in_progress)
        if self.max_in_progress == max_in_progress:
            return False
        self._emit(
            self.LimitChanged,
            now,
            actor,
            reason,
            stage_type=self.stage_type,
            max_in_progress=max_in_progress,
        )
        return True

    def remove(self, now: datetime, actor: Principal, reason: str | None) -> None:
        """LimitNotFound when there is no limit to remove."""
        if not self.active:
            raise LimitNotFound
        self._emit(self.LimitRemoved, now, actor, reason, stage_type=self.stage_type)
