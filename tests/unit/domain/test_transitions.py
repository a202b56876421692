from __future__ import annotations

from enum import StrEnum
from itertools import product
from typing import Any
from uuid import uuid4

import pytest

from jobnik.domain.errors import (
    AddTasksNotAllowed,
    IllegalJobTransition,
    IllegalStageTransition,
    IllegalTaskTransition,
    JobInFiniteState,
    JobnikError,
    JobNotInFiniteState,
    StageInFiniteState,
    StaleAttempt,
)
from jobnik.domain.jobs import Job
from jobnik.domain.principals import Actor
from jobnik.domain.stages import Stage
from jobnik.domain.statuses import (
    DEFAULT_LEASE_SECONDS,
    JOB_FINAL,
    JOB_TRANSITIONS,
    STAGE_FINAL,
    STAGE_TRANSITIONS,
    TASK_FINAL,
    TASK_TRANSITIONS,
    JobStatus,
    StageStatus,
    TaskStatus,
)
from jobnik.domain.tasks import Task

from ..builders import at, job_in, new_job, new_stage, new_task, stage_in, task_in

J, S, T = JobStatus, StageStatus, TaskStatus

# Jobnik's job machine, plus: a paused job still completes or fails.
JOB_ALLOWED = {
    (J.CREATED, J.PENDING), (J.CREATED, J.PAUSED), (J.CREATED, J.ABORTED),
    (J.PENDING, J.IN_PROGRESS), (J.PENDING, J.PAUSED), (J.PENDING, J.ABORTED),
    (J.IN_PROGRESS, J.PAUSED), (J.IN_PROGRESS, J.COMPLETED), (J.IN_PROGRESS, J.FAILED),
    (J.IN_PROGRESS, J.ABORTED),
    (J.PAUSED, J.PENDING), (J.PAUSED, J.IN_PROGRESS), (J.PAUSED, J.ABORTED),
    (J.PAUSED, J.COMPLETED), (J.PAUSED, J.FAILED),
    (J.PENDING, J.COMPLETED),  # a finished job with no work left completes
}  # fmt: skip

# Jobnik's stage machine; the "(no-op)" cells are the release command's business, not the table's.
STAGE_ALLOWED = {
    (S.CREATED, S.PENDING), (S.CREATED, S.WAITING), (S.CREATED, S.ABORTED),
    (S.PENDING, S.IN_PROGRESS), (S.PENDING, S.WAITING), (S.PENDING, S.ABORTED),
    (S.IN_PROGRESS, S.WAITING), (S.IN_PROGRESS, S.COMPLETED), (S.IN_PROGRESS, S.FAILED),
    (S.IN_PROGRESS, S.ABORTED),
    (S.WAITING, S.PENDING), (S.WAITING, S.ABORTED),
}  # fmt: skip

# Jobnik's task machine, plus: abort reaches every unfinished task (a late report of an
# IN_PROGRESS one is recorded as its abort), plus jobnik's give-back (IN_PROGRESS → PENDING,
# TaskReturned: a worker shutting down hands its task back without spending an attempt).
TASK_ALLOWED = {
    (T.CREATED, T.PENDING),
    (T.PENDING, T.IN_PROGRESS),
    (T.IN_PROGRESS, T.PENDING),
    (T.IN_PROGRESS, T.COMPLETED), (T.IN_PROGRESS, T.FAILED), (T.IN_PROGRESS, T.RETRIED),
    (T.RETRIED, T.IN_PROGRESS),
    (T.CREATED, T.ABORTED), (T.PENDING, T.ABORTED), (T.IN_PROGRESS, T.ABORTED),
    (T.RETRIED, T.ABORTED),
    # delegation: the task waits for its child jobs, then goes back to the queue
    (T.IN_PROGRESS, T.DELEGATED), (T.DELEGATED, T.PENDING), (T.DELEGATED, T.ABORTED),
}  # fmt: skip


def _pairs(enum: type[StrEnum]) -> list[tuple[Any, Any]]:
    members = list(enum)
    return list(product(members, members))


# -- the tables ---------------------------------------------------------------------------


@pytest.mark.parametrize(("source", "target"), _pairs(JobStatus))
def test_job_table_matches_the_rules(source: JobStatus, target: JobStatus) -> None:
    assert (target in JOB_TRANSITIONS[source]) == ((source, target) in JOB_ALLOWED)


