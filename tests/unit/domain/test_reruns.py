from __future__ import annotations

from uuid import UUID, uuid4

import pytest

from jobnik.domain.application import Jobnik, NewJob, NewStage, NewTask
from jobnik.domain.errors import (
    EarlierStageNotCompleted,
    JobNotRerunnable,
    LaterStageEnded,
    OtherTasksFailed,
    RerunSkipsStages,
    StageNotInJob,
    StageNotRerunnable,
    StaleAttempt,
    TaskNotRerunnable,
)
from jobnik.domain.statuses import JobMode, JobStatus, StageStatus, TaskStatus
from jobnik.domain.tasks import Task
from jobnik.projections.inline.tables import JOBS, QUEUE, STAGES, SUMMARIES, TASKS

from ..builders import Clock, replay
from ..memory import MemoryStore


@pytest.fixture
def store() -> MemoryStore:
    return MemoryStore()


@pytest.fixture
def jobnik(store: MemoryStore) -> Jobnik:
    return Jobnik(store, Clock())


def job_with(jobnik: Jobnik, *stages: int, max_attempts: int = 1) -> tuple[UUID, list[UUID]]:
    """A job with one stage of type t<i> per count given, each with that many tasks."""
    job = jobnik.create_job(NewJob(name="nightly", data={}))
    ids = []
    for i, count in enumerate(stages):
        stage = jobnik.add_stage(job.id, NewStage(type=f"t{i}", data={}))
        jobnik.add_tasks(
            stage.id, [NewTask(data={"n": n}, max_attempts=max_attempts) for n in range(count)]
        )
        ids.append(stage.id)
    return job.id, ids


def run(jobnik: Jobnik, stage_type: str, status: TaskStatus = TaskStatus.COMPLETED) -> UUID:
    task = jobnik.dequeue(stage_type)
    jobnik.report_task(task.id, status, attempt=task.attempt)
    return task.id


def row(store: MemoryStore, table: str, id: UUID) -> dict[str, object]:
    return store.tables.one(table, id=id)


def status(store: MemoryStore, table: str, id: UUID) -> object:
    return row(store, table, id)["status"]


def test_a_failed_task_reruns_with_a_fresh_budget_and_reopens_its_stage_and_job(
    jobnik: Jobnik, store: MemoryStore
) -> None:
    job, [stage] = job_with(jobnik, 3)
    done = run(jobnik, "t0")
    failed = run(jobnik, "t0", TaskStatus.FAILED)
    assert status(store, JOBS, job) == JobStatus.FAILED

    rerun = jobnik.rerun_task(failed, reason="fixed the input")

    assert (rerun.from_stage_id, rerun.stages, rerun.tasks) == (stage, (stage,), 1)
    assert row(store, TASKS, failed).items() >= {"status": "PENDING", "attempts": 0}.items()
    assert row(store, TASKS, failed)["end_time"] is None
    assert row(store, TASKS, failed)["attempt"] == 1  # dequeues keep counting: fencing holds
    assert status(store, STAGES, stage) == StageStatus.IN_PROGRESS
    assert row(store, JOBS, job)["status"] == JobStatus.IN_PROGRESS
    assert row(store, JOBS, job)["end_time"] is None
    summary = store.tables.one(SUMMARIES, stage_id=stage)
    assert (summary["completed"], summary["failed"], summary["pending"]) == (1, 0, 2)
    # the third task, queued when the stage failed, and the rerun one are dequeued again
    assert len(store.tables.dequeueable("t0")) == 2
    assert status(store, TASKS, done) == TaskStatus.COMPLETED
    run(jobnik, "t0")
    run(jobnik, "t0")
    assert status(store, JOBS, job) == JobStatus.COMPLETED


def test_the_rerun_events_carry_the_operator_and_the_reason(
    jobnik: Jobnik, store: MemoryStore
) -> None:
    job, [stage] = job_with(jobnik, 1)
    failed = run(jobnik, "t0", TaskStatus.FAILED)

    jobnik.rerun_task(failed, reason="fixed the input")

    events = [store.events_of(failed)[-1], store.events_of(stage)[-1], store.events_of(job)[-1]]
    assert [type(e).__name__ for e in events] == ["TaskRerun", "StageReopened", "JobReopened"]
    assert {(e.actor, e.reason) for e in events} == {("api", "fixed the input")}
    assert events[0].previous == "FAILED"
    assert events[2].previous == "FAILED"


