"""A grouped worker command answers as its own command would, in what its caller sees besides the
answer: the log position its request is told (X-Jobnik-Position), whichever caller led the group,
and the trace of the events its report caused."""

from __future__ import annotations

import threading
import time
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
from tests.integration.test_group_commit import traced

C = TaskStatus.COMPLETED


@pytest.fixture
def grouped(store: SqlStore) -> Jobnik:
    store.on_commit.append(positions.note_written)
    return Jobnik(store, group_commit=True)


def in_order(
    jobnik: Jobnik, calls: list[Callable[[], Any]]
) -> tuple[list[Any], list[dict[str, int]], list[int]]:
    """Run `calls[0]` and hold its group until `calls[1:]` wait for it, arriving in their
    order (so `calls[1]` leads the next group). Each call runs as a request would: with its own
    positions box. Each call's result (or exception), its box, and the group sizes."""
    sizes: list[int] = []
    release = threading.Event()

    def observe(n: int) -> None:
        sizes.append(n)
        if len(sizes) == 1:
            assert release.wait(10)

    results: list[Any] = [None] * len(calls)
    boxes: list[dict[str, int]] = [{} for _ in calls]

    def run(i: int) -> None:
        positions.REQUEST_POSITIONS.set(boxes[i])
        try:
            results[i] = calls[i]()
        except Exception as exc:  # noqa: BLE001 - each call's answer, compared below
            results[i] = exc

    jobnik.on_group.append(observe)
    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    threads[0].start()
    _until(lambda: bool(sizes))
    for n, t in enumerate(threads[1:], start=1):
        t.start()
        _until(lambda n=n: jobnik.grouper.waiting == n)  # type: ignore[misc]
    release.set()
    for t in threads:
        t.join(30)
    jobnik.on_group.remove(observe)
    return results, boxes, sizes


def _until(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 10
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.001)


def test_a_leader_whose_dequeue_found_none_is_told_no_position(
    store: SqlStore, grouped: Jobnik
) -> None:
    stage_of(grouped, "p-lead", 1)
    stage_of(grouped, "p-work", 1)

    results, boxes, sizes = in_order(
        grouped,
        [
            lambda: grouped.dequeue("p-lead"),
            lambda: grouped.dequeue("p-none"),  # leads the second group, finds nothing
            lambda: grouped.dequeue("p-work"),
        ],
    )

    assert sizes == [1, 2]
    assert isinstance(results[1], TaskNotFound)
    assert results[2].status == TaskStatus.IN_PROGRESS
    assert positions.WRITTEN in boxes[2]
    assert positions.WRITTEN not in boxes[1]  # as when it runs alone: it wrote nothing


def test_a_leader_whose_report_was_refused_unwritten_is_told_no_position(
    store: SqlStore, grouped: Jobnik
) -> None:
    stage_of(grouped, "p-lead", 1)
    stage_of(grouped, "p-work", 1)

    results, boxes, sizes = in_order(
        grouped,
        [
            lambda: grouped.dequeue("p-lead"),
            lambda: grouped.report_task(uuid4(), C, attempt=1),  # no such task
            lambda: grouped.dequeue("p-work"),
        ],
    )

    assert sizes == [1, 2]
    assert isinstance(results[1], TaskNotFound)
    assert positions.WRITTEN in boxes[2]
    assert positions.WRITTEN not in boxes[1]


def test_a_leader_that_wrote_is_told_its_group_position(
    store: SqlStore, grouped: Jobnik
) -> None:
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


def stage_trace(store: SqlStore, stage_id: Any, kind: str) -> str | None:
    for stored in store.recorder.select_events(stage_id):
        event = store.mapper.to_domain_event(stored)
        if type(event).__name__ == kind:
            return getattr(event, "trace_id", None)
    raise AssertionError(f"no {kind} for {stage_id}")


def test_the_stage_a_group_completes_carries_the_trace_of_its_last_report(
    store: SqlStore, grouped: Jobnik
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
    assert stage_trace(store, stage.id, "StageCompleted") == f"{'b':0>32}"