@pytest.mark.parametrize(("source", "target"), _pairs(StageStatus))
def test_stage_table_matches_the_rules(source: StageStatus, target: StageStatus) -> None:
    assert (target in STAGE_TRANSITIONS[source]) == ((source, target) in STAGE_ALLOWED)


@pytest.mark.parametrize(("source", "target"), _pairs(TaskStatus))
def test_task_table_matches_the_rules(source: TaskStatus, target: TaskStatus) -> None:
    assert (target in TASK_TRANSITIONS[source]) == ((source, target) in TASK_ALLOWED)


@pytest.mark.parametrize(
    ("table", "final"),
    [
        pytest.param(JOB_TRANSITIONS, JOB_FINAL, id="job"),
        pytest.param(STAGE_TRANSITIONS, STAGE_FINAL, id="stage"),
        pytest.param(TASK_TRANSITIONS, TASK_FINAL, id="task"),
    ],
)
def test_final_statuses_are_exactly_the_dead_ends(table: dict, final: frozenset) -> None:
    assert final == {status for status, targets in table.items() if not targets}
    assert final == {"COMPLETED", "FAILED", "ABORTED"}


# -- Job.request_status (PUT /v1/jobs/{id}/status) ------------------------------------------

JOB_SCENARIOS = [
    pytest.param(J.CREATED, False, id="CREATED"),
    pytest.param(J.PENDING, False, id="PENDING"),
    pytest.param(J.IN_PROGRESS, True, id="IN_PROGRESS"),
    pytest.param(J.PAUSED, False, id="PAUSED_before_start"),
    pytest.param(J.PAUSED, True, id="PAUSED_after_start"),
    pytest.param(J.COMPLETED, True, id="COMPLETED"),
    pytest.param(J.FAILED, True, id="FAILED"),
    pytest.param(J.ABORTED, False, id="ABORTED"),
]


def _requests(legal: bool, *targets: JobStatus) -> list[Any]:
    return [
        pytest.param(p.values[0], p.values[1], target, id=f"{p.id}->{target}")
        for p in JOB_SCENARIOS
        for target in targets
        if ((p.values[0], target) in JOB_ALLOWED) is legal
    ]


@pytest.mark.parametrize(
    ("status", "started", "target"), _requests(False, J.PENDING, J.PAUSED, J.ABORTED)
)
def test_an_illegal_status_request_is_refused_and_leaves_no_event(
    status: JobStatus, started: bool, target: JobStatus
) -> None:
    job = job_in(status, started=started)

    with pytest.raises(IllegalJobTransition) as refused:
        job.request_status(target, at(10))

    assert refused.value.message == f"Illegal status transition from {status} to {target}"
    assert refused.value.code == "ILLEGAL_JOB_STATUS_TRANSITION"
    assert job.collect_events() == []
    assert job.status == status


def test_the_refused_requests_are_the_ones_the_rules_name() -> None:
    refused = {(p.values[0], p.values[2]) for p in _requests(False, J.PENDING, J.PAUSED, J.ABORTED)}

    assert {
        (J.PENDING, J.PENDING),
        (J.IN_PROGRESS, J.PENDING),
        (J.PAUSED, J.PAUSED),
        (J.ABORTED, J.PENDING),
        (J.COMPLETED, J.ABORTED),
    } <= refused
    assert {(s, t) for s in JOB_FINAL for t in (J.PENDING, J.PAUSED, J.ABORTED)} <= refused


@pytest.mark.parametrize(("status", "started", "target"), _requests(True, J.PAUSED))
def test_pausing_records_the_status_it_paused(
    status: JobStatus, started: bool, target: JobStatus
) -> None:
    job = job_in(status, started=started)

    job.request_status(target, at(10), reason="maintenance")

    [event] = job.collect_events()
    assert isinstance(event, Job.JobPaused)
    assert (event.previous, event.actor, event.reason) == (status, "api", "maintenance")
    assert job.status == J.PAUSED


@pytest.mark.parametrize(("status", "started", "target"), _requests(True, J.ABORTED))
def test_aborting_ends_the_job_from_any_unfinished_status(
    status: JobStatus, started: bool, target: JobStatus
) -> None:
    job = job_in(status, started=started)

    job.request_status(target, at(10))

    [event] = job.collect_events()
    assert isinstance(event, Job.JobAborted)
    assert event.previous == status
    assert (job.status, job.end_time) == (J.ABORTED, at(10))


