"""A grouped worker command answers as its own command would, in what its caller sees besides the
answer: the log position its request is told (X-Jobnik-Position), whichever caller led the group,
and the trace of the events its report caused."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from uuid import uuid4

import pytest

from jobnik.api import positions
from jobnik.domain.application import Jobnik
from jobnik.domain.errors import TaskNotFound
from jobnik.domain.statuses import TaskStatus
from jobnik.projections.store.base import SqlStore
from tests.integration.test_batches import stage_of
from tests.integration.test_group_commit import Grouped, in_order, trace_of, traced

C = TaskStatus.COMPLETED


@pytest.fixture
def grouped(store: SqlStore) -> Jobnik:
    store.on_commit.append(positions.note_written)
    return Grouped(Jobnik(store))


@pytest.mark.parametrize(
    "leader",
    [
        pytest.param(lambda j: j.dequeue("p-none"), id="a dequeue that found none"),
        pytest.param(lambda j: j.report_task(uuid4(), C, attempt=1), id="a report of no task"),
    ],
)
def test_a_leader_that_wrote_nothing_is_told_no_position(
    store: SqlStore, grouped: Any, leader: Callable[[Jobnik], Any]
) -> None:
    stage_of(grouped, "p-lead", 1)
    stage_of(grouped, "p-work", 1)

    results, boxes, sizes = in_order(
        grouped,
        [
            lambda: grouped.dequeue("p-lead"),
            lambda: leader(grouped),  # leads the second group, and is refused unwritten
            lambda: grouped.dequeue("p-work"),
        ],
    )

    assert sizes == [1, 2]
    assert isinstance(results[1], TaskNotFound)
    assert results[2].status == TaskStatus.IN_PROGRESS
    assert positions.WRITTEN in boxes[2]
    assert positions.WRITTEN not in boxes[1]  # as when it runs alone: it wrote nothing


def test_a_leader_that_wrote_is_told_its_group_position(store: SqlStore, grouped: Any) -> None:
    stage_of(grouped, "p-lead", 1)
    stage_of(grouped, "p-work", 2)

    _, boxes, sizes = in_order(
        grouped,
        [
            lambda: grouped.dequeue("p-lead"),
            lambda: grouped.dequeue("p-work"),
            lambda: grouped.dequeue("p-work"),
        ],
    )

    assert sizes == [1, 2]
    assert boxes[1][positions.WRITTEN] == boxes[2][positions.WRITTEN] > boxes[0][positions.WRITTEN]


def test_the_stage_a_group_completes_carries_the_trace_of_its_last_report(
    store: SqlStore, grouped: Any
) -> None:
    stage_of(grouped, "p-lead", 1)
    stage = stage_of(grouped, "p-two", 2)
    first, second = grouped.dequeue("p-two"), grouped.dequeue("p-two")

    results, _, sizes = in_order(
        grouped,
        [
            lambda: grouped.dequeue("p-lead"),
            lambda: grouped.report_task(first.id, C, attempt=first.attempt, by=traced("a")),
            lambda: grouped.report_task(second.id, C, attempt=second.attempt, by=traced("b")),
        ],
    )

    assert sizes == [1, 2]
    assert [r.status for r in results[1:]] == [C, C]
    # One by one, in the group's order, the second report completes the stage: its trace.
    assert trace_of(store, stage.id, "StageCompleted") == f"{'b':0>32}"
