from __future__ import annotations

import multiprocessing
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from typing import Any
from uuid import UUID

import pytest

from jobnik.domain.application import NO_TRACE, Jobnik, NewJob, NewStage, NewTask, utcnow
from jobnik.domain.errors import JobNotFound, TaskNotFound
from jobnik.domain.jobs import Job
from jobnik.domain.ports import Summary
from jobnik.domain.statuses import JobStatus, Priority, StageStatus, TaskStatus
from jobnik.projections.inline.tables import JOBS
from jobnik.projections.startup import migrate
from jobnik.projections.store.backends import open_store
from jobnik.projections.store.base import SqlStore
from jobnik.projections.store.config import library_env
from jobnik.projections.store.migrations import MIGRATIONS
from jobnik.projections.store.pgsession import PostgresSession
from jobnik.projections.store.session import SqlSession

ALL_VERSIONS = [m.version for m in MIGRATIONS]
TASKS = 2000
WORKERS = 8


def store_on(env: dict[str, str]) -> closing[SqlStore]:
    return closing(open_store(library_env(env)))


def new_job(name: str) -> Job:
    return Job.create(
        name=name,
        data={},
        priority=Priority.MEDIUM,
        user_metadata={},
        traceparent=NO_TRACE,
        tracestate=None,
        now=utcnow(),
    )


def migrate_in_child(env: dict[str, str], start: Any, results: Any) -> None:
    """Runs in a spawned process: wait for the others, then migrate with a store of its own."""
    start.wait(timeout=60)
    try:
        with store_on(env) as store:
            results.put(("ok", migrate(store)))
    except Exception as e:  # noqa: BLE001 - reported to the parent, which fails the test
        results.put(("error", f"{type(e).__name__}: {e}"))


def test_migrating_twice_is_harmless(env: dict[str, str]) -> None:
    with store_on(env) as store:
        first = migrate(store)
        job = Jobnik(store).create_job(NewJob(name="kept", data={"a": 1}))

    with store_on(env) as store:
        second, third = migrate(store), migrate(store)
        with store.session(write=False) as s:
            kept = s.job(job.id)

    assert first == ALL_VERSIONS
    assert second == third == []
    assert (kept.name, kept.data, kept.version) == ("kept", {"a": 1}, job.version)


@pytest.mark.slow
def test_four_processes_migrating_at_once_all_succeed(env: dict[str, str]) -> None:
    ctx = multiprocessing.get_context("spawn")
    start, results = ctx.Barrier(4), ctx.Queue()
    processes = [ctx.Process(target=migrate_in_child, args=(env, start, results)) for _ in range(4)]

    for p in processes:
        p.start()
    outcomes = [results.get(timeout=120) for _ in processes]
    for p in processes:
        p.join(timeout=60)

    assert [p.exitcode for p in processes] == [0, 0, 0, 0]
    assert [kind for kind, _ in outcomes] == ["ok"] * 4, outcomes
    assert sorted(applied for _, applied in outcomes) == [[], [], [], ALL_VERSIONS]
    with store_on(env) as store:
        job = Jobnik(store).create_job(NewJob(name="after", data={}))
        with store.session(write=False) as s:
            assert s.job(job.id).name == "after"


def test_a_command_that_raises_midway_leaves_neither_events_nor_rows(store: SqlStore) -> None:
    before = store.log_app.recorder.max_notification_id()
    job = new_job("doomed")
    seen_inside: list[dict[str, Any]] = []

    def doomed_command() -> None:
        with store.session(write=True) as s:
            s.save(job)
            seen_inside.extend(s.cur.all(f"SELECT id FROM {JOBS}"))
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        doomed_command()

    assert [row["id"] for row in seen_inside] == [job.id]
    assert store.log_app.recorder.max_notification_id() == before
    assert store.log_app.recorder.select_events(job.id) == []
    with store.session(write=False) as s:
        assert s.cur.all(f"SELECT id FROM {JOBS}") == []
        with pytest.raises(JobNotFound):
            s.job(job.id)