@pytest.mark.parametrize(
    ("status", "started", "resumed"),
    [
        pytest.param(J.CREATED, False, J.PENDING, id="CREATED"),
        pytest.param(J.PAUSED, False, J.PENDING, id="PAUSED_before_start"),
        pytest.param(J.PAUSED, True, J.IN_PROGRESS, id="PAUSED_after_start"),
    ],
)
def test_resuming_restores_in_progress_only_when_the_job_had_started(
    status: JobStatus, started: bool, resumed: JobStatus
) -> None:
    job = job_in(status, started=started)

    job.request_status(J.PENDING, at(10))

    [event] = job.collect_events()
    assert isinstance(event, Job.JobResumed)
    assert event.status == resumed
    assert job.status == resumed


def test_resume_targets_are_exactly_the_legal_pending_requests() -> None:
    legal = {(p.values[0], p.values[1]) for p in _requests(True, J.PENDING)}

    assert legal == {(J.CREATED, False), (J.PAUSED, False), (J.PAUSED, True)}


# -- Job: system transitions, stages, delete ----------------------------------------------


@pytest.mark.parametrize(
    ("status", "started"), [p for p in JOB_SCENARIOS if p.values[0] is not J.PENDING]
)
def test_a_job_starts_only_from_pending(status: JobStatus, started: bool) -> None:
    job = job_in(status, started=started)

    job.start(at(10), Actor.SYSTEM)

    assert job.collect_events() == []
    assert job.status == status


def test_a_pending_job_starts_when_its_first_stage_starts() -> None:
    job = job_in(J.PENDING)

    job.start(at(10), Actor.SYSTEM)

    [event] = job.collect_events()
    assert isinstance(event, Job.JobStarted)
    assert (job.status, job.started, job.start_time) == (J.IN_PROGRESS, True, at(10))


@pytest.mark.parametrize(
    ("status", "started"), [p for p in JOB_SCENARIOS if p.values[0] not in JOB_FINAL]
)
def test_stages_are_appended_in_order_to_an_unfinished_job(
    status: JobStatus, started: bool
) -> None:
    job = job_in(status, started=started)
    before = job.stage_count

    orders = [job.append_stage(uuid4(), at(10), Actor.API) for _ in range(2)]

    assert orders == [before + 1, before + 2]
    events = job.collect_events()
    assert [type(e) for e in events] == [Job.StageAppended, Job.StageAppended]
    assert [e.order for e in events] == orders
    assert job.stage_count == before + 2


@pytest.mark.parametrize("status", sorted(JOB_FINAL))
def test_a_final_job_refuses_new_stages(status: JobStatus) -> None:
    job = job_in(JobStatus(status))

    with pytest.raises(JobInFiniteState) as refused:
        job.append_stage(uuid4(), at(10), Actor.API)

    assert (refused.value.code, refused.value.message) == (
        "JOB_IN_FINITE_STATE",
        "JOB_ALREADY_FINISHED_STAGES_ERROR",
    )
    assert job.collect_events() == []


@pytest.mark.parametrize(
    ("status", "started"), [p for p in JOB_SCENARIOS if p.values[0] not in JOB_FINAL]
)
def test_an_unfinished_job_cannot_be_deleted(status: JobStatus, started: bool) -> None:
    job = job_in(status, started=started)

    with pytest.raises(JobNotInFiniteState) as refused:
        job.delete(at(10))

    assert refused.value.code == refused.value.message == "JOB_NOT_IN_FINITE_STATE"
    assert job.collect_events() == []


@pytest.mark.parametrize("status", sorted(JOB_FINAL))
def test_a_final_job_is_deleted_by_an_event(status: JobStatus) -> None:
    job = job_in(JobStatus(status))

    job.delete(at(10))

    [event] = job.collect_events()
    assert isinstance(event, Job.JobDeleted)
    assert job.deleted
    assert job.status == status


def _job_with_stages(count: int, status: JobStatus = J.IN_PROGRESS) -> tuple[Job, list]:
    job = new_job()
    stage_ids = [uuid4() for _ in range(count)]
    for stage_id in stage_ids:
        job.append_stage(stage_id, at(1), Actor.API)
    job.start(at(2), Actor.SYSTEM)
    if status is J.PAUSED:
        job.request_status(J.PAUSED, at(3))
    job.collect_events()
    return job, stage_ids


