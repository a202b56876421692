"""Queue order: the turn a queued task takes among its stage type's tasks of one priority.

The claim takes a type's tasks by job priority, then by turn, then in the order they were
queued (the log position). How turns are given is the type's queue order (its limits'
`queue_order`, set by an operator):

- **fifo** (the default): every task queued takes the turn of the last task waiting, so turns
  never reorder anything and the queue is first in, first out;
- **fair**: a stage's tasks take consecutive turns, its first at the turn of the task at the
  head of the queue, so jobs of one priority take turns: one task of each, then the next of
  each. A job of 10 tasks queued behind one of 10,000 waits about 10 rounds, not 10,000 tasks.
  Jobs that share a fairness key (a tenant, say) take their turns as one: a tenant with ten jobs
  gets the share of a tenant with one. A job's fairness weight w (1 by default) lets its stage,
  or its key, queue w tasks at each turn: a tenant of weight 3 gets three tasks for each one of
  a tenant of weight 1.

A task queued again (retried, handed back, re-dispatched, rerun) takes its stage's next turn,
as a new task does. A stage whose tasks waited while it was closed (not released yet) has them
moved when it is released, so its first task is at the head: a stage's turns count from when
it can run. The turns are worked out here, from what the session reads of the queue
(`QueueTurns`), and written on the events that queue tasks, so a rebuild gives the same order.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final, NamedTuple, Protocol
from uuid import UUID

from jobnik.domain.errors import InvalidFairnessKey, InvalidFairnessWeight

FAIRNESS_KEY_MAX: Final = 100  # characters of a job's fairness key
FAIRNESS_WEIGHT_MAX: Final = 100  # a job's highest fairness weight: tasks per turn
FIFO: Final = "fifo"
FAIR: Final = "fair"
QUEUE_ORDERS: Final = (FIFO, FAIR)


def check_fairness_key(key: str | None) -> None:
    """InvalidFairnessKey unless `key` is None or 1 to FAIRNESS_KEY_MAX characters."""
    if key is not None and not (isinstance(key, str) and 1 <= len(key) <= FAIRNESS_KEY_MAX):
        raise InvalidFairnessKey(f"fairnessKey is 1 to {FAIRNESS_KEY_MAX} characters")


def check_fairness_weight(weight: int | None) -> None:
    """InvalidFairnessWeight unless `weight` is None or a whole number 1 to FAIRNESS_WEIGHT_MAX."""
    if weight is not None and not (
        isinstance(weight, int)
        and not isinstance(weight, bool)
        and 1 <= weight <= FAIRNESS_WEIGHT_MAX
    ):
        raise InvalidFairnessWeight(
            f"fairnessWeight is a whole number from 1 to {FAIRNESS_WEIGHT_MAX}"
        )


class QueueTurns(NamedTuple):
    """What a stage's new turns depend on, read from the queue: its type's queue order, the
    turns of the first and last tasks ready to dequeue at its job's priority (0: none), and
    its own queued tasks' lowest turn and the highest of its own, or of its job's fairness
    key's at its type (None: none queued); its job's fairness weight (tasks per turn) and how
    many of those tasks hold the last turn already (at most the weight)."""

    fair: bool = False
    head: int = 0
    tail: int = 0
    first: int | None = None
    last: int | None = None
    weight: int = 1
    at_last: int = 0


def first_turn(q: QueueTurns) -> int:
    """The turn of the next task the stage queues: under fair order, its last turn while that
    has room for the weight's tasks, else the next one (never before the head)."""
    if not q.fair:
        return q.tail
    if q.last is None:
        return q.head
    if q.last >= q.head and q.at_last < q.weight:
        return q.last
    return max(q.head, q.last + 1)


def release_shift(q: QueueTurns) -> int:
    """How far a stage's queued tasks move as it is released: its first one to the head (0
    under first in, first out, or with none queued)."""
    if not q.fair or q.first is None:
        return 0
    return q.head - q.first


class QueueReads(Protocol):
    """The session's read of the queue that turns depend on (domain/ports.py: Session)."""

    def queue_turns(self, stage_id: UUID) -> QueueTurns: ...


def shift_on_release(s: QueueReads, stage_id: UUID) -> Callable[[], int]:
    """How far the stage's queued tasks move if it is released now (read only when asked)."""
    return lambda: release_shift(s.queue_turns(stage_id))


class Turns:
    """The turns one command gives: each stage's queue read once, its next turns counted on
    from there (when fair, `weight` tasks a turn; all the same under first in, first out)."""

    def __init__(self, s: QueueReads) -> None:
        self.s = s
        # each stage's next turn, the tasks holding it already, and tasks per turn (0: fifo)
        self._next: dict[UUID, tuple[int, int, int]] = {}

    def take(self, stage_id: UUID) -> int:
        """The turn of the next task `stage_id` queues in this command."""
        if stage_id in self._next:
            turn, used, weight = self._next[stage_id]
        else:
            q = self.s.queue_turns(stage_id)
            turn = first_turn(q)
            used = q.at_last if q.fair and turn == q.last else 0
            weight = q.weight if q.fair else 0
        used += 1
        self._next[stage_id] = (
            (turn + 1, 0, weight)
            if weight and used >= weight
            else (
                turn,
                used,
                weight,
            )
        )
        return turn
