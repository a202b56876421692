"""The turns a command gives the tasks it queues (domain/turns.py), from what it reads of the
queue: first in, first out takes the tail's; fair takes the head's or the stage's next, a
weight's worth of tasks at each turn."""

from __future__ import annotations

from uuid import UUID, uuid4

import pytest

from jobnik.domain.errors import InvalidFairnessWeight
from jobnik.domain.turns import QueueTurns, Turns, check_fairness_weight, first_turn


class Reads:
    """A queue read that answers `q` and counts how often it was asked."""

    def __init__(self, q: QueueTurns) -> None:
        self.q, self.asked = q, 0

    def queue_turns(self, stage_id: UUID) -> QueueTurns:
        self.asked += 1
        return self.q


@pytest.mark.parametrize(
    ("q", "turn"),
    [
        (QueueTurns(fair=False, head=3, tail=9, last=4, at_last=1), 9),  # fifo: the tail's
        (QueueTurns(fair=True, head=3, tail=9), 3),  # nothing of its own queued: the head
        (QueueTurns(fair=True, head=3, tail=9, last=5, at_last=1), 6),  # after its own last
        (QueueTurns(fair=True, head=7, tail=9, last=5, at_last=1), 7),  # never before the head
        (QueueTurns(fair=True, head=3, last=5, weight=2, at_last=1), 5),  # its last has room
        (QueueTurns(fair=True, head=3, last=5, weight=2, at_last=2), 6),  # its last is full
        (QueueTurns(fair=True, head=7, last=5, weight=3, at_last=1), 7),  # behind the head
    ],
)
def test_the_first_turn(q: QueueTurns, turn: int) -> None:
    assert first_turn(q) == turn


@pytest.mark.parametrize(
    ("q", "turns"),
    [
        (QueueTurns(fair=False, tail=4), [4, 4, 4, 4]),
        (QueueTurns(fair=True, head=2), [2, 3, 4, 5]),
        (QueueTurns(fair=True, head=2, weight=3), [2, 2, 2, 3, 3, 3, 4]),
        (QueueTurns(fair=True, head=2, last=5, weight=3, at_last=2), [5, 6, 6, 6, 7]),
    ],
)
def test_one_command_reads_once_and_counts_on(q: QueueTurns, turns: list[int]) -> None:
    reads = Reads(q)
    given = Turns(reads)
    stage = uuid4()
    assert [given.take(stage) for _ in turns] == turns
    assert reads.asked == 1


@pytest.mark.parametrize("weight", [0, -1, 101, True, 2.0])
def test_a_weight_out_of_range_is_refused(weight: object) -> None:
    with pytest.raises(InvalidFairnessWeight):
        check_fairness_weight(weight)  # type: ignore[arg-type]


def test_a_weight_in_range_or_none_is_taken() -> None:
    for weight in (None, 1, 100):
        check_fairness_weight(weight)