def test_job_percentage_is_the_floor_of_completed_stages_and_completion_waits_for_all() -> None:
    job, stage_ids = _job_with_stages(3)

    seen = []
    for minute, stage_id in enumerate(stage_ids, start=10):
        job.stage_completed(stage_id, at(minute), Actor.SYSTEM)
        seen.append(([type(e).__name__ for e in job.collect_events()], job.percentage, job.status))

    assert seen == [
        (["JobProgressed"], 33, J.IN_PROGRESS),
        (["JobProgressed"], 66, J.IN_PROGRESS),
        (["JobProgressed", "JobCompleted"], 100, J.COMPLETED),
    ]
    assert (job.completed_stages, job.end_time) == (3, at(12))


def test_a_stage_added_later_lowers_nothing_until_the_next_completion() -> None:
    job, stage_ids = _job_with_stages(2)
    job.stage_completed(stage_ids[0], at(10), Actor.SYSTEM)

    job.append_stage(uuid4(), at(11), Actor.API)

    assert job.percentage == 50
    job.stage_completed(stage_ids[1], at(12), Actor.SYSTEM)
    assert (job.percentage, job.status) == (66, J.IN_PROGRESS)


def test_a_paused_job_whose_last_stage_completes_becomes_completed() -> None:
    job, [first, last] = _job_with_stages(2, J.PAUSED)

    job.stage_completed(first, at(10), Actor.SYSTEM)
    assert (job.status, job.percentage) == (J.PAUSED, 50)
    job.stage_completed(last, at(11), Actor.SYSTEM)

    assert [type(e) for e in job.collect_events()] == [
        Job.JobProgressed,
        Job.JobProgressed,
        Job.JobCompleted,
    ]
    assert (job.status, job.percentage) == (J.COMPLETED, 100)


@pytest.mark.parametrize("status", [J.IN_PROGRESS, J.PAUSED])
def test_a_failed_stage_fails_the_job(status: JobStatus) -> None:
    job, [stage_id] = _job_with_stages(1, status)

    job.stage_failed(stage_id, at(10), Actor.SYSTEM)

    [event] = job.collect_events()
    assert isinstance(event, Job.JobFailed)
    assert (event.stage_id, event.reason) == (stage_id, "a stage failed")
    assert (job.status, job.end_time) == (J.FAILED, at(10))


@pytest.mark.parametrize("status", sorted(JOB_FINAL))
def test_a_failed_stage_leaves_a_final_job_alone(status: JobStatus) -> None:
    job = job_in(JobStatus(status))

    job.stage_failed(uuid4(), at(10), Actor.SYSTEM)

    assert job.collect_events() == []
    assert job.status == status


def test_changing_to_the_same_priority_is_no_event() -> None:
    job = job_in(J.PENDING)

    assert job.change_priority(job.priority, at(10)) is False
    assert job.collect_events() == []
    assert job.change_priority("HIGH", at(11)) is True
    [event] = job.collect_events()
    assert (event.previous, event.priority) == ("MEDIUM", "HIGH")


# -- Stage ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("order", "start_as_waiting", "previous_completed", "status"),
    [
        (1, False, False, S.PENDING),
        (1, True, False, S.WAITING),
        (2, False, False, S.CREATED),
        (2, False, True, S.PENDING),
        (2, True, False, S.WAITING),
        (2, True, True, S.WAITING),
        (5, False, False, S.CREATED),
    ],
)
def test_a_new_stage_starts_waiting_pending_or_created(
    order: int, start_as_waiting: bool, previous_completed: bool, status: StageStatus
) -> None:
    stage = new_stage(
        order=order, start_as_waiting=start_as_waiting, previous_completed=previous_completed
    )

    [event] = stage.collect_events()
    assert isinstance(event, Stage.StageAdded)
    assert event.status == status
    assert (stage.status, stage.order) == (status, order)


@pytest.mark.parametrize("previous", [None, *StageStatus])
def test_releasing_a_pending_stage_is_a_no_op_whatever_came_before(
    previous: StageStatus | None,
) -> None:
    stage = stage_in(S.PENDING, order=2)

    stage.release(stage_in(previous) if previous else None, at(10), Actor.API)

    assert stage.collect_events() == []
    assert stage.status == S.PENDING


