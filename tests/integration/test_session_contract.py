"""The Session contract (domain/ports.py), one test case run against every implementation.

`SessionContract` holds the tests; each subclass gives them a store: the in-memory double the
unit tests use (tests/unit/memory.py), and the SQL store on SQLite and on PostgreSQL (the
`store` fixture). The state each test starts from is made by the real commands (`Jobnik`).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any
from uuid import uuid4

import pytest

from jobnik.domain.application import Jobnik, NewJob, NewStage, NewTask
from jobnik.domain.commands import utcnow
from jobnik.domain.errors import JobNotFound, StageNotFound, TaskNotFound
from jobnik.domain.ports import Store
from jobnik.domain.principals import Actor
from jobnik.domain.statuses import JobStatus, Priority, TaskStatus
from tests.unit.memory import MemoryStore


class _Boom(Exception):
    pass


def in_queue_order(tasks: list[Any]) -> list[Any]:
    """Task ids as the store lists queued tasks: by creation time, then id."""
    return [t.id for t in sorted(tasks, key=lambda t: (t.created_on, str(t.id)))]


def job_with_tasks(
    app: Jobnik, stage_type: str, n: int, priority: Priority = Priority.MEDIUM
) -> tuple[Any, Any, list[Any]]:
    job = app.create_job(NewJob(name=f"job of {stage_type}", data={}, priority=priority))
    stage = app.add_stage(job.id, NewStage(type=stage_type, data={}))
    tasks = app.add_tasks(stage.id, [NewTask(data={"i": i}) for i in range(n)])
    return job, stage, tasks


class SessionContract:
    """What every Session implementation guarantees."""

    @pytest.fixture
    def app(self, store: Store) -> Jobnik:
        return Jobnik(store)

    def test_loading_an_unknown_id_raises_its_not_found_error(self, store: Store) -> None:
        with store.session(write=False) as s:
            with pytest.raises(JobNotFound):
                s.job(uuid4())
            with pytest.raises(StageNotFound):
                s.stage(uuid4())
            with pytest.raises(TaskNotFound):
                s.task(uuid4())

    def test_a_session_loads_one_object_per_aggregate_as_saved(
        self, store: Store, app: Jobnik
    ) -> None:
        job, stage, [task] = job_with_tasks(app, "load", 1)

        with store.session(write=False) as s:
            loaded = s.task(task.id)
            again = s.task(task.id)
            found_stage, found_job = s.stage(stage.id), s.job(job.id)

        assert loaded is again
        assert (loaded.id, loaded.version, loaded.status) == (task.id, task.version, task.status)
        assert loaded.data == {"i": 0}
        assert (found_stage.id, found_stage.job_id, found_stage.type) == (stage.id, job.id, "load")
        assert (found_job.id, found_job.name) == (job.id, job.name)
        assert found_job.version == job.version + 1  # (its stage was appended since)

    def test_a_write_session_reports_the_position_it_reached(
        self, store: Store, app: Jobnik
    ) -> None:
        job, _, _ = job_with_tasks(app, "position", 1)

        with store.session(write=True) as s:
            before = s.position
            loaded = s.job(job.id)
            loaded.replace_user_metadata({"a": 1}, utcnow(), Actor.API)
            s.save(loaded)
            after = s.position
        with store.session(write=True) as s:
            loaded = s.job(job.id)
            loaded.replace_user_metadata({"a": 2}, utcnow(), Actor.API)
            s.save(loaded)
            later = s.position

        assert before is None
        assert after is not None
        assert later is not None
        assert later > after

    def test_a_session_that_raises_saves_nothing(self, store: Store, app: Jobnik) -> None:
        job, _, _ = job_with_tasks(app, "rollback", 1)

        def change_then_fail() -> None:
            with store.session(write=True) as s:
                loaded = s.job(job.id)
                loaded.replace_user_metadata({"lost": True}, utcnow(), Actor.API)
                s.save(loaded)
                raise _Boom

        with pytest.raises(_Boom):
            change_then_fail()

        with store.session(write=False) as s:
            assert s.job(job.id).user_metadata == {}

    def test_stages_are_found_by_job_and_order(self, store: Store, app: Jobnik) -> None:
        job = app.create_job(NewJob(name="stages", data={}))
        first = app.add_stage(job.id, NewStage(type="a", data={}))
        second = app.add_stage(job.id, NewStage(type="b", data={}))

        with store.session(write=True) as s:
            ordered = [st.id for st in s.stages_of(job.id)]
            at_two, missing = s.stage_at(job.id, second.order), s.stage_at(job.id, 99)

        assert ordered == [first.id, second.id]
        assert at_two is not None
        assert at_two.id == second.id
        assert missing is None

    def test_claims_go_by_priority_then_queue_order_and_only_from_open_jobs(
        self, store: Store, app: Jobnik
    ) -> None:
        _, _, low = job_with_tasks(app, "claim", 2, Priority.LOW)
        _, _, high = job_with_tasks(app, "claim", 2, Priority.HIGH)
        paused, _, _ = job_with_tasks(app, "claim", 1, Priority.VERY_HIGH)
        app.set_job_status(paused.id, JobStatus.PAUSED)
        job_with_tasks(app, "other", 1, Priority.VERY_HIGH)

        claimed = [app.dequeue("claim").id for _ in range(4)]
        with store.session(write=True) as s:
            nothing = s.claim("claim", utcnow())
            never = s.claim("no such type", utcnow())

        assert claimed == [high[0].id, high[1].id, low[0].id, low[1].id]
        assert nothing is None
        assert never is None

    def test_queued_tasks_are_those_waiting_in_creation_order(
        self, store: Store, app: Jobnik
    ) -> None:
        job, _, tasks = job_with_tasks(app, "queued", 3)
        taken = app.dequeue("queued")

        with store.session(write=True) as s:
            queued = [t.id for t in s.queued_tasks(job.id)]

        assert taken.id == tasks[0].id
        assert queued == in_queue_order(tasks[1:])

    def test_a_stages_tasks_are_found_by_status_in_creation_order(
        self, store: Store, app: Jobnik
    ) -> None:
        _, stage, tasks = job_with_tasks(app, "by status", 3)
        taken = app.dequeue("by status")

        with store.session(write=True) as s:
            waiting = [t.id for t in s.tasks_in(stage.id, {"PENDING"})]
            running = [t.id for t in s.tasks_in(stage.id, {"IN_PROGRESS", "COMPLETED"})]
            none = s.tasks_in(stage.id, {"FAILED"})

        assert waiting == in_queue_order([t for t in tasks if t.id != taken.id])
        assert running == [taken.id]
        assert none == []

    def test_a_summary_counts_its_stage_tasks_and_sees_the_sessions_own_saves(
        self, store: Store, app: Jobnik
    ) -> None:
        _, stage, _ = job_with_tasks(app, "summary", 2)
        first = app.dequeue("summary")
        app.report_task(first.id, TaskStatus.COMPLETED, attempt=first.attempt)
        second = app.dequeue("summary")

        with store.session(write=True) as s:
            summary = s.summary(stage.id)
            done_before = s.all_completed(stage.id)
            task = s.task(second.id)
            task.complete(utcnow(), Actor.WORKER)
            s.save(task)
            done_after = s.all_completed(stage.id)
        with store.session(write=False) as s:
            unknown = s.summary(uuid4())

        assert (summary.total, summary.completed, summary.in_progress) == (2, 1, 1)
        assert (done_before, done_after) == (False, True)
        assert unknown.total == 0

    def test_expired_leases_are_found_oldest_first_up_to_a_limit(
        self, store: Store, app: Jobnik
    ) -> None:
        job_with_tasks(app, "lease", 3)
        short = app.dequeue("lease", lease_seconds=10)
        shorter = app.dequeue("lease", lease_seconds=5)
        app.dequeue("lease", lease_seconds=3600)
        later = utcnow() + timedelta(seconds=60)

        with store.session(write=True) as s:
            expired = [t.id for t in s.expired_leases(later, 10)]
            first = [t.id for t in s.expired_leases(later, 1)]
            none = s.expired_leases(utcnow(), 10)

        assert expired == [shorter.id, short.id]
        assert first == [shorter.id]
        assert none == []

    def test_child_jobs_are_counted_by_their_parent_task_and_found_by_job(
        self, store: Store, app: Jobnik
    ) -> None:
        parent, _, _ = job_with_tasks(app, "parent", 1)
        task = app.dequeue("parent")
        child = app.create_job(NewJob(name="child", data={}, parent_task_id=task.id))
        ended = app.create_job(NewJob(name="ended", data={}, parent_task_id=task.id))
        app.set_job_status(ended.id, JobStatus.ABORTED)

        with store.session(write=True) as s:
            counted = s.children_counts(task.id)
            open_children = [j.id for j in s.child_jobs(parent.id)]
            none = s.children_counts(parent.id)  # (a job's id: no task's)

        assert (counted.total, counted.running) == (2, 1)
        assert open_children == [child.id]
        assert (none.total, none.running) == (0, 0)

    def test_stale_delegations_are_tasks_whose_child_jobs_all_ended(
        self, store: Store, app: Jobnik
    ) -> None:
        job_with_tasks(app, "delegating", 2)
        waiting, stale = app.dequeue("delegating"), app.dequeue("delegating")
        for task in (waiting, stale):
            child = app.create_job(NewJob(name="child", data={}, parent_task_id=task.id))
            app.report_task(task.id, TaskStatus.DELEGATED, attempt=task.attempt)
            if task is stale:
                stale_child = child
        with store.session(write=True) as s:  # its child ends without telling its parent
            aborted = s.job(stale_child.id)
            aborted.abort(utcnow(), Actor.SYSTEM, "ended elsewhere")
            s.save(aborted)

        with store.session(write=True) as s:
            found = [t.id for t in s.stale_delegations(utcnow() + timedelta(seconds=1), 10)]
            none = s.stale_delegations(utcnow() - timedelta(days=1), 10)

        assert found == [stale.id]
        assert none == []

    def test_holding_a_jobs_queue_changes_no_answer(self, store: Store, app: Jobnik) -> None:
        job, _, tasks = job_with_tasks(app, "hold", 2)

        with store.session(write=True) as s:
            s.hold_queue(job.id)
            queued = [t.id for t in s.queued_tasks(job.id)]
            claimed = s.claim("hold", utcnow())

        assert queued == in_queue_order(tasks)
        assert claimed is not None
        assert claimed.id == tasks[0].id


class TestMemorySession(SessionContract):
    """The in-memory double (the unit tests' store)."""

    @pytest.fixture
    def store(self) -> Store:
        return MemoryStore()


class TestSqlSession(SessionContract):
    """The SQL store, on SQLite and on PostgreSQL (tests/conftest.py's `store`)."""
