"""Commands run again after a ConcurrencyConflict, a bounded number of times, at the outermost
level only; one that keeps conflicting reaches the API as 409 CONCURRENCY_CONFLICT."""

from __future__ import annotations

import pytest

from jobnik.api.errors import status_for
from jobnik.domain.commands import CONFLICT_ATTEMPTS, conflicts_retried, run_retrying
from jobnik.domain.errors import ConcurrencyConflict


def test_a_conflict_runs_the_call_again_until_it_succeeds() -> None:
    calls: list[int] = []

    def call() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise ConcurrencyConflict
        return "done"

    before = conflicts_retried()
    assert run_retrying(call) == "done"
    assert len(calls) == 3
    assert conflicts_retried() == before + 2


def test_a_call_that_keeps_conflicting_gives_up_after_the_bound() -> None:
    calls: list[int] = []

    def call() -> None:
        calls.append(1)
        raise ConcurrencyConflict

    with pytest.raises(ConcurrencyConflict):
        run_retrying(call)
    assert len(calls) == CONFLICT_ATTEMPTS


def test_a_nested_call_lets_the_conflict_reach_the_outermost() -> None:
    inner: list[int] = []
    outer: list[int] = []

    def nested() -> None:
        inner.append(1)
        raise ConcurrencyConflict

    def call() -> None:
        outer.append(1)
        run_retrying(nested)

    with pytest.raises(ConcurrencyConflict):
        run_retrying(call)
    assert len(outer) == CONFLICT_ATTEMPTS
    assert len(inner) == CONFLICT_ATTEMPTS  # once per outer run: the inner never retried


def test_a_conflict_that_escapes_answers_409_with_its_code() -> None:
    assert status_for("update_task_status", ConcurrencyConflict()) == 409
    assert status_for("dequeue_task", ConcurrencyConflict()) == 409
    assert ConcurrencyConflict.code == "CONCURRENCY_CONFLICT"
