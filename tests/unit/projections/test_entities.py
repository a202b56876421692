from __future__ import annotations

import inspect
from typing import Any
from uuid import uuid4

import pytest
from eventsourcing.domain import Aggregate

from jobnik.domain.application import Jobnik, NewJob, NewStage, NewTask
from jobnik.domain.archives import (
    Archive,
    ArchiveBatch,
    ArchiveErasure,
    ArchiveFile,
    FireKey,
    RetentionChange,
    location,
)
from jobnik.domain.errors import JobNotEnded, TaskNotRerunnable
from jobnik.domain.jobs import Job
from jobnik.domain.limits import StageTypeLimits
from jobnik.domain.ports import Summary
from jobnik.domain.principals import Actor
from jobnik.domain.schedules import Schedule
from jobnik.domain.stages import Stage
from jobnik.domain.statuses import JobStatus, Priority, StageStatus, TaskStatus
from jobnik.domain.tasks import Task
from jobnik.domain.tokens import Token
from jobnik.projections.inline.ops import (
    Add,
    Delete,
    Enqueue,
    Gate,
    IndexEvent,
    Insert,
    QueueChange,
    Update,
)
from jobnik.projections.inline.project import PROJECT, project
from jobnik.projections.inline.rows import summary_from_row
from jobnik.projections.inline.tables import (
    ARCHIVES,
    ENTITY_JOBS,
    JOB_EVENTS,
    JOBS,
    LIMITS,
    LOGS,
    QUEUE,
    RETENTION,
    SCHEDULE_FIRES,
    SCHEDULES,
    STAGES,
    SUMMARIES,
    TABLES,
    TASKS,
    TOKENS,
)
from jobnik.projections.store.executor import batches

from ..builders import (
    NOW,
    TRACE,
    Clock,
    at,
    job_in,
    new_job,
    new_stage,
    new_task,
    per_job_record,
    stage_in,
    task_in,
)
from ..memory import MemoryStore

POSITION = 41


def only_event(aggregate: Aggregate) -> Any:
    [event] = aggregate.collect_events()
    return event


def stamp(event: Any, **values: Any) -> dict[str, Any]:
    return {"version": event.originator_version, "update_time": event.timestamp, **values}


# -- every event has a handler -------------------------------------------------------------


def _event_classes(aggregate: type) -> list[type]:
    return [
        cls
        for name, cls in vars(aggregate).items()
        if inspect.isclass(cls)
        and issubclass(cls, Aggregate.Event)
        and name not in ("Event", "Created", "Moved")  # bases, never triggered
    ]


AGGREGATES = (
    Job,
    Stage,
    Task,
    Token,
    Schedule,
    StageTypeLimits,
    RetentionChange,
    Archive,
    ArchiveBatch,
    ArchiveErasure,
)
DOMAIN_EVENTS = [cls for agg in AGGREGATES for cls in _event_classes(agg)]


@pytest.mark.parametrize("event_class", DOMAIN_EVENTS, ids=lambda c: c.__qualname__)
def test_every_domain_event_has_a_projection(event_class: type) -> None:
    assert event_class in PROJECT


def test_the_projection_handles_nothing_but_domain_events() -> None:
    assert set(PROJECT) == set(DOMAIN_EVENTS)


# -- jobs -----------------------------------------------------------------------------------


def test_job_created_inserts_a_pending_job_row() -> None:
    job = new_job(Priority.HIGH)
    event = only_event(job)

    ops = entity_ops(event, POSITION)

    assert ops == [
        Insert(
            JOBS,
            {
                "id": job.id,
                "version": 1,
                "name": "nightly",
                "data": {"bbox": [0, 0, 1, 1]},
                "priority": "HIGH",
                "priority_rank": 1,
                "user_metadata": {"owner": "ops"},
                "status": "PENDING",
                "percentage": 0,
                "traceparent": TRACE,
                "tracestate": None,
                "started": False,
                "stage_count": 0,
                "completed_stages": 0,
                "creation_time": NOW,
                "update_time": NOW,
                "start_time": None,
                "end_time": None,
                "mode": "runOnce",
                "parent_task_id": None,
                "parent_job_id": None,
                "completion_stages": 0,
                "finishing": False,
                "completing": False,
                "finish_time": None,
                "not_before": None,
                "retry_policy": None,
                "deadline": None,
                "schedule_to_start_seconds": None,
                "fairness_key": None,
                "fairness_weight": None,
                "concurrency_key": None,
                "gate": f"j:{job.id}",
            },
        )
    ]


def test_stage_appended_counts_the_jobs_stages() -> None:
    job = job_in(JobStatus.PENDING)
    job.append_stage(uuid4(), at(5), Actor.API)
    event = only_event(job)

    assert entity_ops(event, POSITION) == [
        Update(JOBS, {"id": job.id}, stamp(event, stage_count=1))
    ]