@pytest.mark.parametrize("previous", [s for s in StageStatus if s is not S.COMPLETED], ids=str)
@pytest.mark.parametrize("status", [s for s in StageStatus if s is not S.PENDING], ids=str)
def test_a_stage_is_released_only_after_a_completed_previous_stage(
    status: StageStatus, previous: StageStatus
) -> None:
    stage = stage_in(status, order=2)

    with pytest.raises(IllegalStageTransition) as refused:
        stage.release(stage_in(previous), at(10), Actor.API)

    assert refused.value.message == "Previous stage is not COMPLETED"
    assert refused.value.code == "ILLEGAL_STAGE_STATUS_TRANSITION"
    assert stage.collect_events() == []


@pytest.mark.parametrize("with_previous", [False, True], ids=["first", "after_completed"])
@pytest.mark.parametrize("status", [S.IN_PROGRESS, *sorted(STAGE_FINAL)], ids=str)
def test_the_machine_refuses_releasing_a_started_or_final_stage(
    status: StageStatus, with_previous: bool
) -> None:
    stage = stage_in(StageStatus(status), order=2 if with_previous else 1)
    previous = stage_in(S.COMPLETED) if with_previous else None

    with pytest.raises(IllegalStageTransition) as refused:
        stage.release(previous, at(10), Actor.API)

    assert refused.value.message == f"Illegal status transition from {status} to PENDING"
    assert stage.collect_events() == []


@pytest.mark.parametrize(
    ("status", "order", "with_previous"),
    [(S.CREATED, 2, True), (S.WAITING, 2, True), (S.WAITING, 1, False)],
)
def test_a_created_or_waiting_stage_is_released_by_a_user(
    status: StageStatus, order: int, with_previous: bool
) -> None:
    stage = stage_in(status, order=order)

    stage.release(stage_in(S.COMPLETED) if with_previous else None, at(10), Actor.API)

    [event] = stage.collect_events()
    assert isinstance(event, Stage.StageReleased)
    assert (event.previous, event.job_id, event.reason) == (
        status,
        stage.job_id,
        "released by user",
    )
    assert stage.status == S.PENDING


@pytest.mark.parametrize(
    ("status", "released"),
    [(S.CREATED, True), (S.WAITING, False), (S.PENDING, False), (S.COMPLETED, False)],
)
def test_a_completed_stage_releases_only_a_created_successor(
    status: StageStatus, released: bool
) -> None:
    stage = stage_in(status, order=2)

    stage.release_after_previous(at(10), Actor.SYSTEM)

    events = stage.collect_events()
    assert [type(e) for e in events] == ([Stage.StageReleased] if released else [])
    assert stage.status == (S.PENDING if released else status)


@pytest.mark.parametrize("status", list(StageStatus), ids=str)
def test_a_stage_starts_only_from_pending(status: StageStatus) -> None:
    stage = stage_in(status)

    started = stage.start(at(10), Actor.SYSTEM)

    assert started is (status is S.PENDING)
    assert len(stage.collect_events()) == int(started)
    assert stage.status == (S.IN_PROGRESS if started else status)


@pytest.mark.parametrize("status", [s for s in StageStatus if s is not S.IN_PROGRESS], ids=str)
def test_only_an_in_progress_stage_completes(status: StageStatus) -> None:
    stage = stage_in(status)

    with pytest.raises(IllegalStageTransition) as refused:
        stage.complete(at(10), Actor.SYSTEM)

    assert refused.value.message == f"Illegal status transition from {status} to COMPLETED"
    assert stage.collect_events() == []


def test_a_stage_fails_once_however_many_tasks_fail() -> None:
    stage = stage_in(S.IN_PROGRESS)
    first, second = uuid4(), uuid4()

    assert stage.fail(first, at(10), Actor.SYSTEM) is True
    assert stage.fail(second, at(11), Actor.SYSTEM) is False

    [event] = stage.collect_events()
    assert isinstance(event, Stage.StageFailed)
    assert (event.task_id, stage.status, stage.end_time) == (first, S.FAILED, at(10))


@pytest.mark.parametrize("status", [S.CREATED, S.PENDING, S.WAITING], ids=str)
def test_tasks_join_a_stage_that_has_not_started(status: StageStatus) -> None:
    stage_in(status).check_tasks_can_be_added()


@pytest.mark.parametrize(
    ("status", "refusal"),
    [
        (S.IN_PROGRESS, AddTasksNotAllowed),
        (S.COMPLETED, StageInFiniteState),
        (S.FAILED, StageInFiniteState),
        (S.ABORTED, StageInFiniteState),
    ],
)
def test_tasks_cannot_join_a_started_or_final_stage(
    status: StageStatus, refusal: type[Exception]
) -> None:
    stage = stage_in(status)

    with pytest.raises(refusal):
        stage.check_tasks_can_be_added()


