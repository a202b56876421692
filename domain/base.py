"""What every aggregate shares: each event's cause (actor, its role, reason, the trace of the
request that caused it); restoring from a snapshot."""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import field
from datetime import datetime
from typing import Any, TypeVar
from uuid import UUID

from eventsourcing.domain import Aggregate

from jobnik.domain.principals import Principal

A = TypeVar("A", bound="Entity")

# The W3C trace id (32 hex digits) of the request whose command makes events now, set by the API
# for each request; None elsewhere (the sweeper, the command line) and for untraced requests.
CAUSING_TRACE: ContextVar[str | None] = ContextVar("jobnik_causing_trace", default=None)


class Entity(Aggregate):
    """Base aggregate: every event records who caused it and why."""

    class Event(Aggregate.Event):
        actor: str
        reason: str | None
        # The token role of `actor` (None: a built-in actor, or an event from before roles).
        # A keyword field with a default: events stored without it load with None, and the
        # events' own fields keep their order.
        actor_role: str | None = field(default=None, kw_only=True)
        # The trace of the request that caused it (None: none, or an event from before traces).
        trace_id: str | None = field(default=None, kw_only=True)

    @classmethod
    def restore(
        cls: type[A],
        id: UUID,
        version: int,
        created_on: datetime,
        modified_on: datetime,
        state: dict[str, Any],
    ) -> A:
        """Rebuild an aggregate from a snapshot of its state (an inline read-model row).

        The row is written from the aggregate's own events in the same transaction, so it is the
        aggregate's latest snapshot; the event store's unique (id, version) key still guards
        every save.
        """
        aggregate = object.__new__(cls)
        aggregate.__dict__.update(
            _id=id,
            _version=version,
            _created_on=created_on,
            _modified_on=modified_on,
            _pending_events=[],
            **state,
        )
        return aggregate

    def state(self) -> dict[str, Any]:
        """The aggregate's own attributes (what `restore` takes back)."""
        return {k: v for k, v in self.__dict__.items() if not k.startswith("_")}

    def _emit(
        self,
        event_class: type[Aggregate.Event],
        now: datetime,
        actor: Principal,
        reason: str | None = None,
        **fields: Any,
    ) -> None:
        self.trigger_event(event_class, timestamp=now, reason=reason, **cause(actor), **fields)


def cause(actor: Principal) -> dict[str, Any]:
    """The event fields that name `actor`, and the trace the event is made in."""
    return {
        "actor": actor.name,
        "actor_role": str(actor.role) if actor.role else None,
        "trace_id": CAUSING_TRACE.get(),
    }