def test_job_started_marks_the_job_started() -> None:
    job = job_in(JobStatus.PENDING)
    job.start(at(5), Actor.SYSTEM)
    event = only_event(job)

    assert entity_ops(event, POSITION) == [
        Update(
            JOBS,
            {"id": job.id},
            stamp(event, status="IN_PROGRESS", started=True, start_time=at(5)),
        )
    ]


def test_job_paused_closes_its_tasks_in_the_queue() -> None:
    job = job_in(JobStatus.IN_PROGRESS, started=True)
    job.request_status(JobStatus.PAUSED, at(5))
    event = only_event(job)

    assert entity_ops(event, POSITION) == [
        Update(JOBS, {"id": job.id}, stamp(event, status="PAUSED")),
        QueueChange({"job_id": job.id}, {"job_open": False}, event.timestamp),
    ]


@pytest.mark.parametrize(("started", "status"), [(False, "PENDING"), (True, "IN_PROGRESS")])
def test_job_resumed_reopens_its_tasks_in_the_queue(started: bool, status: str) -> None:
    job = job_in(JobStatus.PAUSED, started=started)
    job.request_status(JobStatus.PENDING, at(5))
    event = only_event(job)

    assert entity_ops(event, POSITION) == [
        Update(JOBS, {"id": job.id}, stamp(event, status=status)),
        QueueChange({"job_id": job.id}, {"job_open": True}, event.timestamp),
    ]


def test_job_progressed_writes_the_percentage() -> None:
    job = new_job()
    stage_ids = [uuid4(), uuid4(), uuid4()]
    for stage_id in stage_ids:
        job.append_stage(stage_id, at(1), Actor.API)
    job.start(at(2), Actor.SYSTEM)
    job.collect_events()
    job.stage_completed(stage_ids[0], at(5), Actor.SYSTEM)
    event = only_event(job)

    assert entity_ops(event, POSITION) == [
        Update(JOBS, {"id": job.id}, stamp(event, completed_stages=1, percentage=33))
    ]


def _ended_job(status: JobStatus) -> tuple[Job, Any]:
    job = job_in(JobStatus.IN_PROGRESS, started=True)
    if status is JobStatus.COMPLETED:
        job.stage_completed(uuid4(), at(5), Actor.SYSTEM)
        return job, job.collect_events()[-1]
    if status is JobStatus.FAILED:
        job.stage_failed(uuid4(), at(5), Actor.SYSTEM)
    else:
        job.request_status(JobStatus.ABORTED, at(5))
    return job, only_event(job)


@pytest.mark.parametrize("status", [JobStatus.COMPLETED, JobStatus.ABORTED])
def test_a_job_that_ends_leaves_the_queue(status: JobStatus) -> None:
    job, event = _ended_job(status)

    assert entity_ops(event, POSITION) == [
        Update(JOBS, {"id": job.id}, stamp(event, status=status.value, end_time=at(5))),
        Delete(QUEUE, {"job_id": job.id}),
    ]


def test_a_failed_job_closes_its_queued_tasks_for_a_rerun() -> None:
    job, event = _ended_job(JobStatus.FAILED)

    assert entity_ops(event, POSITION) == [
        Update(JOBS, {"id": job.id}, stamp(event, status="FAILED", end_time=at(5))),
        QueueChange({"job_id": job.id}, {"job_open": False}, event.timestamp),
    ]


def test_job_priority_changed_reorders_its_queued_tasks() -> None:
    job = job_in(JobStatus.PENDING)
    job.change_priority(Priority.VERY_HIGH, at(5))
    event = only_event(job)

    assert entity_ops(event, POSITION) == [
        Update(JOBS, {"id": job.id}, stamp(event, priority="VERY_HIGH", priority_rank=0)),
        Update(QUEUE, {"job_id": job.id}, {"priority_rank": 0}),
    ]


def test_job_user_metadata_is_replaced_whole() -> None:
    job = job_in(JobStatus.PENDING)
    job.replace_user_metadata({"a": 1}, at(5), Actor.API)
    event = only_event(job)

    assert entity_ops(event, POSITION) == [
        Update(JOBS, {"id": job.id}, stamp(event, user_metadata={"a": 1}))
    ]


def test_job_deleted_deletes_the_job_tree_from_every_table() -> None:
    job = job_in(JobStatus.COMPLETED, started=True)
    job.delete(at(5))
    event = only_event(job)

    ops = entity_ops(event, POSITION)

    assert ops == [
        Delete(QUEUE, {"job_id": job.id}),
        Delete(LOGS, {"job_id": job.id}),
        Delete(TASKS, {"job_id": job.id}),
        Delete(SUMMARIES, {"job_id": job.id}),
        Delete(STAGES, {"job_id": job.id}),
        Delete(JOBS, {"id": job.id}),
    ]
    # the history stays, and so do the job's fire key if a schedule ran it; tokens,
    # schedules, limits, retention periods and archive records belong to no job
    kept = {ENTITY_JOBS, JOB_EVENTS, TOKENS, SCHEDULES, SCHEDULE_FIRES, LIMITS, RETENTION, ARCHIVES}
    assert {op.table for op in ops} == set(TABLES) - kept


