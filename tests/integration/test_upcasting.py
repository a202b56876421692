from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import uuid4

from eventsourcing.persistence import StoredEvent

from jobnik.domain.application import NO_TRACE
from jobnik.domain.jobs import Job
from jobnik.domain.principals import Actor
from jobnik.domain.stages import Stage
from jobnik.domain.statuses import DEFAULT_LEASE_SECONDS, ERROR, Priority, TaskStatus
from jobnik.domain.tasks import Task
from jobnik.projections.startup import migrate
from jobnik.projections.store import migrations
from jobnik.projections.store.backends import open_store
from jobnik.projections.store.base import SqlStore
from jobnik.projections.store.config import library_env
from jobnik.projections.store.migrations import MIGRATIONS

# What the first release wrote for these events: no lease fields, no cause, no class_version.
V2_ONLY = {
    Job.JobCreated: ("mode", "parent_task_id", "parent_job_id"),
    Job.StageAppended: ("completion",),
    Stage.StageAdded: ("completion", "failure_patterns"),
    Task.TaskDequeued: ("lease_seconds", "lease_expires_at"),
    Task.TaskRetried: ("cause",),
    Task.TaskFailed: ("cause",),
}


def as_first_release_wrote_it(store: SqlStore, event: Any) -> StoredEvent:
    stored = store.mapper.to_stored_event(event)
    dropped = V2_ONLY.get(type(event))
    if not dropped:
        return stored
    state = store.mapper.transcoder.decode(stored.state)
    for name in (*dropped, "class_version"):
        state.pop(name)
    return StoredEvent(
        stored.originator_id,
        stored.originator_version,
        stored.topic,
        store.mapper.transcoder.encode(state),
    )


def first_release_log(store: SqlStore) -> tuple[list[StoredEvent], Task]:
    """A job whose task failed once (RETRIED) and is in progress again, as v1 events."""
    now = datetime(2026, 1, 1, tzinfo=UTC)
    job = Job.create(
        name="old",
        data={},
        priority=Priority.MEDIUM,
        user_metadata={},
        traceparent=NO_TRACE,
        tracestate=None,
        now=now,
    )
    stage_id = uuid4()
    job.append_stage(stage_id, now, Actor.API)
    stage = Stage.add(
        id=stage_id,
        job_id=job.id,
        order=1,
        type="old",
        data={},
        user_metadata={},
        traceparent=NO_TRACE,
        tracestate=None,
        start_as_waiting=False,
        previous_completed=False,
        now=now,
    )
    task = Task.create(
        stage_id=stage.id,
        job_id=job.id,
        stage_type="old",
        data={},
        user_metadata={},
        max_attempts=3,
        traceparent=NO_TRACE,
        tracestate=None,
        now=now,
    )
    task.dequeue(now + timedelta(seconds=1), Actor.WORKER)
    stage.start(now + timedelta(seconds=1), Actor.SYSTEM)
    job.start(now + timedelta(seconds=1), Actor.SYSTEM)
    task.fail(now + timedelta(seconds=2), Actor.WORKER)
    task.dequeue(now + timedelta(seconds=3), Actor.WORKER)
    j, s, t = job.collect_events(), stage.collect_events(), task.collect_events()
    events = [*j[:2], s[0], *t[:2], s[1], j[2], *t[2:]]  # the order the commands saved them
    return [as_first_release_wrote_it(store, e) for e in events], task


def test_events_stored_by_the_first_release_upgrade_and_load(database_url: str) -> None:
    env = library_env({"JOBNIK_DATABASE_URL": database_url})
    old = open_store(env)
    old.create_tables()
    migrations.apply(old, until=1)  # the first release's schema (and no registry then)
    with old.cursor(write=True) as cur:  # drop the scratch rows: the log is what was stored
        for table in ("queue_v1", "tasks_v1", "summaries_v1", "stages_v1", "jobs_v1"):
            cur.execute(f"DELETE FROM {table}")
    log, task = first_release_log(old)
    old.recorder.insert_events(log)
    old.close()

    store = open_store(env)
    applied = migrate(store)  # the later ones, then a rebuild through the upcasters
    notes = store.recorder.select_notifications(1, 100)
    loaded = [store.mapper.to_domain_event(n) for n in notes]
    with store.session(write=False) as s:
        row = s.task(task.id)
        job, stage = s.job(row.job_id), s.stage(row.stage_id)

    assert applied == [m.version for m in MIGRATIONS[1:]]
    assert [vars(store.decode(n)) for n in notes] == [vars(e) for e in loaded]  # upcast alike
    dequeued = [e for e in loaded if isinstance(e, Task.TaskDequeued)]
    assert [e.lease_seconds for e in dequeued] == [DEFAULT_LEASE_SECONDS] * 2
    assert dequeued[1].lease_expires_at == dequeued[1].timestamp + timedelta(
        seconds=DEFAULT_LEASE_SECONDS
    )
    [retried] = [e for e in loaded if isinstance(e, Task.TaskRetried)]
    assert retried.cause == ERROR
    assert (row.status, row.attempts, row.attempt) == (TaskStatus.IN_PROGRESS, 1, 2)
    assert row.lease_expires_at == dequeued[1].lease_expires_at
    assert store.recorder.select_notifications(1, 100)[-1].state.count(b"class_version") == 0
    [created] = [e for e in loaded if isinstance(e, Job.JobCreated)]
    assert (created.mode, created.parent_task_id, created.parent_job_id) == ("runOnce", None, None)
    assert (job.mode, job.parent_task_id, job.completion_stages, job.finishing) == (
        "runOnce",
        None,
        0,
        False,
    )
    assert (stage.completion, stage.failure_patterns) == (False, [])
    assert (row.result, row.delegations, row.delegated_at) == (None, 0, None)
    store.close()


def test_a_completion_stored_before_results_loads_with_no_result(database_url: str) -> None:
    store = open_store(library_env({"JOBNIK_DATABASE_URL": database_url}))
    now = datetime(2026, 1, 1, tzinfo=UTC)
    task = Task.create(
        stage_id=uuid4(),
        job_id=uuid4(),
        stage_type="old",
        data={},
        user_metadata={},
        max_attempts=1,
        traceparent=NO_TRACE,
        tracestate=None,
        now=now,
    )
    task.dequeue(now, Actor.WORKER)
    task.complete(now + timedelta(seconds=1), Actor.WORKER, {"n": 1})
    completed = task.collect_events()[-1]
    stored = store.mapper.to_stored_event(completed)
    state = store.mapper.transcoder.decode(stored.state)
    del state["result"], state["class_version"]  # as the release before results wrote it
    old = StoredEvent(
        stored.originator_id, stored.originator_version, stored.topic,
        store.mapper.transcoder.encode(state),
    )  # fmt: skip

    loaded = store.mapper.to_domain_event(old)

    assert isinstance(loaded, Task.TaskCompleted)
    assert (loaded.result, loaded.attempt) == (None, 1)
    store.close()