def test_a_rerun_task_that_fails_again_fails_its_stage_and_job_again(
    jobnik: Jobnik, store: MemoryStore
) -> None:
    job, [stage] = job_with(jobnik, 1, max_attempts=2)
    task = run(jobnik, "t0", TaskStatus.FAILED)
    run(jobnik, "t0", TaskStatus.FAILED)
    jobnik.rerun_task(task)

    run(jobnik, "t0", TaskStatus.FAILED)  # a fresh budget: two attempts again
    assert status(store, TASKS, task) == TaskStatus.RETRIED
    run(jobnik, "t0", TaskStatus.FAILED)

    assert (status(store, TASKS, task), row(store, TASKS, task)["attempt"]) == ("FAILED", 4)
    assert status(store, STAGES, stage) == StageStatus.FAILED
    assert status(store, JOBS, job) == JobStatus.FAILED


@pytest.mark.parametrize("wanted", [TaskStatus.COMPLETED, TaskStatus.PENDING])
def test_only_failed_and_aborted_tasks_are_rerun(
    jobnik: Jobnik, store: MemoryStore, wanted: TaskStatus
) -> None:
    _, [_stage] = job_with(jobnik, 2)
    task = run(jobnik, "t0") if wanted == TaskStatus.COMPLETED else None
    task = task or store.tables.dequeueable("t0")[0]
    before = len(store.log)

    with pytest.raises(TaskNotRerunnable):
        jobnik.rerun_task(task)

    assert len(store.log) == before


def test_a_task_rerun_is_refused_while_other_tasks_of_its_stage_failed(
    jobnik: Jobnik, store: MemoryStore
) -> None:
    job, [stage] = job_with(jobnik, 2)
    first, second = (store.tables.dequeueable("t0")[i] for i in (0, 1))
    a, b = jobnik.dequeue("t0"), jobnik.dequeue("t0")
    jobnik.report_task(a.id, TaskStatus.FAILED, attempt=1)
    jobnik.report_task(b.id, TaskStatus.FAILED, attempt=1)  # the stage had failed already
    before = len(store.log)

    with pytest.raises(OtherTasksFailed):
        jobnik.rerun_task(first)
    assert len(store.log) == before

    rerun = jobnik.rerun_stage(stage, reason="both")
    assert rerun.tasks == 2
    assert {status(store, TASKS, t) for t in (first, second)} == {"PENDING"}
    assert status(store, JOBS, job) == JobStatus.IN_PROGRESS


def test_a_stage_without_failed_or_aborted_tasks_is_not_rerun(
    jobnik: Jobnik, store: MemoryStore
) -> None:
    _job, [one, _two] = job_with(jobnik, 1, 1)
    run(jobnik, "t0")
    run(jobnik, "t1", TaskStatus.FAILED)

    with pytest.raises(StageNotRerunnable):
        jobnik.rerun_stage(one)


def test_tasks_and_stages_of_a_job_that_has_not_ended_are_not_rerun(
    jobnik: Jobnik, store: MemoryStore
) -> None:
    job, [stage] = job_with(jobnik, 1)

    with pytest.raises(JobNotRerunnable):
        jobnik.rerun_stage(stage)
    with pytest.raises(JobNotRerunnable):
        jobnik.rerun_job(job)
    jobnik.report_task(jobnik.dequeue("t0").id, TaskStatus.COMPLETED)
    with pytest.raises(JobNotRerunnable):
        jobnik.rerun_job(job)  # COMPLETED


def test_an_aborted_job_reruns_from_its_first_unfinished_stage(
    jobnik: Jobnik, store: MemoryStore
) -> None:
    job, [one, two, three] = job_with(jobnik, 1, 2, 1)
    run(jobnik, "t0")
    running = jobnik.dequeue("t1")
    jobnik.set_job_status(job, JobStatus.ABORTED, reason="by mistake")
    assert [status(store, STAGES, s) for s in (one, two, three)] == [
        "COMPLETED",
        "ABORTED",
        "ABORTED",
    ]

    rerun = jobnik.rerun_job(job, reason="resume")

    # (the running task too: the abort cancelled its attempt)
    assert (rerun.from_stage_id, rerun.stages, rerun.tasks) == (two, (two, three), 3)
    assert [status(store, STAGES, s) for s in (one, two, three)] == [
        "COMPLETED",
        "IN_PROGRESS",
        "CREATED",
    ]
    assert row(store, JOBS, job).items() >= {"status": "IN_PROGRESS", "completed_stages": 1}.items()
    assert status(store, TASKS, running.id) == TaskStatus.PENDING  # queued for a new attempt
    with pytest.raises(StaleAttempt):
        jobnik.report_task(running.id, TaskStatus.COMPLETED, attempt=running.attempt)
    run(jobnik, "t1")
    run(jobnik, "t1")
    assert status(store, STAGES, three) == StageStatus.PENDING
    run(jobnik, "t2")
    assert (status(store, JOBS, job), row(store, JOBS, job)["percentage"]) == ("COMPLETED", 100)