# -- stages ---------------------------------------------------------------------------------


def test_stage_added_inserts_the_stage_and_an_empty_summary() -> None:
    stage = new_stage(order=2, start_as_waiting=True)
    event = only_event(stage)

    assert entity_ops(event, POSITION) == [
        Insert(
            STAGES,
            {
                "id": stage.id,
                "version": 1,
                "job_id": stage.job_id,
                "stage_order": 2,
                "type": "tiles",
                "data": {"zoom": 12},
                "user_metadata": {},
                "status": "WAITING",
                "traceparent": TRACE,
                "tracestate": "vendor=1",
                "creation_time": NOW,
                "update_time": NOW,
                "start_time": None,
                "end_time": None,
                "completion": False,
                "failure_patterns": [],
                "not_before": None,
                "retry_policy": None,
                "deadline": None,
                "schedule_to_start_seconds": None,
            },
        ),
        Insert(SUMMARIES, {"stage_id": stage.id, "job_id": stage.job_id}),
    ]


def test_stage_released_opens_its_tasks_in_the_queue() -> None:
    stage = stage_in(StageStatus.WAITING)
    stage.release(None, at(5), Actor.API)
    event = only_event(stage)

    assert entity_ops(event, POSITION) == [
        Update(STAGES, {"id": stage.id}, stamp(event, status="PENDING")),
        QueueChange({"stage_id": stage.id}, {"stage_open": True}, event.timestamp),
    ]


def test_stage_started_records_its_start_time() -> None:
    stage = stage_in(StageStatus.PENDING)
    stage.start(at(5), Actor.SYSTEM)
    event = only_event(stage)

    assert entity_ops(event, POSITION) == [
        Update(STAGES, {"id": stage.id}, stamp(event, status="IN_PROGRESS", start_time=at(5)))
    ]


def _ended_stage(status: str) -> tuple[Stage, Any]:
    stage = stage_in(StageStatus.IN_PROGRESS)
    if status == "COMPLETED":
        stage.complete(at(5), Actor.SYSTEM)
    elif status == "FAILED":
        stage.fail(uuid4(), at(5), Actor.SYSTEM)
    else:
        stage.abort(at(5), Actor.SYSTEM, "job aborted")
    return stage, only_event(stage)


@pytest.mark.parametrize("status", ["COMPLETED", "ABORTED"])
def test_a_stage_that_ends_leaves_the_queue(status: str) -> None:
    stage, event = _ended_stage(status)

    assert entity_ops(event, POSITION) == [
        Update(STAGES, {"id": stage.id}, stamp(event, status=status, end_time=at(5))),
        Delete(QUEUE, {"stage_id": stage.id}),
    ]


def test_a_failed_stage_closes_its_queued_tasks_for_a_rerun() -> None:
    stage, event = _ended_stage("FAILED")

    assert entity_ops(event, POSITION) == [
        Update(STAGES, {"id": stage.id}, stamp(event, status="FAILED", end_time=at(5))),
        QueueChange({"stage_id": stage.id}, {"stage_open": False}, event.timestamp),
    ]


def test_stage_user_metadata_is_replaced_whole() -> None:
    stage = stage_in(StageStatus.PENDING)
    stage.replace_user_metadata({"b": 2}, at(5), Actor.API)
    event = only_event(stage)

    assert entity_ops(event, POSITION) == [
        Update(STAGES, {"id": stage.id}, stamp(event, user_metadata={"b": 2}))
    ]


# -- reruns -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "now"), [(JobStatus.FAILED, "IN_PROGRESS"), (JobStatus.ABORTED, "PENDING")]
)
def test_a_reopened_job_runs_again_and_opens_its_queued_tasks(status: JobStatus, now: str) -> None:
    job = job_in(status)  # (the aborted one had not started)
    job.reopen(None, 0, False, at(9), Actor.API, "again")
    event = only_event(job)

    assert entity_ops(event, POSITION) == [
        Update(
            JOBS,
            {"id": job.id},
            stamp(
                event,
                status=now,
                end_time=None,
                completed_stages=0,
                percentage=0,
                completing=False,
                deadline=None,
            ),
        ),
        QueueChange({"job_id": job.id}, {"job_open": True}, event.timestamp),
    ]


@pytest.mark.parametrize(
    ("runs", "status", "open_"), [(True, "IN_PROGRESS", True), (False, "CREATED", False)]
)
def test_a_reopened_stage_runs_or_waits_for_its_turn(runs: bool, status: str, open_: bool) -> None:
    stage = stage_in(StageStatus.FAILED)
    stage.reopen(runs, at(9), Actor.API, None)
    event = only_event(stage)

    assert entity_ops(event, POSITION) == [
        Update(STAGES, {"id": stage.id}, stamp(event, status=status, end_time=None, deadline=None)),
        QueueChange({"stage_id": stage.id}, {"stage_open": open_}, event.timestamp),
    ]


