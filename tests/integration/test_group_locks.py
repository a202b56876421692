"""Group commit under concurrency: on PostgreSQL across processes, groups that may fail the same
jobs' stages hold those jobs' queue rows in one order, so two of them wait for each other instead
of deadlocking; on each backend, the read models after grouped work are what a rebuild makes."""

from __future__ import annotations

import contextlib
import random
import threading
from typing import Any

import pytest

from jobnik.domain.application import Jobnik
from jobnik.domain.errors import JobnikError, TaskNotFound
from jobnik.domain.principals import Actor
from jobnik.domain.statuses import StageStatus, TaskStatus
from jobnik.projections.rebuild.bluegreen import rebuild
from jobnik.projections.store import pgsession
from jobnik.projections.store.base import SqlStore
from jobnik.projections.store.pgsession import PostgresSession
from tests.integration.test_batches import stage_of, stage_status
from tests.integration.test_group_commit import Grouped, in_order, traced
from tests.integration.test_rebuild import snapshot

C, F = TaskStatus.COMPLETED, TaskStatus.FAILED


def test_groups_failing_the_same_jobs_in_either_order_do_not_deadlock(
    pg_store: SqlStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two API processes (a grouper each) each run a group of two final failures, of the same
    two jobs, arrived in opposite orders. Each group holds both jobs' queue rows before the
    writer lock; a pause after each hold lets the two groups overlap there."""
    setup = Jobnik(pg_store)
    stage_of(setup, "l-lead", 2)
    first = stage_of(setup, "l-a", 3, max_attempts=1)  # one stays queued
    second = stage_of(setup, "l-b", 3, max_attempts=1)
    a1, a2 = setup.dequeue("l-a"), setup.dequeue("l-a")
    b1, b2 = setup.dequeue("l-b"), setup.dequeue("l-b")
    hold = PostgresSession.hold_queue

    def slow_hold(self: PostgresSession, *job_ids: Any) -> None:
        hold(self, *job_ids)
        if not self.locked:
            self.cur.execute("SELECT pg_sleep(0.4)")

    monkeypatch.setattr(PostgresSession, "hold_queue", slow_hold)
    errors: list[str] = []
    error = pgsession.error

    def noted(e: Any) -> Exception:
        exc = error(e)
        errors.append(str(exc))
        return exc

    monkeypatch.setattr(pgsession, "error", noted)
    one, two = Grouped(Jobnik(pg_store)), Grouped(Jobnik(pg_store))

    def fail(jobnik: Jobnik, task: Any) -> Any:
        return lambda: jobnik.report_task(task.id, F, attempt=task.attempt, reason="x")

    results: list[Any] = [None, None]

    def process(i: int, jobnik: Jobnik, tasks: list[Any]) -> None:
        calls = [lambda: jobnik.dequeue("l-lead"), *(fail(jobnik, t) for t in tasks)]
        results[i] = in_order(jobnik, calls)

    threads = [
        threading.Thread(target=process, args=(0, one, [a1, b1])),
        threading.Thread(target=process, args=(1, two, [b2, a2])),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)

    for answers, _, sizes in results:
        assert sizes == [1, 2]
        assert [r.status for r in answers[1:]] == [F, F]
    assert not [e for e in errors if "deadlock" in e]  # none for PostgreSQL to break
    assert stage_status(pg_store, first.id) == stage_status(pg_store, second.id)
    assert stage_status(pg_store, first.id) == StageStatus.FAILED


def test_read_models_rebuilt_after_a_concurrent_grouped_drain_equal_the_live_ones(
    store: SqlStore,
) -> None:
    grouped = Grouped(Jobnik(store))
    rng = random.Random(11)
    for n in range(4):
        stage_of(grouped, f"rg-{n % 2}", rng.randint(8, 20), max_attempts=2)
    sizes: list[int] = []
    grouped.on_group.append(sizes.append)

    def worker(seed: int) -> None:
        mine = random.Random(seed)
        misses = 0
        while misses < 3:
            try:
                task = grouped.dequeue(f"rg-{mine.randint(0, 1)}", by=traced(str(seed)))
            except TaskNotFound:
                misses += 1
                continue
            roll = mine.random()
            attempt = None if roll < 0.2 else task.attempt + (1 if roll > 0.9 else 0)
            by = Actor.API if attempt is None else traced(str(seed))
            # (a stale attempt, a changed task: refused, as one by one)
            with contextlib.suppress(JobnikError):
                grouped.report_task(
                    task.id,
                    mine.choice([C, C, F]),
                    attempt=attempt,
                    result={"r": mine.random()},
                    by=by,
                )

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    live = snapshot(store)

    rebuild(store)

    assert snapshot(store) == live
    assert max(sizes) > 1  # some commands did share a transaction