def test_a_job_rerun_from_an_earlier_stage_runs_its_completed_stages_again(
    jobnik: Jobnik, store: MemoryStore
) -> None:
    job, [one, two] = job_with(jobnik, 2, 2)
    first = [run(jobnik, "t0"), run(jobnik, "t0")]
    kept = run(jobnik, "t1")
    failed = run(jobnik, "t1", TaskStatus.FAILED)
    assert row(store, JOBS, job)["percentage"] == 50

    rerun = jobnik.rerun_job(job, from_stage_id=one)

    assert (rerun.from_stage_id, rerun.stages, rerun.tasks) == (one, (one, two), 3)
    assert row(store, JOBS, job).items() >= {"completed_stages": 0, "percentage": 0}.items()
    assert [status(store, TASKS, t) for t in [*first, kept, failed]] == [
        "PENDING",
        "PENDING",
        "COMPLETED",  # a stage that had not completed keeps its completed tasks
        "PENDING",
    ]
    assert (status(store, STAGES, one), status(store, STAGES, two)) == ("IN_PROGRESS", "CREATED")
    assert store.tables.dequeueable("t1") == []  # its turn comes after stage one
    run(jobnik, "t0")
    run(jobnik, "t0")
    run(jobnik, "t1")
    assert status(store, JOBS, job) == JobStatus.COMPLETED


def test_a_job_rerun_never_skips_an_unfinished_stage(jobnik: Jobnik, store: MemoryStore) -> None:
    job, [_one, two] = job_with(jobnik, 1, 1)
    jobnik.set_job_status(job, JobStatus.ABORTED)
    _other, [elsewhere] = job_with(jobnik, 1)
    before = len(store.log)

    with pytest.raises(RerunSkipsStages):
        jobnik.rerun_job(job, from_stage_id=two)
    with pytest.raises(StageNotInJob):
        jobnik.rerun_job(job, from_stage_id=elsewhere)
    with pytest.raises(StageNotInJob):
        jobnik.rerun_job(job, from_stage_id=uuid4())

    assert len(store.log) == before


def test_a_stage_rerun_in_an_aborted_job_needs_its_stage_to_be_the_current_one(
    jobnik: Jobnik, store: MemoryStore
) -> None:
    job, [one, two] = job_with(jobnik, 1, 1)
    jobnik.set_job_status(job, JobStatus.ABORTED)

    with pytest.raises(LaterStageEnded):
        jobnik.rerun_stage(one)
    with pytest.raises(EarlierStageNotCompleted):
        jobnik.rerun_stage(two)

    alone, [stage] = job_with(jobnik, 2)
    jobnik.set_job_status(alone, JobStatus.ABORTED)
    assert jobnik.rerun_stage(stage).tasks == 2
    assert status(store, STAGES, stage) == StageStatus.PENDING  # it had never started
    assert status(store, JOBS, alone) == JobStatus.PENDING


def test_every_rerun_of_an_aborted_job_ends_the_attempts_the_abort_cancelled(
    jobnik: Jobnik, store: MemoryStore
) -> None:
    job, [stage] = job_with(jobnik, 3)
    running = jobnik.dequeue("t0")
    jobnik.set_job_status(job, JobStatus.ABORTED)
    assert jobnik.heartbeat(running.id, running.attempt).cancelled
    queued = [t for t in store.tables.where(TASKS, {"stage_id": stage}) if t["id"] != running.id]
    with pytest.raises(OtherTasksFailed):  # the cancelled attempt counts as an aborted task
        jobnik.rerun_task(queued[0]["id"])

    assert jobnik.rerun_stage(stage).tasks == 3

    assert row(store, TASKS, running.id).items() >= {"status": "PENDING", "attempt": 1}.items()
    aborted, rerun = store.events_of(running.id)[-2:]
    assert isinstance(aborted, Task.TaskAborted)
    assert isinstance(rerun, Task.TaskRerun)
    assert (aborted.previous, aborted.actor, rerun.previous) == ("IN_PROGRESS", "system", "ABORTED")
    for call in (
        lambda: jobnik.heartbeat(running.id, running.attempt),
        lambda: jobnik.give_back(running.id, running.attempt, "late"),
        lambda: jobnik.report_task(running.id, TaskStatus.COMPLETED, attempt=running.attempt),
    ):
        with pytest.raises(StaleAttempt):
            call()
    assert store.restored(TASKS, running.id) == replay(store.events_of(running.id))
    again = {t.id: t.attempt for t in (jobnik.dequeue("t0") for _ in range(3))}
    assert again[running.id] == running.attempt + 1