@pytest.mark.parametrize(
    ("status", "counter"),
    [
        (TaskStatus.FAILED, "failed"),
        (TaskStatus.ABORTED, "aborted"),
        (TaskStatus.COMPLETED, "completed"),
    ],
)
def test_a_rerun_task_is_queued_again_with_a_fresh_budget(status: TaskStatus, counter: str) -> None:
    task = task_in(status, max_attempts=2)
    task.rerun(at(9), Actor.API, "again")
    event = only_event(task)

    assert entity_ops(event, POSITION) == [
        Update(
            TASKS,
            {"id": task.id},
            stamp(
                event,
                status="PENDING",
                attempts=0,
                end_time=None,
                lease_expires_at=None,
                result=None,
                not_before=None,
            ),
        ),
        Add(SUMMARIES, {"stage_id": task.stage_id}, {counter: -1, "pending": 1}),
        Enqueue(task.id, task.stage_id, POSITION, event.timestamp),
    ]


@pytest.mark.parametrize("status", [TaskStatus.PENDING, TaskStatus.IN_PROGRESS, TaskStatus.RETRIED])
def test_a_task_that_has_not_ended_is_not_rerun(status: TaskStatus) -> None:
    task = task_in(status)

    with pytest.raises(TaskNotRerunnable):
        task.rerun(at(9), Actor.API, None)

    assert task.collect_events() == []


# -- tasks ----------------------------------------------------------------------------------


def test_task_created_inserts_counts_and_enqueues_at_its_log_position() -> None:
    task = new_task(max_attempts=4)
    event = only_event(task)

    assert entity_ops(event, POSITION) == [
        Insert(
            TASKS,
            {
                "id": task.id,
                "version": 1,
                "stage_id": task.stage_id,
                "job_id": task.job_id,
                "stage_type": "tiles",
                "data": {"tile": [1, 2, 3]},
                "user_metadata": {},
                "status": "PENDING",
                "attempts": 0,
                "max_attempts": 4,
                "attempt": 0,
                "lease_seconds": 0,
                "lease_expires_at": None,
                "traceparent": TRACE,
                "tracestate": None,
                "creation_time": NOW,
                "update_time": NOW,
                "start_time": None,
                "end_time": None,
                "result": None,
                "delegations": 0,
                "delegated_at": None,
                "holder": None,
                "not_before": None,
                "retry_policy": None,
            },
        ),
        Add(SUMMARIES, {"stage_id": task.stage_id}, {"pending": 1, "total": 1}),
        Enqueue(task.id, task.stage_id, POSITION, event.timestamp),
    ]


@pytest.mark.parametrize(
    ("status", "counter", "attempt"),
    [(TaskStatus.PENDING, "pending", 1), (TaskStatus.RETRIED, "retried", 2)],
)
def test_task_dequeued_moves_the_counter_it_came_from(
    status: TaskStatus, counter: str, attempt: int
) -> None:
    task = task_in(status)
    task.dequeue(at(5), Actor.WORKER, lease_seconds=600)
    event = only_event(task)

    assert entity_ops(event, POSITION) == [
        Update(
            TASKS,
            {"id": task.id},
            stamp(
                event,
                status="IN_PROGRESS",
                start_time=at(5),
                attempt=attempt,
                lease_seconds=600,
                lease_expires_at=at(15),
                holder=None,
                not_before=None,
            ),
        ),
        Add(SUMMARIES, {"stage_id": task.stage_id}, {counter: -1, "in_progress": 1}),
        Delete(QUEUE, {"task_id": task.id}),
    ]


def test_task_completed_counts_a_completion() -> None:
    task = task_in(TaskStatus.IN_PROGRESS)
    task.complete(at(5), Actor.WORKER)
    event = only_event(task)

    assert entity_ops(event, POSITION) == [
        Update(
            TASKS,
            {"id": task.id},
            stamp(event, status="COMPLETED", end_time=at(5), lease_expires_at=None, result=None),
        ),
        Add(SUMMARIES, {"stage_id": task.stage_id}, {"in_progress": -1, "completed": 1}),
    ]


def test_task_retried_goes_back_to_the_end_of_the_queue() -> None:
    task = task_in(TaskStatus.IN_PROGRESS)
    task.fail(at(5), Actor.WORKER)
    event = only_event(task)

    assert entity_ops(event, POSITION) == [
        Update(
            TASKS,
            {"id": task.id},
            stamp(event, status="RETRIED", attempts=1, lease_expires_at=None, not_before=None),
        ),
        Add(SUMMARIES, {"stage_id": task.stage_id}, {"in_progress": -1, "retried": 1}),
        Enqueue(task.id, task.stage_id, POSITION, event.timestamp),
    ]


