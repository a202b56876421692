"""Retry policies and not-before times: the backoff sequence, its jitter's bounds, the named
refusals, and the due time a retry records."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from uuid import UUID, uuid4

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jobnik.domain.delays import RetryPolicy, jitter_fraction, latest, parse_not_before
from jobnik.domain.errors import InvalidNotBefore, InvalidRetryPolicy, TaskNotQueued
from jobnik.domain.principals import Actor
from jobnik.domain.tasks import Task

from ..builders import new_task

T0 = datetime(2026, 7, 1, 12, 0, tzinfo=UTC)
TASK = UUID("00000000-0000-4000-8000-000000000001")


def test_the_backoff_grows_by_the_coefficient_up_to_the_maximum() -> None:
    policy = RetryPolicy(initial_seconds=1, coefficient=2, max_seconds=10)
    assert [policy.delay(n, TASK) for n in range(1, 7)] == [1, 2, 4, 8, 10, 10]


def test_a_coefficient_of_one_waits_the_same_every_time() -> None:
    policy = RetryPolicy(initial_seconds=5, coefficient=1, max_seconds=5)
    assert {policy.delay(n, TASK) for n in range(1, 50)} == {5}


def test_a_huge_retry_number_waits_the_maximum() -> None:
    policy = RetryPolicy(initial_seconds=1, coefficient=1000, max_seconds=60)
    assert policy.delay(10**9, TASK) == 60


@given(
    initial=st.floats(0.001, 1000),
    coefficient=st.floats(1, 10),
    extra=st.floats(0, 10_000),
    jitter=st.floats(0, 1),
    retry=st.integers(1, 10_000),
    task_id=st.uuids(),
)
def test_a_jittered_wait_stays_within_its_bounds_and_is_the_same_every_time(
    initial: float, coefficient: float, extra: float, jitter: float, retry: int, task_id: UUID
) -> None:
    policy = RetryPolicy(initial, coefficient, initial + extra, jitter)
    base = policy.base_delay(retry)
    wait = policy.delay(retry, task_id)

    assert initial <= base <= policy.max_seconds
    assert base * (1 - jitter) - 1e-9 <= wait <= base
    assert wait == policy.delay(retry, task_id)  # deterministic: the event records it once
    assert 0 <= jitter_fraction(task_id, retry) < 1


@given(retry=st.integers(1, 60))
def test_without_jitter_each_wait_is_at_least_the_one_before(retry: int) -> None:
    policy = RetryPolicy(0.5, 1.7, 900)
    assert policy.delay(retry, TASK) <= policy.delay(retry + 1, TASK)


def test_jitter_spreads_the_waits_of_different_tasks() -> None:
    policy = RetryPolicy(100, 2, 1000, jitter=0.5)
    waits = {policy.delay(1, uuid4()) for _ in range(50)}
    assert len(waits) > 40
    assert all(50 <= w <= 100 for w in waits)


@pytest.mark.parametrize(
    "values",
    [
        {"initial_seconds": 0},
        {"initial_seconds": -1},
        {"initial_seconds": 1, "coefficient": 0.5},
        {"initial_seconds": 10, "max_seconds": 5},
        {"initial_seconds": 1, "jitter": 1.5},
        {"initial_seconds": 1, "jitter": -0.1},
        {"initial_seconds": float("nan")},
        {"initial_seconds": 1, "max_seconds": float("inf")},
        {"initial_seconds": 1e12, "max_seconds": 1e12},
    ],
)
def test_a_policy_out_of_bounds_is_refused_by_name(values: dict[str, float]) -> None:
    with pytest.raises(InvalidRetryPolicy) as caught:
        RetryPolicy(**values)
    assert caught.value.code == "INVALID_RETRY_POLICY"


def test_a_policy_survives_its_stored_form() -> None:
    policy = RetryPolicy(1.5, 3, 60, 0.25)
    assert RetryPolicy.from_dict(policy.to_dict()) == policy
    assert RetryPolicy.from_dict(None) is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2030-01-02T03:04:05Z", datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)),
        ("2030-01-02T05:04:05+02:00", datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)),
        ("2030-01-02T03:04:05.250000+00:00", datetime(2030, 1, 2, 3, 4, 5, 250000, tzinfo=UTC)),
    ],
)
def test_a_not_before_time_is_read_in_utc(text: str, expected: datetime) -> None:
    parsed = parse_not_before(text)
    assert parsed == expected
    assert parsed is not None
    assert parsed.tzinfo is UTC


@pytest.mark.parametrize(
    "text",
    [
        "tomorrow",
        "2030-13-01T00:00:00Z",
        "",
        "2030-01-02T03:04:05",
        "0001-01-01T00:00:00+14:00",
        "9999-12-31T23:59:59-14:00",
    ],
)
def test_a_not_before_time_that_does_not_parse_or_has_no_zone_is_refused(text: str) -> None:
    with pytest.raises(InvalidNotBefore) as caught:
        parse_not_before(text)
    assert caught.value.code == "INVALID_NOT_BEFORE"


def test_the_latest_time_wins() -> None:
    assert latest(None, T0, T0 + timedelta(seconds=1), None) == T0 + timedelta(seconds=1)
    assert latest(None, None) is None


def _task(policy: RetryPolicy | None, max_attempts: int = 5) -> Task:
    task = new_task(max_attempts, now=T0, retry_policy=policy)
    task.collect_events()
    return task


def test_a_retry_records_its_due_time_and_the_task_shows_it() -> None:
    policy = RetryPolicy(10, 3, 60, jitter=0)
    task = _task(policy)
    dues = []
    for _n in range(1, 4):
        task.dequeue(T0, Actor.WORKER)
        assert task.not_before is None
        task.fail(T0, Actor.WORKER)
        [_, retried] = task.collect_events()
        assert isinstance(retried, Task.TaskRetried)
        assert retried.not_before == task.not_before
        dues.append(task.not_before)
    assert dues == [T0 + timedelta(seconds=s) for s in (10, 30, 60)]


def test_without_a_policy_a_retry_is_due_at_once() -> None:
    task = _task(None)
    task.dequeue(T0, Actor.WORKER)
    task.fail(T0, Actor.WORKER)
    [_, retried] = task.collect_events()
    assert isinstance(retried, Task.TaskRetried)
    assert retried.not_before is None
    assert task.not_before is None


def test_a_last_failure_fails_for_good_without_a_due_time() -> None:
    task = _task(RetryPolicy(10), max_attempts=1)
    task.dequeue(T0, Actor.WORKER)
    task.fail(T0, Actor.WORKER)
    assert task.status == "FAILED"
    assert task.not_before is None


def test_only_a_queued_task_is_rescheduled_and_the_same_time_records_nothing() -> None:
    task = _task(None)
    assert task.reschedule(T0, T0, Actor.API, "later") is True
    [event] = task.collect_events()
    assert isinstance(event, Task.TaskRescheduled)
    assert (event.not_before, event.previous, event.reason) == (T0, None, "later")
    assert task.reschedule(T0, T0, Actor.API, "again") is False
    assert task.collect_events() == []

    task.dequeue(T0, Actor.WORKER)
    task.collect_events()
    with pytest.raises(TaskNotQueued):
        task.reschedule(None, T0, Actor.API, "now")
    assert task.collect_events() == []
