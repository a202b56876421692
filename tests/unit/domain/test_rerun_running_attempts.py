"""Reruns of a FAILED job whose failed stage still holds a running attempt: the stage the job
runs from goes on with it, a stage that waits for its turn again ends it."""

from __future__ import annotations

import pytest

from jobnik.domain.application import Jobnik, NewJob, NewStage, NewTask
from jobnik.domain.errors import StaleAttempt
from jobnik.domain.statuses import JobStatus, StageStatus, TaskStatus
from jobnik.projections.inline.tables import JOBS, STAGES, TASKS

from ..builders import Clock, replay
from ..memory import MemoryStore
from .test_reruns import job_with, row, run, status


@pytest.fixture
def store() -> MemoryStore:
    return MemoryStore()


@pytest.fixture
def jobnik(store: MemoryStore) -> Jobnik:
    return Jobnik(store, Clock(), lease_seconds=60)  # a lease outlives one command, not two


@pytest.mark.parametrize("ending", ["lease expires", "completed"])
def test_a_rerun_completion_stage_that_had_started_runs_on_with_its_running_attempt(
    jobnik: Jobnik, store: MemoryStore, ending: str
) -> None:
    job = jobnik.create_job(NewJob(name="nightly", data={}))
    done = jobnik.add_stage(job.id, NewStage(type="done", data={}, completion=True))
    jobnik.add_tasks(done.id, [NewTask(data={}, max_attempts=1)] * 2)
    jobnik.finish_job(job.id)  # the completion phase releases the stage
    running = jobnik.dequeue("done")
    failed = run(jobnik, "done", TaskStatus.FAILED)
    assert status(store, JOBS, job.id) == JobStatus.FAILED

    jobnik.rerun_task(failed)

    assert status(store, STAGES, done.id) == StageStatus.IN_PROGRESS  # as it was: it had started
    assert status(store, JOBS, job.id) == JobStatus.IN_PROGRESS
    if ending == "lease expires":  # the running attempt's last one: it fails the stage again
        assert jobnik.sweep() == 1
        assert status(store, TASKS, running.id) == TaskStatus.FAILED
        assert status(store, STAGES, done.id) == StageStatus.FAILED
        assert status(store, JOBS, job.id) == JobStatus.FAILED
    else:
        jobnik.report_task(running.id, TaskStatus.COMPLETED, attempt=running.attempt)
        run(jobnik, "done")
        assert status(store, STAGES, done.id) == StageStatus.COMPLETED
        assert status(store, JOBS, job.id) == JobStatus.COMPLETED
    assert store.restored(STAGES, done.id) == replay(store.events_of(done.id))


def test_a_rerun_from_an_earlier_stage_ends_the_attempts_still_running_in_a_later_one(
    jobnik: Jobnik, store: MemoryStore
) -> None:
    job, [first, second] = job_with(jobnik, 1, 2)
    run(jobnik, "t0")
    running = jobnik.dequeue("t1")
    run(jobnik, "t1", TaskStatus.FAILED)
    assert status(store, JOBS, job) == JobStatus.FAILED

    rerun = jobnik.rerun_job(job, from_stage_id=first)

    assert rerun.tasks == 3  # the first stage's task, the failed one and the running one
    assert status(store, STAGES, second) == StageStatus.CREATED  # it waits for its turn
    assert row(store, TASKS, running.id).items() >= {"status": "PENDING", "attempt": 1}.items()
    with pytest.raises(StaleAttempt):  # its attempt ended with the rerun
        jobnik.report_task(running.id, TaskStatus.FAILED, attempt=running.attempt)
    assert jobnik.sweep() == 0
    run(jobnik, "t0")
    run(jobnik, "t1")
    run(jobnik, "t1")
    assert status(store, JOBS, job) == JobStatus.COMPLETED
    assert store.restored(TASKS, running.id) == replay(store.events_of(running.id))