@pytest.mark.parametrize("status", [s for s in StageStatus if s not in STAGE_FINAL], ids=str)
def test_abort_reaches_every_unfinished_stage(status: StageStatus) -> None:
    stage = stage_in(status)

    stage.abort(at(10), Actor.SYSTEM, "job aborted")

    [event] = stage.collect_events()
    assert isinstance(event, Stage.StageAborted)
    assert (event.previous, event.reason, event.job_id) == (status, "job aborted", stage.job_id)
    assert (stage.status, stage.end_time) == (S.ABORTED, at(10))


@pytest.mark.parametrize("status", sorted(STAGE_FINAL))
def test_abort_leaves_a_final_stage_alone(status: StageStatus) -> None:
    stage = stage_in(StageStatus(status))

    stage.abort(at(10), Actor.SYSTEM, "job aborted")

    assert stage.collect_events() == []
    assert stage.status == status


# -- Task -------------------------------------------------------------------------------------


def test_a_completed_report_completes_an_in_progress_task() -> None:
    task = task_in(T.IN_PROGRESS)

    task.report(T.COMPLETED, at(10), Actor.WORKER)

    [event] = task.collect_events()
    assert isinstance(event, Task.TaskCompleted)
    assert (event.attempt, event.stage_id) == (1, task.stage_id)
    assert (task.status, task.end_time, task.attempts) == (T.COMPLETED, at(10), 0)


def test_failures_retry_until_attempts_run_out() -> None:
    task = task_in(T.PENDING, max_attempts=3)

    outcomes = []
    for minute in (10, 20, 30):
        task.dequeue(at(minute), Actor.WORKER)
        task.report(T.FAILED, at(minute + 1), Actor.WORKER)
        [_, reported] = task.collect_events()
        outcomes.append((type(reported), task.status, task.attempts, reported.attempt))

    assert outcomes == [
        (Task.TaskRetried, T.RETRIED, 1, 1),
        (Task.TaskRetried, T.RETRIED, 2, 2),
        (Task.TaskFailed, T.FAILED, 3, 3),
    ]
    assert task.end_time == at(31)


def test_a_single_attempt_task_fails_at_its_first_failure() -> None:
    task = task_in(T.IN_PROGRESS, max_attempts=1)

    task.report(T.FAILED, at(10), Actor.WORKER)

    [event] = task.collect_events()
    assert isinstance(event, Task.TaskFailed)
    assert (task.status, task.attempts, task.end_time) == (T.FAILED, 1, at(10))


def test_a_retried_task_that_completes_keeps_its_failure_count() -> None:
    task = task_in(T.RETRIED)

    task.dequeue(at(10), Actor.WORKER)
    task.report(T.COMPLETED, at(11), Actor.WORKER)

    assert (task.status, task.attempts, task.attempt) == (T.COMPLETED, 1, 2)
    assert task.end_time == at(11)


def test_a_retry_never_sets_an_end_time() -> None:
    task = task_in(T.RETRIED)

    assert task.end_time is None


@pytest.mark.parametrize(
    ("max_attempts", "target"), [(3, T.RETRIED), (2, T.RETRIED), (1, T.FAILED)]
)
def test_a_failed_report_on_a_pending_task_names_the_computed_target(
    max_attempts: int, target: TaskStatus
) -> None:
    task = task_in(T.PENDING, max_attempts=max_attempts)

    with pytest.raises(IllegalTaskTransition) as refused:
        task.report(T.FAILED, at(10), Actor.WORKER)

    assert refused.value.message == f"Illegal status transition from PENDING to {target}"
    assert refused.value.code == "ILLEGAL_TASK_STATUS_TRANSITION"
    assert task.collect_events() == []
    assert (task.status, task.attempts) == (T.PENDING, 0)


@pytest.mark.parametrize("status", [s for s in TaskStatus if s is not T.IN_PROGRESS], ids=str)
def test_a_completed_report_on_a_task_not_in_progress_is_refused(status: TaskStatus) -> None:
    task = task_in(status)

    with pytest.raises(IllegalTaskTransition) as refused:
        task.report(T.COMPLETED, at(10), Actor.WORKER)

    assert refused.value.message == f"Illegal status transition from {status} to COMPLETED"
    assert task.collect_events() == []
    assert task.status == status


