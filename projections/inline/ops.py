"""Row operations: what an event does to the inline read models, as data the store runs as SQL."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID


# The ops are slotted, not frozen: a frozen dataclass sets each field through
# `object.__setattr__`, about three times slower, and a rebuild makes five ops per event.
# Nothing mutates an op once made; their dict fields made them unhashable anyway.
@dataclass(slots=True)
class Insert:
    table: str
    row: Mapping[str, Any]


@dataclass(slots=True)
class Update:
    """SET `values` on every row of `table` matching `key`."""

    table: str
    key: Mapping[str, Any]
    values: Mapping[str, Any]


@dataclass(slots=True)
class Add:
    """Add `deltas` to counters of the row matching `key` (SQL increments, no read-modify-write)."""

    table: str
    key: Mapping[str, Any]
    deltas: Mapping[str, int]


@dataclass(slots=True)
class Delete:
    table: str
    key: Mapping[str, Any]


@dataclass(slots=True)
class Enqueue:
    """Put a task in the queue at `time`; its priority, eligibility and schedule-to-start
    limit come from its job and stage rows (inline/queue.py)."""

    task_id: Any
    stage_id: Any
    seq: int
    time: datetime
    not_before: Any = None  # not dequeued before (a datetime; None: at once)
    turn: int = 0  # its turn in the queue's order (domain/turns.py)


@dataclass(slots=True)
class QueueChange:
    """At `time`, SET `values` (`stage_open`, `job_open` or `not_before`) on the queue rows
    matching `key`, and work their expiry out again (inline/queue.py: `expiry`)."""

    key: Mapping[str, Any]
    values: Mapping[str, Any]
    time: datetime


@dataclass(slots=True)
class IndexEvent:
    """File the event at `position` under its aggregate's job (found through entity_jobs_v1)."""

    originator_id: UUID
    position: int


@dataclass(slots=True)
class Gate:
    """Work out again which queued tasks pass their key's per-key limits (inline/gates.py), for
    the gates of what `key` names: a stage (`stage_id`; `ended_stage_id` when only a task's
    leaving IN_PROGRESS changed it), a job's stages (`job_id`), or every gate of a stage type
    (`stage_type`, whose limit changed). Run once per command, after its
    other operations: the answer depends on the rows alone."""

    key: Mapping[str, Any]


Op = Insert | Update | Add | Delete | Enqueue | QueueChange | IndexEvent | Gate


def own_row(table: str, event: Any, values: Mapping[str, Any]) -> Update:
    """SET `values` on the row of the event's own aggregate, with its version and update time."""
    return Update(
        table,
        {"id": event.originator_id},
        {"version": event.originator_version, "update_time": event.timestamp, **values},
    )