def test_a_command_inside_an_open_write_session_joins_its_transaction(
    jobnik: Jobnik, store: SqlStore
) -> None:
    before = store.log_app.recorder.max_notification_id()
    created: list[Job] = []

    def fails_after_the_command() -> None:
        with store.session(write=True):
            created.append(jobnik.create_job(NewJob(name="doomed", data={})))
            raise RuntimeError("after the command")

    with pytest.raises(RuntimeError, match="after"):
        fails_after_the_command()
    (doomed,) = created
    after_rollback = store.log_app.recorder.max_notification_id()
    with store.session(write=True) as outer:
        kept = jobnik.create_job(NewJob(name="kept", data={}))
        position = outer.position

    assert after_rollback == before
    assert store.log_app.recorder.select_events(doomed.id) == []
    assert position == store.log_app.recorder.max_notification_id()
    with store.session(write=False) as s:
        assert s.job(kept.id).name == "kept"
        with pytest.raises(JobNotFound):
            s.job(doomed.id)


@pytest.mark.slow
def test_eight_workers_dequeue_each_of_2000_tasks_exactly_once(
    jobnik: Jobnik, store: SqlStore
) -> None:
    job = jobnik.create_job(NewJob(name="bulk", data={}))
    stage = jobnik.add_stage(job.id, NewStage(type="bulk-convert", data={}))
    created = jobnik.add_tasks(stage.id, [NewTask(data={"n": n}) for n in range(TASKS)])

    def worker() -> list[UUID]:
        mine: list[UUID] = []
        while True:
            try:
                task = jobnik.dequeue("bulk-convert")
            except TaskNotFound:
                return mine
            mine.append(task.id)
            jobnik.report_task(task.id, TaskStatus.COMPLETED)

    with ThreadPoolExecutor(max_workers=WORKERS) as pool:
        futures = [pool.submit(worker) for _ in range(WORKERS)]
        per_worker = [f.result() for f in futures]

    dequeued = [task_id for ids in per_worker for task_id in ids]
    assert len(dequeued) == TASKS
    assert len(set(dequeued)) == TASKS
    assert set(dequeued) == {t.id for t in created}
    with store.session(write=False) as s:
        summary, final_stage, final_job = s.summary(stage.id), s.stage(stage.id), s.job(job.id)
    assert summary == Summary(completed=TASKS, total=TASKS)
    assert final_stage.status == StageStatus.COMPLETED
    assert (final_job.status, final_job.percentage) == (JobStatus.COMPLETED, 100)


def test_a_sweep_that_finds_no_expired_lease_opens_no_write_session(
    store: SqlStore, jobnik: Jobnik, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = jobnik.create_job(NewJob(name="idle sweep", data={}))
    stage = jobnik.add_stage(job.id, NewStage(type="idle", data={}))
    jobnik.add_tasks(stage.id, [NewTask(data={})])
    jobnik.dequeue("idle", lease_seconds=600)
    opened: list[bool] = []
    original = SqlStore.session

    def session(self: SqlStore, *, write: bool) -> Any:
        opened.append(write)
        return original(self, write=write)

    monkeypatch.setattr(SqlStore, "session", session)
    assert jobnik.sweep() == 0
    assert opened == [False]  # one look, no writer lock


def test_a_write_session_sends_its_closing_checks_once(
    store: SqlStore, jobnik: Jobnik, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A session's last checks (a claim's limits, a report's stage completion) are sent when it
    closes, and it closes once: run twice, each check would cost the database a statement more."""
    job = jobnik.create_job(NewJob(name="closing", data={}))
    stage = jobnik.add_stage(job.id, NewStage(type="closing", data={}))
    jobnik.add_tasks(stage.id, [NewTask(data={})])
    closed: list[SqlSession] = []  # (held: a freed session's id could be the next one's)
    for kind in (SqlSession, PostgresSession):
        monkeypatch.setattr(kind, "close", counted(kind.close, closed))
    task = jobnik.dequeue("closing")
    jobnik.report_task(task.id, TaskStatus.COMPLETED, attempt=task.attempt)
    assert len(closed) == 2  # a session each, each closed once
    assert closed[0] is not closed[1]


def counted(close: Any, closed: list[SqlSession]) -> Any:
    """`close`, noting each session it closes."""

    def wrapper(self: SqlSession) -> None:
        closed.append(self)
        close(self)

    return wrapper