@pytest.mark.parametrize("status", [s for s in TaskStatus if s is not T.IN_PROGRESS], ids=str)
def test_a_failed_report_on_a_task_not_in_progress_is_refused(status: TaskStatus) -> None:
    task = task_in(status)
    attempts = task.attempts

    with pytest.raises(IllegalTaskTransition):
        task.report(T.FAILED, at(10), Actor.WORKER)

    assert task.collect_events() == []
    assert (task.status, task.attempts) == (status, attempts)


@pytest.mark.parametrize(
    ("status", "attempt"), [(T.PENDING, 1), (T.RETRIED, 2)], ids=["PENDING", "RETRIED"]
)
def test_dequeue_opens_the_next_attempt_of_a_queued_task(status: TaskStatus, attempt: int) -> None:
    task = task_in(status)

    task.dequeue(at(10), Actor.WORKER)

    [event] = task.collect_events()
    assert isinstance(event, Task.TaskDequeued)
    assert (event.previous, event.attempt) == (status, attempt)
    assert (task.status, task.start_time, task.attempt) == (T.IN_PROGRESS, at(10), attempt)


@pytest.mark.parametrize("status", [s for s in TaskStatus if s not in (T.PENDING, T.RETRIED)])
def test_only_a_queued_task_can_be_dequeued(status: TaskStatus) -> None:
    task = task_in(status)

    with pytest.raises(IllegalTaskTransition) as refused:
        task.dequeue(at(10), Actor.WORKER)

    assert refused.value.message == f"Illegal status transition from {status} to IN_PROGRESS"
    assert task.collect_events() == []


@pytest.mark.parametrize("reported", [None, T.COMPLETED, T.FAILED])
@pytest.mark.parametrize("status", [s for s in TaskStatus if s not in TASK_FINAL], ids=str)
def test_abort_reaches_every_unfinished_task(
    status: TaskStatus, reported: TaskStatus | None
) -> None:
    task = task_in(status)

    task.abort(at(10), Actor.SYSTEM, "job aborted", reported)

    [event] = task.collect_events()
    assert isinstance(event, Task.TaskAborted)
    assert (event.previous, event.reported, event.reason) == (status, reported, "job aborted")
    assert (task.status, task.end_time) == (T.ABORTED, at(10))


@pytest.mark.parametrize("status", sorted(TASK_FINAL))
def test_abort_leaves_a_final_task_alone(status: TaskStatus) -> None:
    task = task_in(TaskStatus(status))

    task.abort(at(10), Actor.SYSTEM, "job aborted", T.COMPLETED)

    assert task.collect_events() == []
    assert task.status == status


def test_a_new_task_is_pending_with_no_attempts() -> None:
    task = new_task(max_attempts=4)

    [event] = task.collect_events()
    assert isinstance(event, Task.TaskCreated)
    assert (task.status, task.attempts, task.attempt, task.max_attempts) == (T.PENDING, 0, 0, 4)
    assert task.start_time is task.end_time is None


def test_a_fatal_failure_fails_at_once_whatever_attempts_remain() -> None:
    task = task_in(T.IN_PROGRESS, max_attempts=3)

    task.report(T.FAILED, at(10), Actor.WORKER, "bad input", fatal=True)

    [event] = task.collect_events()
    assert isinstance(event, Task.TaskFailed)
    assert (event.cause, event.attempts, event.reason) == ("fatal", 1, "bad input")
    assert (task.status, task.end_time) == (T.FAILED, at(10))


def test_a_handler_failure_is_recorded_as_an_error() -> None:
    task = task_in(T.IN_PROGRESS)

    task.report(T.FAILED, at(10), Actor.WORKER)

    [event] = task.collect_events()
    assert isinstance(event, Task.TaskRetried)
    assert event.cause == "error"


def test_a_task_handed_back_is_queued_again_without_spending_an_attempt() -> None:
    task = task_in(T.RETRIED)

    task.dequeue(at(10), Actor.WORKER)
    task.give_back(at(11), Actor.WORKER, "worker shutting down")

    [_, event] = task.collect_events()
    assert isinstance(event, Task.TaskReturned)
    assert (event.attempt, event.reason) == (2, "worker shutting down")
    assert (task.status, task.attempts, task.lease_expires_at) == (T.PENDING, 1, None)