def test_task_failed_counts_a_failure_and_ends_the_task() -> None:
    task = task_in(TaskStatus.IN_PROGRESS, max_attempts=1)
    task.fail(at(5), Actor.WORKER)
    event = only_event(task)

    assert entity_ops(event, POSITION) == [
        Update(
            TASKS,
            {"id": task.id},
            stamp(event, status="FAILED", attempts=1, end_time=at(5), lease_expires_at=None),
        ),
        Add(SUMMARIES, {"stage_id": task.stage_id}, {"in_progress": -1, "failed": 1}),
    ]


@pytest.mark.parametrize(
    ("status", "counter"),
    [
        (TaskStatus.PENDING, "pending"),
        (TaskStatus.RETRIED, "retried"),
        (TaskStatus.IN_PROGRESS, "in_progress"),
    ],
)
def test_task_aborted_moves_its_count_to_aborted(status: TaskStatus, counter: str) -> None:
    task = task_in(status)
    task.abort(at(5), Actor.SYSTEM, "job aborted")
    event = only_event(task)

    assert entity_ops(event, POSITION) == [
        Update(
            TASKS,
            {"id": task.id},
            stamp(event, status="ABORTED", end_time=at(5), lease_expires_at=None, not_before=None),
        ),
        Add(SUMMARIES, {"stage_id": task.stage_id}, {counter: -1, "aborted": 1}),
        Delete(QUEUE, {"task_id": task.id}),
    ]


def test_task_lease_extended_moves_the_lease_only() -> None:
    task = task_in(TaskStatus.PENDING)
    task.dequeue(at(5), Actor.WORKER, lease_seconds=60)
    task.collect_events()
    task.extend_lease(at(6), Actor.WORKER)
    event = only_event(task)

    assert entity_ops(event, POSITION) == [
        Update(TASKS, {"id": task.id}, stamp(event, lease_expires_at=at(7)))
    ]


def test_task_returned_goes_back_to_pending_and_to_the_end_of_the_queue() -> None:
    task = task_in(TaskStatus.IN_PROGRESS)
    task.give_back(at(5), Actor.WORKER, "shutting down")
    event = only_event(task)

    assert entity_ops(event, POSITION) == [
        Update(
            TASKS,
            {"id": task.id},
            stamp(event, status="PENDING", lease_expires_at=None, not_before=None),
        ),
        Add(SUMMARIES, {"stage_id": task.stage_id}, {"in_progress": -1, "pending": 1}),
        Enqueue(task.id, task.stage_id, POSITION, event.timestamp),
    ]


def test_a_refused_attempt_only_moves_the_tasks_version() -> None:
    task = task_in(TaskStatus.IN_PROGRESS)
    task.refuse(7, "heartbeat", at(5), Actor.WORKER)
    event = only_event(task)

    assert entity_ops(event, POSITION) == [Update(TASKS, {"id": task.id}, stamp(event))]


def test_task_logged_inserts_one_row_per_append_keyed_by_its_log_position() -> None:
    task = task_in(TaskStatus.IN_PROGRESS)
    task.append_log(["started", "done"], at(5), Actor.WORKER)
    event = only_event(task)

    append = {"task_id": task.id, "position": POSITION, "job_id": task.job_id, "attempt": 1}
    assert entity_ops(event, POSITION) == [
        Update(TASKS, {"id": task.id}, stamp(event)),
        Insert(
            LOGS,
            {
                **append,
                "actor": "worker",
                "time": at(5),
                "line_count": 2,
                "lines": ["started", "done"],
            },
        ),
    ]


def test_task_user_metadata_is_replaced_whole() -> None:
    task = task_in(TaskStatus.PENDING)
    task.replace_user_metadata({"c": 3}, at(5), Actor.API)
    event = only_event(task)

    assert entity_ops(event, POSITION) == [
        Update(TASKS, {"id": task.id}, stamp(event, user_metadata={"c": 3}))
    ]


def test_no_task_event_changes_a_summarys_total_except_creation() -> None:
    task = new_task(max_attempts=2)
    task.dequeue(at(1), Actor.WORKER)
    task.fail(at(2), Actor.WORKER)
    task.dequeue(at(3), Actor.WORKER)
    task.fail(at(4), Actor.WORKER)
    other = task_in(TaskStatus.RETRIED)
    other.abort(at(5), Actor.SYSTEM, "job aborted")
    events = [*task.collect_events(), *other.collect_events()]

    for event in events:
        [delta] = [op.deltas for op in entity_ops(event, POSITION) if isinstance(op, Add)]
        counted = sum(v for k, v in delta.items() if k != "total")
        assert counted == delta.get("total", 0), type(event).__name__


