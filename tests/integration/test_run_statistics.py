"""Run statistics and lastStatus for scripted scenarios, on both backends."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import pytest

from jobnik.domain.application import Jobnik, NewJob, NewStage, NewTask
from jobnik.domain.errors import JobNotFound
from jobnik.domain.statuses import JobStatus, TaskStatus
from jobnik.projections.catchup.registry import CATCH_UP
from jobnik.projections.catchup.run_stats import Counts
from jobnik.projections.catchup.runner import catch_up
from jobnik.projections.queries.catchup_views import CatchUpViews
from jobnik.projections.rebuild.verify import verify
from jobnik.projections.store.base import SqlStore

START = datetime(2026, 7, 1, 12, 0, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> datetime:
        self.now += timedelta(seconds=seconds)
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def engine(store: SqlStore, clock: Clock) -> Jobnik:
    return Jobnik(store, clock=clock, lease_seconds=60)


def settle(store: SqlStore) -> CatchUpViews:
    """Catch every catch-up projection up with the log; the views to read them."""
    for projection in CATCH_UP:
        while catch_up(store, projection, 7):  # small batches: many batch boundaries
            pass
    return CatchUpViews(store)


def job_with_tasks(
    engine: Jobnik, tasks: int, *, name: str = "nightly", stage_type: str = "tiles", **task: Any
) -> tuple[UUID, UUID]:
    job = engine.create_job(NewJob(name=name, data={}))
    stage = engine.add_stage(job.id, NewStage(type=stage_type, data={}))
    engine.add_tasks(stage.id, [NewTask(data={"i": i}, **task) for i in range(tasks)])
    return job.id, stage.id


def work(engine: Jobnik, stage_type: str, outcome: TaskStatus, **report: Any) -> UUID:
    task = engine.dequeue(stage_type)
    engine.report_task(task.id, outcome, attempt=task.attempt, **report)
    return task.id


def counts(**values: int) -> Counts:
    return Counts(**values)


def test_a_retry_after_an_error_counts_a_new_task_and_a_retried_after_error(
    store: SqlStore, engine: Jobnik, clock: Clock
) -> None:
    job_id, _ = job_with_tasks(engine, 1, max_attempts=3)
    clock.advance(10)
    work(engine, "tiles", TaskStatus.FAILED)
    clock.advance(10)
    work(engine, "tiles", TaskStatus.COMPLETED)

    stats = settle(store).job_statistics(job_id)

    assert stats.counts == counts(created=2, successful=1, retried_after_error=1)
    assert stats.status == JobStatus.COMPLETED
    assert (stats.start_time, stats.end_time) == (START + timedelta(seconds=10), clock.now)
    assert stats.stages[0].counts == stats.counts
    assert (stats.stages[0].start_time, stats.stages[0].end_time) == (
        START + timedelta(seconds=10),
        clock.now,
    )


def test_a_lease_that_runs_out_is_counted_as_a_retry_after_timeout(
    store: SqlStore, engine: Jobnik, clock: Clock
) -> None:
    job_id, _ = job_with_tasks(engine, 1, max_attempts=2)
    engine.dequeue("tiles")
    clock.advance(61)
    assert engine.sweep() == 1
    work(engine, "tiles", TaskStatus.COMPLETED)

    stats = settle(store).job_statistics(job_id)

    assert stats.counts == counts(created=2, successful=1, retried_after_timeout=1)


def test_attempts_that_run_out_count_as_failed_after_retry_and_leave_the_rest_obsolete(
    store: SqlStore, engine: Jobnik
) -> None:
    job_id, _ = job_with_tasks(engine, 3, max_attempts=2)
    work(engine, "tiles", TaskStatus.FAILED)  # task 1: retried, queued behind 2 and 3
    engine.dequeue("tiles")  # task 2: still running when the job fails
    work(engine, "tiles", TaskStatus.FAILED)  # task 3: retried
    work(engine, "tiles", TaskStatus.FAILED)  # task 1 again: attempts run out, the job fails

    stats = settle(store).job_statistics(job_id)

    assert stats.status == JobStatus.FAILED
    # created: 3 + 2 retries; task 3 is left RETRIED in the queue of a failed job: obsolete
    assert stats.counts == counts(
        created=5, retried_after_error=2, failed_after_retry=1, obsolete=1
    )


def test_a_fatal_failure_fails_without_retry_and_leaves_queued_tasks_obsolete(
    store: SqlStore, engine: Jobnik
) -> None:
    job_id, _ = job_with_tasks(engine, 4, max_attempts=3)
    work(engine, "tiles", TaskStatus.COMPLETED)
    work(engine, "tiles", TaskStatus.FAILED, fatal=True)

    views = settle(store)
    stats = views.job_statistics(job_id)

    assert stats.status == JobStatus.FAILED
    assert stats.counts == counts(created=4, successful=1, failed_without_retry=1, obsolete=2)
    assert views.job_definition("nightly").last_status == "FAILED"


def test_an_abort_cancels_queued_tasks_and_a_late_report_counts_as_canceled(
    store: SqlStore, engine: Jobnik
) -> None:
    job_id, _ = job_with_tasks(engine, 3)
    running = engine.dequeue("tiles")
    engine.set_job_status(job_id, JobStatus.ABORTED)
    engine.report_task(running.id, TaskStatus.COMPLETED, attempt=running.attempt)

    views = settle(store)
    stats = views.job_statistics(job_id)
    definition = views.job_definition("nightly")

    assert stats.counts == counts(created=3, canceled=3)
    assert stats.status == JobStatus.ABORTED
    assert (definition.last_status, definition.last_job_status) == ("FAILED", "ABORTED")


def test_after_a_job_ends_created_equals_the_sum_of_the_outcomes(
    store: SqlStore, engine: Jobnik
) -> None:
    job_id, _ = job_with_tasks(engine, 6, max_attempts=2)
    work(engine, "tiles", TaskStatus.FAILED)  # task 1 retried
    work(engine, "tiles", TaskStatus.COMPLETED)  # task 2
    for _ in range(5):  # tasks 3-6 retried, then task 1 fails for good: the job fails
        work(engine, "tiles", TaskStatus.FAILED)

    c = settle(store).job_statistics(job_id).counts

    assert c == counts(
        created=11, successful=1, retried_after_error=5, failed_after_retry=1, obsolete=4
    )
    assert c.created == (
        c.successful
        + c.retried_after_error
        + c.retried_after_timeout
        + c.failed_after_retry
        + c.failed_without_retry
        + c.canceled
        + c.obsolete
    )


def test_statistics_are_kept_per_stage_and_outlive_the_deleted_job(
    store: SqlStore, engine: Jobnik
) -> None:
    job = engine.create_job(NewJob(name="two-stage", data={}))
    first = engine.add_stage(job.id, NewStage(type="cut", data={}))
    second = engine.add_stage(job.id, NewStage(type="glue", data={}))
    engine.add_tasks(first.id, [NewTask(data={}), NewTask(data={})])
    engine.add_tasks(second.id, [NewTask(data={})])
    for stage_type in ("cut", "cut", "glue"):
        work(engine, stage_type, TaskStatus.COMPLETED)
    engine.delete_job(job.id)

    stats = settle(store).job_statistics(job.id)

    assert stats.deleted
    assert [(s.order, s.type, s.counts.successful) for s in stats.stages] == [
        (1, "cut", 2),
        (2, "glue", 1),
    ]
    assert stats.counts == counts(created=3, successful=3)


def test_last_status_follows_the_latest_job_of_a_name_and_counts_every_job(
    store: SqlStore, engine: Jobnik, clock: Clock
) -> None:
    job_with_tasks(engine, 1, name="ingest")
    work(engine, "tiles", TaskStatus.COMPLETED)
    engine.create_job(NewJob(name="ingest", data={}))
    paused = engine.create_job(NewJob(name="ingest", data={}))
    clock.advance(30)
    engine.set_job_status(paused.id, JobStatus.PAUSED)  # the newest job, paused: PENDING

    d = settle(store).job_definition("ingest")

    assert (d.last_job_id, d.last_status, d.last_job_status) == (paused.id, "PENDING", "PAUSED")
    assert d.last_interaction == clock.now
    assert d.counts == {
        "PENDING": 2,
        "IN_PROGRESS": 0,
        "DELEGATING": 0,
        "WAITING": 0,
        "COMPLETED": 1,
        "FAILED": 0,
    }
    assert d.job_counts == {"COMPLETED": 1, "PAUSED": 1, "PENDING": 1}


def test_a_change_to_an_older_job_moves_last_interaction_but_not_last_status(
    store: SqlStore, engine: Jobnik, clock: Clock
) -> None:
    old = engine.create_job(NewJob(name="ingest", data={}))
    new = engine.create_job(NewJob(name="ingest", data={}))
    clock.advance(5)
    engine.set_job_status(old.id, JobStatus.ABORTED)

    d = settle(store).job_definition("ingest")

    assert (d.last_job_id, d.last_status) == (new.id, "PENDING")
    assert d.last_interaction == clock.now
    assert d.counts["FAILED"] == 1


@pytest.mark.parametrize(
    "read",
    [
        lambda v: v.job_definition("never"),
        lambda v: v.job_statistics(UUID(int=1)),
    ],
)
def test_unknown_names_and_jobs_are_not_found(
    store: SqlStore, read: Callable[[CatchUpViews], Any]
) -> None:
    with pytest.raises(JobNotFound):
        read(settle(store))


def test_the_scenarios_rows_equal_a_replay(store: SqlStore, engine: Jobnik, clock: Clock) -> None:
    job_with_tasks(engine, 3, max_attempts=2)
    work(engine, "tiles", TaskStatus.FAILED)
    engine.dequeue("tiles")
    clock.advance(61)
    engine.sweep()
    settle(store)

    assert verify(store, names=["last_status", "run_stats"]) == []