@pytest.mark.parametrize(
    "status",
    [s for s in TaskStatus if s is not T.IN_PROGRESS],
    ids=str,
)
def test_only_an_in_progress_task_can_be_handed_back(status: TaskStatus) -> None:
    task = task_in(status)

    with pytest.raises(IllegalTaskTransition) as refused:
        task.give_back(at(10), Actor.WORKER, "worker shutting down")

    assert refused.value.message == f"Illegal status transition from {status} to PENDING"
    assert task.collect_events() == []


def test_dequeue_leases_the_attempt_and_a_heartbeat_extends_the_lease() -> None:
    task = task_in(T.PENDING)

    task.dequeue(at(10), Actor.WORKER, lease_seconds=120)
    leased = task.lease_expires_at
    task.extend_lease(at(11), Actor.WORKER)

    assert leased == at(12)
    assert (task.lease_seconds, task.lease_expires_at) == (120, at(13))
    assert [type(e) for e in task.collect_events()] == [Task.TaskDequeued, Task.TaskLeaseExtended]


@pytest.mark.parametrize("status", [T.PENDING, T.RETRIED, T.COMPLETED, T.FAILED, T.ABORTED])
def test_only_an_in_progress_task_has_its_lease_extended(status: TaskStatus) -> None:
    task = task_in(status)

    with pytest.raises(IllegalTaskTransition):
        task.extend_lease(at(10), Actor.WORKER)

    assert task.collect_events() == []


def test_a_client_that_never_heartbeats_gets_the_long_default_lease() -> None:
    task = task_in(T.PENDING)

    task.dequeue(at(10), Actor.WORKER)

    assert DEFAULT_LEASE_SECONDS == 30 * 60
    assert task.lease_expires_at == at(40)


@pytest.mark.parametrize("event", ["complete", "fail", "abort"])
def test_a_task_that_leaves_in_progress_holds_no_lease(event: str) -> None:
    task = task_in(T.IN_PROGRESS)

    if event == "abort":
        task.abort(at(10), Actor.SYSTEM, "job aborted")
    else:
        getattr(task, event)(at(10), Actor.WORKER)

    assert task.lease_expires_at is None


@pytest.mark.parametrize(
    ("status", "attempt", "holds"),
    [
        (T.IN_PROGRESS, 1, True),
        (T.IN_PROGRESS, None, True),
        (T.IN_PROGRESS, 2, False),
        (T.IN_PROGRESS, 0, False),
        (T.RETRIED, 1, False),
        (T.COMPLETED, 1, False),
        (T.PENDING, None, False),
    ],
)
def test_only_the_open_current_attempt_holds_the_task(
    status: TaskStatus, attempt: int | None, holds: bool
) -> None:
    assert task_in(status).holds(attempt) is holds


def test_a_stale_attempt_is_recorded_and_refused() -> None:
    task = task_in(T.RETRIED)
    task.dequeue(at(10), Actor.WORKER)
    task.collect_events()

    error = task.refuse(1, "report COMPLETED", at(11), Actor.WORKER)

    assert isinstance(error, StaleAttempt)
    assert error.code == "STALE_ATTEMPT"
    [event] = task.collect_events()
    assert isinstance(event, Task.TaskAttemptRefused)
    assert (event.attempt, event.current_attempt, event.request) == (1, 2, "report COMPLETED")
    assert (task.status, task.attempt) == (T.IN_PROGRESS, 2)


# -- latent: commands trust their callers to pass enum members of the user-facing subset ----


@pytest.mark.parametrize(
    ("status", "target"),
    [
        (J.IN_PROGRESS, J.COMPLETED),
        (J.IN_PROGRESS, J.FAILED),
        (J.PENDING, J.IN_PROGRESS),
        (J.PAUSED, J.COMPLETED),
    ],
)
def test_a_user_may_request_only_pending_paused_or_aborted(
    status: JobStatus, target: JobStatus
) -> None:
    job = job_in(status, started=status is not J.PENDING)

    with pytest.raises(JobnikError):
        job.request_status(target, at(10))

    assert job.collect_events() == []


def test_a_job_status_given_as_its_string_means_the_same_request() -> None:
    job = job_in(J.IN_PROGRESS, started=True)

    job.request_status("PAUSED", at(10))  # type: ignore[arg-type]

    assert job.status == J.PAUSED


def test_a_task_report_given_as_its_string_means_the_same_report() -> None:
    task = task_in(T.IN_PROGRESS)

    task.report("COMPLETED", at(10), Actor.WORKER)  # type: ignore[arg-type]

    assert (task.status, task.attempts) == (T.COMPLETED, 0)