# -- the read model as a whole: rows are the aggregates' snapshots --------------------------


@pytest.fixture
def store() -> MemoryStore:
    return MemoryStore()


@pytest.fixture
def jobnik(store: MemoryStore) -> Jobnik:
    return Jobnik(store, Clock())  # type: ignore[arg-type]


def assert_rows_are_snapshots(store: MemoryStore) -> None:
    for table in (JOBS, STAGES, TASKS):
        for row in store.tables.rows[table]:
            assert store.restored(table, row["id"]) == store.replayed(row["id"]), table


def summary(store: MemoryStore, stage: Stage) -> Summary:
    return summary_from_row(store.tables.one(SUMMARIES, stage_id=stage.id))


def test_rows_projected_along_a_workflow_restore_its_aggregates(
    store: MemoryStore, jobnik: Jobnik
) -> None:
    job = jobnik.create_job(NewJob(name="nightly", data={}))
    first, second = (jobnik.add_stage(job.id, NewStage(type="tiles", data={})) for _ in "12")
    a, b = jobnik.add_tasks(first.id, [NewTask(data={}), NewTask(data={})])
    [c] = jobnik.add_tasks(second.id, [NewTask(data={}, max_attempts=1)])
    assert_rows_are_snapshots(store)
    assert store.tables.dequeueable() == [a.id, b.id]

    assert jobnik.dequeue("tiles").id == a.id
    jobnik.report_task(a.id, TaskStatus.FAILED)
    assert store.tables.dequeueable() == [b.id, a.id]
    assert jobnik.dequeue("tiles").id == b.id
    jobnik.report_task(b.id, TaskStatus.COMPLETED)
    assert_rows_are_snapshots(store)
    assert summary(store, first) == Summary(completed=1, retried=1, total=2)

    assert jobnik.dequeue("tiles").id == a.id
    jobnik.report_task(a.id, TaskStatus.COMPLETED)
    assert store.tables.dequeueable() == [c.id]
    assert jobnik.dequeue("tiles").id == c.id
    jobnik.report_task(c.id, TaskStatus.COMPLETED)

    assert_rows_are_snapshots(store)
    final = store.tables.one(JOBS, id=job.id)
    assert (final["status"], final["percentage"]) == ("COMPLETED", 100)
    assert summary(store, second) == Summary(completed=1, total=1)
    assert store.tables.rows[QUEUE] == []


def test_pausing_hides_queued_tasks_and_resuming_shows_them_again(
    store: MemoryStore, jobnik: Jobnik
) -> None:
    job = jobnik.create_job(NewJob(name="nightly", data={}))
    stage = jobnik.add_stage(job.id, NewStage(type="tiles", data={}))
    a, b = jobnik.add_tasks(stage.id, [NewTask(data={}), NewTask(data={})])
    jobnik.dequeue("tiles")

    jobnik.set_job_status(job.id, JobStatus.PAUSED)
    paused = store.tables.dequeueable()
    jobnik.report_task(a.id, TaskStatus.FAILED)  # an in-flight report is still accepted
    still_paused = store.tables.dequeueable()
    jobnik.set_job_status(job.id, JobStatus.PENDING)

    assert (paused, still_paused) == ([], [])
    assert store.tables.dequeueable() == [b.id, a.id]
    assert store.tables.one(JOBS, id=job.id)["status"] == "IN_PROGRESS"
    assert_rows_are_snapshots(store)


def test_a_paused_job_whose_last_task_completes_is_completed(
    store: MemoryStore, jobnik: Jobnik
) -> None:
    job = jobnik.create_job(NewJob(name="nightly", data={}))
    stage = jobnik.add_stage(job.id, NewStage(type="tiles", data={}))
    [task] = jobnik.add_tasks(stage.id, [NewTask(data={})])
    jobnik.dequeue("tiles")
    jobnik.set_job_status(job.id, JobStatus.PAUSED)

    jobnik.report_task(task.id, TaskStatus.COMPLETED)

    assert store.tables.one(JOBS, id=job.id)["status"] == "COMPLETED"
    assert store.tables.one(STAGES, id=stage.id)["status"] == "COMPLETED"
    assert_rows_are_snapshots(store)


def test_a_waiting_stage_is_dequeued_only_after_its_release(
    store: MemoryStore, jobnik: Jobnik
) -> None:
    job = jobnik.create_job(NewJob(name="nightly", data={}))
    stage = jobnik.add_stage(job.id, NewStage(type="tiles", data={}, start_as_waiting=True))
    [task] = jobnik.add_tasks(stage.id, [NewTask(data={})])
    assert store.tables.dequeueable() == []

    jobnik.release_stage(stage.id)

    assert store.tables.dequeueable() == [task.id]
    assert_rows_are_snapshots(store)