def test_a_failed_jobs_rerun_lets_a_running_attempt_go_on(
    jobnik: Jobnik, store: MemoryStore
) -> None:
    job, [stage] = job_with(jobnik, 2)
    running = jobnik.dequeue("t0")
    run(jobnik, "t0", TaskStatus.FAILED)
    assert status(store, JOBS, job) == JobStatus.FAILED
    assert not jobnik.heartbeat(running.id, running.attempt).cancelled  # nothing cancelled it

    assert jobnik.rerun_stage(stage).tasks == 1

    jobnik.report_task(running.id, TaskStatus.COMPLETED, attempt=running.attempt)
    run(jobnik, "t0")
    assert status(store, JOBS, job) == JobStatus.COMPLETED


def test_a_rerun_completion_stage_runs_in_the_completion_phase(
    jobnik: Jobnik, store: MemoryStore
) -> None:
    job = jobnik.create_job(NewJob(name="nightly", data={}))
    normal = jobnik.add_stage(job.id, NewStage(type="work", data={}))
    done = jobnik.add_stage(job.id, NewStage(type="done", data={}, completion=True))
    jobnik.add_tasks(normal.id, [NewTask(data={})])
    jobnik.add_tasks(done.id, [NewTask(data={}, max_attempts=1)])
    run(jobnik, "work")
    failed = run(jobnik, "done", TaskStatus.FAILED)
    assert status(store, JOBS, job.id) == JobStatus.FAILED

    jobnik.rerun_task(failed)

    assert status(store, STAGES, done.id) == StageStatus.IN_PROGRESS  # its phase: it runs on
    assert row(store, JOBS, job.id)["completing"]
    run(jobnik, "done")
    assert status(store, JOBS, job.id) == JobStatus.COMPLETED


def test_a_rerun_from_an_empty_completion_stage_completes_it_at_once(
    jobnik: Jobnik, store: MemoryStore
) -> None:
    job = jobnik.create_job(NewJob(name="nightly", data={}))
    normal = jobnik.add_stage(job.id, NewStage(type="work", data={}))
    empty = jobnik.add_stage(job.id, NewStage(type="none", data={}, completion=True))
    done = jobnik.add_stage(job.id, NewStage(type="done", data={}, completion=True))
    jobnik.add_tasks(normal.id, [NewTask(data={})])
    jobnik.add_tasks(done.id, [NewTask(data={}, max_attempts=1)])
    run(jobnik, "work")
    run(jobnik, "done", TaskStatus.FAILED)

    jobnik.rerun_job(job.id, from_stage_id=empty.id)

    assert status(store, STAGES, empty.id) == StageStatus.COMPLETED
    assert status(store, STAGES, done.id) == StageStatus.PENDING  # the next one's turn
    run(jobnik, "done")
    assert status(store, JOBS, job.id) == JobStatus.COMPLETED


def test_a_standard_job_reopens_and_waits_for_its_finish(
    jobnik: Jobnik, store: MemoryStore
) -> None:
    job = jobnik.create_job(NewJob(name="open", data={}, mode=JobMode.STANDARD))
    jobnik.set_job_status(job.id, JobStatus.ABORTED)

    rerun = jobnik.rerun_job(job.id)

    assert (rerun.from_stage_id, rerun.stages, rerun.tasks) == (None, (), 0)
    assert status(store, JOBS, job.id) == JobStatus.PENDING
    jobnik.finish_job(job.id)
    assert status(store, JOBS, job.id) == JobStatus.COMPLETED


def test_reruns_replay_to_the_read_models(jobnik: Jobnik, store: MemoryStore) -> None:
    job, [one, two] = job_with(jobnik, 2, 1)
    run(jobnik, "t0")
    failed = run(jobnik, "t0", TaskStatus.FAILED)
    jobnik.rerun_task(failed, reason="again")
    run(jobnik, "t0")
    jobnik.set_job_status(job, JobStatus.ABORTED)
    jobnik.rerun_job(job, from_stage_id=one)

    for table, ids in ((JOBS, [job]), (STAGES, [one, two]), (TASKS, [failed])):
        for id in ids:
            assert store.restored(table, id) == replay(store.events_of(id))
    assert not [r for r in store.tables.rows[QUEUE] if r["job_id"] != job]