def test_a_final_failure_fails_stage_and_job_and_empties_the_queue(
    store: MemoryStore, jobnik: Jobnik
) -> None:
    job = jobnik.create_job(NewJob(name="nightly", data={}))
    first, second = (jobnik.add_stage(job.id, NewStage(type="tiles", data={})) for _ in "12")
    a, _ = jobnik.add_tasks(first.id, [NewTask(data={}, max_attempts=1)] * 2)
    jobnik.add_tasks(second.id, [NewTask(data={})])

    jobnik.dequeue("tiles")
    jobnik.report_task(a.id, TaskStatus.FAILED)

    statuses = [store.tables.one(t, id=i)["status"] for t, i in
                ((STAGES, first.id), (STAGES, second.id), (JOBS, job.id))]  # fmt: skip
    assert statuses == ["FAILED", "CREATED", "FAILED"]
    assert store.tables.dequeueable() == []
    assert summary(store, first) == Summary(pending=1, failed=1, total=2)
    assert_rows_are_snapshots(store)


def test_abort_cascades_to_stages_and_queued_tasks(store: MemoryStore, jobnik: Jobnik) -> None:
    job = jobnik.create_job(NewJob(name="nightly", data={}))
    first, second = (jobnik.add_stage(job.id, NewStage(type="tiles", data={})) for _ in "12")
    running, _queued = jobnik.add_tasks(first.id, [NewTask(data={})] * 2)
    jobnik.add_tasks(second.id, [NewTask(data={})])
    jobnik.dequeue("tiles")

    jobnik.set_job_status(job.id, JobStatus.ABORTED)
    late = jobnik.report_task(running.id, TaskStatus.COMPLETED)

    assert [r["status"] for r in store.tables.rows[STAGES]] == ["ABORTED", "ABORTED"]
    assert late.status == "ABORTED"
    assert summary(store, first) == Summary(aborted=2, total=2)
    assert store.events_of(late.id)[-1].reported == "COMPLETED"
    assert store.tables.rows[QUEUE] == []
    assert_rows_are_snapshots(store)


def test_a_deleted_job_leaves_no_row_behind_but_its_history_index(
    store: MemoryStore, jobnik: Jobnik
) -> None:
    job = jobnik.create_job(NewJob(name="nightly", data={}))
    stage = jobnik.add_stage(job.id, NewStage(type="tiles", data={}))
    [task] = jobnik.add_tasks(stage.id, [NewTask(data={})])
    jobnik.dequeue("tiles")
    jobnik.report_task(task.id, TaskStatus.COMPLETED)

    jobnik.delete_job(job.id)

    kept = {ENTITY_JOBS, JOB_EVENTS}
    assert {t: rows for t, rows in store.tables.rows.items() if t not in kept} == {
        t: [] for t in TABLES if t not in kept
    }
    assert [r["position"] for r in store.tables.rows[JOB_EVENTS]] == list(
        range(1, len(store.log) + 1)
    )
    assert isinstance(store.events_of(job.id)[-1], Job.JobDeleted)


# -- store.batches --------------------------------------------------------------------------


def _positions(events: list[Any]) -> list[int]:
    return list(range(100, 100 + len(events)))


def test_consecutive_events_of_one_type_and_distinct_aggregates_share_a_batch() -> None:
    stage_id = uuid4()
    tasks = [new_task(stage_id=stage_id) for _ in range(3)]
    events = [e for t in tasks for e in t.collect_events()]
    ids = _positions(events)

    runs = list(batches(events, ids))

    assert runs == [[project(e, p) for e, p in zip(events, ids, strict=True)]]
    assert [ops[2] for ops in runs[0]] == [
        Enqueue(t.id, stage_id, p, e.timestamp) for t, p, e in zip(tasks, ids, events, strict=True)
    ]
    assert [ops[-1] for ops in runs[0]] == [
        IndexEvent(t.id, p) for t, p in zip(tasks, ids, strict=True)
    ]


def test_a_new_event_type_starts_a_new_batch() -> None:
    a, b = task_in(TaskStatus.PENDING), task_in(TaskStatus.PENDING)
    a.dequeue(at(1), Actor.WORKER)
    b.dequeue(at(1), Actor.WORKER)
    a.complete(at(2), Actor.WORKER)
    events = [*a.collect_events(), *b.collect_events()]  # dequeued(a), completed(a), dequeued(b)
    ids = _positions(events)

    runs = list(batches(events, ids))

    assert [len(run) for run in runs] == [1, 1, 1]
    assert [ops for run in runs for ops in run] == [
        project(e, p) for e, p in zip(events, ids, strict=True)
    ]


def test_a_repeated_aggregate_splits_a_batch_of_one_type() -> None:
    a, b, c = (task_in(TaskStatus.PENDING) for _ in range(3))
    events = []
    for task, metadata in ((a, {"n": 1}), (b, {"n": 2}), (a, {"n": 3}), (c, {"n": 4})):
        task.replace_user_metadata(metadata, at(1), Actor.API)
        events += task.collect_events()
    ids = _positions(events)

    runs = list(batches(events, ids))

    assert [[ops[0].key["id"] for ops in run] for run in runs] == [[a.id, b.id], [a.id, c.id]]


def test_no_events_make_no_batches() -> None:
    assert list(batches([], [])) == []


def entity_ops(event: Any, position: int) -> list[Any]:
    """The read-model ops of `event` without the history index (tested on its own below) and
    its gates (tests/unit/projections/test_gates.py)."""
    return [op for op in PROJECT[type(event)](event, position) if not isinstance(op, Gate)]


def test_every_event_is_filed_under_its_job_and_creations_map_their_entity() -> None:
    job = job_in(JobStatus.PENDING)
    task = new_task(stage_id=uuid4())
    created = task.collect_events()[0]
    job.replace_user_metadata({"a": 1}, at(3), Actor.API)
    replaced = job.collect_events()[-1]

    created_ops = project(created, 7)
    replaced_ops = project(replaced, 8)

    assert created_ops[-2:] == [
        Insert(ENTITY_JOBS, {"entity_id": task.id, "job_id": task.job_id, "kind": "task"}),
        IndexEvent(task.id, 7),
    ]
    assert replaced_ops[-1] == IndexEvent(job.id, 8)
    assert not any(isinstance(op, Insert) and op.table == ENTITY_JOBS for op in replaced_ops)


# -- archives -------------------------------------------------------------------------------


def test_an_archive_record_removes_each_jobs_rows_and_history_index_and_records_it() -> None:
    jobs = [new_job(Priority.HIGH), new_job()]
    files = [ArchiveFile(j.id, "nightly", location(j.id), "sha256:00", 3, 9, NOW) for j in jobs]
    record = ArchiveBatch.record(files, now=NOW, actor=Actor.SYSTEM)

    ops = entity_ops(only_event(record), POSITION)

    half = len(ops) // 2
    for job, mine in zip(jobs, (ops[:half], ops[half:]), strict=True):
        removed = {op.table for op in mine if isinstance(op, Delete)}
        assert removed == {QUEUE, LOGS, TASKS, SUMMARIES, STAGES, JOBS, ENTITY_JOBS, JOB_EVENTS}
        [insert] = [op for op in mine if isinstance(op, Insert)]
        assert insert == Insert(ARCHIVES, {"job_id": job.id, "position": POSITION})
    assert entity_ops(per_job_record(files[0], NOW), POSITION) == ops[:half]


def test_an_archived_schedule_runs_record_writes_its_fire_key_again() -> None:
    job, schedule_id = new_job(), uuid4()
    fire = FireKey(schedule_id, at(1), "schedule", at(2))
    file = ArchiveFile(job.id, "nightly", location(job.id), "sha256:00", 3, 9, NOW, fire)
    [event] = ArchiveBatch.record([file], now=NOW, actor=Actor.SYSTEM).collect_events()

    ops = entity_ops(event, POSITION)

    key = {"schedule_id": schedule_id, "nominal_time": at(1)}
    assert ops[-2:] == [
        Delete(SCHEDULE_FIRES, key),
        Insert(
            SCHEDULE_FIRES, {**key, "job_id": job.id, "started_by": "schedule", "fired_at": at(2)}
        ),
    ]
    assert ArchiveBatch.JobsArchived.files.fget(event) == [file]  # type: ignore[attr-defined]


def test_a_retention_change_replaces_the_names_period_and_none_removes_it() -> None:
    kept = RetentionChange.set("audit", 3600, now=NOW, actor=Actor.API)
    cleared = RetentionChange.set("audit", None, now=NOW, actor=Actor.API)

    set_ops, clear_ops = entity_ops(only_event(kept), 1), entity_ops(only_event(cleared), 2)

    assert [type(op) for op in set_ops] == [Delete, Insert]
    assert set_ops[1].table == RETENTION
    assert clear_ops == [Delete(RETENTION, {"name": "audit"})]


def test_job_erased_empties_the_user_data_of_the_jobs_rows_and_removes_its_log_lines() -> None:
    job = job_in(JobStatus.FAILED, started=True)
    job.erase(at(5), Actor.API, "asked")
    event = only_event(job)

    ops = entity_ops(event, POSITION)

    tables = {op.table: op for op in ops}
    assert tables[JOBS].values["data"] == {}
    assert tables[STAGES] == Update(STAGES, {"job_id": job.id}, {"data": {}, "user_metadata": {}})
    assert tables[TASKS].values["result"] is None
    assert tables[LOGS] == Delete(LOGS, {"job_id": job.id})


def test_a_job_that_has_not_ended_is_not_erased() -> None:
    job = job_in(JobStatus.IN_PROGRESS, started=True)

    with pytest.raises(JobNotEnded):
        job.erase(at(5), Actor.API, "asked")

    assert job.collect_events() == []
