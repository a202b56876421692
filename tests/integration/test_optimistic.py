"""PostgreSQL write sessions load optimistically and take the writer lock late: a read that went
stale before the lock is caught when the lock is taken, nothing of that attempt commits, and the
command runs again on fresh state (the outcome is the one of running the two commands in turn).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from jobnik.domain.application import Jobnik, NewJob, NewStage, NewTask, utcnow
from jobnik.domain.commands import conflicts_retried
from jobnik.domain.errors import ConcurrencyConflict, StaleAttempt, TaskNotFound, TooManyChildJobs
from jobnik.domain.principals import Actor
from jobnik.domain.statuses import JobStatus, Priority, StageStatus, TaskStatus
from jobnik.projections.store.base import SqlStore
from jobnik.projections.store.pgsession import PostgresSession
from jobnik.projections.store.postgres import PostgresStore

# SQLite write sessions hold the lock from BEGIN IMMEDIATE, so nothing they read goes stale:
# these tests are about PostgreSQL's optimistic start (test_positions_match_the_log runs on both).


@pytest.fixture
def pg(pg_store: SqlStore) -> SqlStore:
    return pg_store


def one_task_job(app: Jobnik, stage_type: str = "opt") -> tuple[Any, Any]:
    job = app.create_job(NewJob(name="optimistic", data={}))
    stage = app.add_stage(job.id, NewStage(type=stage_type, data={}))
    app.add_tasks(stage.id, [NewTask(data={})])
    return job, stage


def elsewhere(call: Callable[[], Any]) -> None:
    """Run `call` to its commit on another thread (its own context: no ambient session)."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            call()
        except Exception as e:  # noqa: BLE001 - surfaced below
            errors.append(e)

    t = threading.Thread(target=run)
    t.start()
    t.join(30)
    assert not t.is_alive()
    assert not errors, errors


def interleave_before_lock(
    monkeypatch: pytest.MonkeyPatch, call: Callable[[], Any], times: int = 1
) -> list[int]:
    """The next `times` sessions to take the writer lock first let `call` commit elsewhere."""
    original = PostgresSession._append_events
    ran: list[int] = []

    def append(self: PostgresSession, stored: Any) -> None:
        if not self.locked and self.write and len(ran) < times:
            ran.append(1)
            elsewhere(call)
        original(self, stored)

    monkeypatch.setattr(PostgresSession, "_append_events", append)
    return ran


def test_a_stale_read_conflicts_at_the_lock_and_nothing_of_it_commits(pg: SqlStore) -> None:
    store, jobnik = pg, Jobnik(pg)
    job, _ = one_task_job(jobnik)

    def stale_save() -> None:
        with store.session(write=True) as s:
            loaded = s.job(job.id)
            elsewhere(lambda: jobnik.set_job_status(job.id, JobStatus.PAUSED))
            loaded.change_priority(Priority.VERY_HIGH, jobnik.clock())
            s.save(loaded)

    with pytest.raises(ConcurrencyConflict):
        stale_save()
    with store.session(write=False) as r:
        now = r.job(job.id)
    assert now.status == JobStatus.PAUSED
    assert now.priority == Priority.MEDIUM


def test_a_report_racing_an_abort_runs_again_and_sees_the_abort(
    pg: SqlStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, jobnik = pg, Jobnik(pg)
    job, stage = one_task_job(jobnik)
    task = jobnik.dequeue("opt")
    before = conflicts_retried()
    interleave_before_lock(monkeypatch, lambda: jobnik.set_job_status(job.id, JobStatus.ABORTED))
    done = jobnik.report_task(task.id, TaskStatus.COMPLETED, attempt=task.attempt)
    # In turn: the abort, then the report, which finds the job aborted.
    assert done.status == TaskStatus.ABORTED
    assert conflicts_retried() == before + 1
    with store.session(write=False) as r:
        assert r.stage(stage.id).status == StageStatus.ABORTED
        assert r.summary(stage.id).aborted == 1
        assert r.summary(stage.id).completed == 0


def test_dequeues_racing_for_a_stage_start_it_once(
    pg: SqlStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both dequeues load the PENDING stage; the second to lock finds it started by the first
    and runs again, so the stage and job start once and each task goes to one worker."""
    store, jobnik = pg, Jobnik(pg)
    job = jobnik.create_job(NewJob(name="race", data={}))
    stage = jobnik.add_stage(job.id, NewStage(type="race", data={}))
    jobnik.add_tasks(stage.id, [NewTask(data={}), NewTask(data={})])
    got: list[Any] = []
    before = conflicts_retried()
    interleave_before_lock(monkeypatch, lambda: got.append(jobnik.dequeue("race")))
    got.append(jobnik.dequeue("race"))
    assert len({t.id for t in got}) == 2
    assert conflicts_retried() == before + 1
    with store.session(write=False) as r:
        assert r.stage(stage.id).status == StageStatus.IN_PROGRESS
        assert r.summary(stage.id).in_progress == 2
    history = [store.mapper.to_domain_event(e) for e in store.recorder.select_events(stage.id)]
    assert [type(e).__name__ for e in history].count("StageStarted") == 1


def test_positions_match_the_log(store: SqlStore, jobnik: Jobnik) -> None:
    """Each session's position is its last event's notification id, and the history index and
    the queue carry the ids the events were stored at."""
    job, stage = one_task_job(jobnik)
    head = int(store.recorder.max_notification_id() or 0)
    added = jobnik.add_tasks(stage.id, [NewTask(data={"i": i}) for i in range(3)])
    notes = store.recorder.select_notifications(head + 1, 100)
    assert len(notes) == 3  # three TaskCreated, at consecutive ids
    assert [n.id for n in notes] == list(range(notes[0].id, notes[0].id + 3))
    with store.cursor(write=False) as cur:
        queued = cur.all(
            "SELECT task_id, seq FROM queue_v1 WHERE stage_id = "
            f"{store.dialect.param('s')} ORDER BY seq",
            {"s": store.dialect.dump("stage_id", stage.id)},
        )
        indexed = cur.all(
            f"SELECT position FROM job_events_v1 WHERE job_id = {store.dialect.param('j')} "
            "ORDER BY position",
            {"j": store.dialect.dump("job_id", job.id)},
        )
    by_task = {q["task_id"]: q["seq"] for q in queued}
    assert [by_task[t.id] for t in added] == [n.id for n in notes]
    assert [i["position"] for i in indexed][-3:] == [n.id for n in notes]


def test_the_last_two_reports_racing_complete_the_stage_once(
    pg: SqlStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each report predicts from the summary it read ahead that the stage is not done; the one
    that commits second finds the prediction false at its commit, runs again, and completes
    the stage and the job."""
    store, jobnik = pg, Jobnik(pg)
    job = jobnik.create_job(NewJob(name="last two", data={}))
    stage = jobnik.add_stage(job.id, NewStage(type="last", data={}))
    jobnik.add_tasks(stage.id, [NewTask(data={}), NewTask(data={})])
    a, b = jobnik.dequeue("last"), jobnik.dequeue("last")
    before = conflicts_retried()
    interleave_before_lock(
        monkeypatch, lambda: jobnik.report_task(b.id, TaskStatus.COMPLETED, attempt=b.attempt)
    )
    jobnik.report_task(a.id, TaskStatus.COMPLETED, attempt=a.attempt)
    assert conflicts_retried() == before + 1
    with store.session(write=False) as r:
        assert r.stage(stage.id).status == StageStatus.COMPLETED
        assert r.job(job.id).status == JobStatus.COMPLETED
        assert r.summary(stage.id).completed == 2
    history = [store.mapper.to_domain_event(e) for e in store.recorder.select_events(stage.id)]
    assert [type(e).__name__ for e in history].count("StageCompleted") == 1


def test_a_command_returns_only_once_its_commit_is_flushed(pg: SqlStore) -> None:
    """The locked transaction commits asynchronously (the lock goes at once); the command must
    still not answer before the WAL holding that commit is on disk. The commit record is found in
    the WAL (pg_walinspect) by the xid that wrote the event, so other databases' writes on the
    same server do not disturb the check."""
    jobnik = Jobnik(pg)
    _, stage = one_task_job(jobnik)
    jobnik.add_tasks(stage.id, [NewTask(data={}) for _ in range(9)])
    assert isinstance(pg, PostgresStore)
    with pg.pg.get_connection() as conn:
        conn.autocommit = True
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect")

        def one(sql: str, *params: Any) -> Any:
            row = conn.execute(sql, params).fetchone()
            assert row is not None
            return next(iter(row.values()))

        for _ in range(10):
            before = one("SELECT pg_current_wal_insert_lsn()")
            task = jobnik.dequeue("opt")
            flushed = one("SELECT pg_current_wal_flush_lsn()")  # as the command answered
            assert one("SELECT %s::pg_lsn > %s::pg_lsn", flushed, before), "nothing flushed"
            xid = one(
                f"SELECT xmin::text FROM {pg.events_table} WHERE originator_id = %s "
                "ORDER BY originator_version DESC LIMIT 1",
                task.id,
            )
            commit_end = one(
                "SELECT max(end_lsn) FROM pg_get_wal_records_info_till_end_of_wal(%s) "
                "WHERE xid::text = %s AND resource_manager = 'Transaction' "
                "AND record_type LIKE 'COMMIT%%'",
                before,
                xid,
            )
            assert commit_end is not None, "the command's commit is not in the flushed WAL"
            assert one("SELECT %s::pg_lsn >= %s::pg_lsn", flushed, commit_end)
        conn.autocommit = False


def test_write_sessions_hand_their_connections_back_as_they_found_them(pg: SqlStore) -> None:
    """The library's pool hands out autocommit connections (its VACUUMs and reads rely on it);
    a write session, committed, refused or failed, leaves its connection idle and autocommit."""
    assert isinstance(pg, PostgresStore)
    jobnik = Jobnik(pg)
    one_task_job(jobnik)
    jobnik.dequeue("opt")
    with pytest.raises(TaskNotFound):
        jobnik.dequeue("opt")

    def stale() -> None:
        with pg.session(write=True) as s:
            s.lock()
            s.cur.execute("SELECT jobnik_assert_fresh(0, 1)")

    with pytest.raises(ConcurrencyConflict):
        stale()
    for _ in range(pg.pg.pool.max_size):
        with pg.pg.get_connection() as conn:
            assert conn.autocommit
            assert conn.info.transaction_status.name == "IDLE"
            conn.execute("VACUUM (ANALYZE) queue_v1")


def test_a_rebuild_swap_waits_for_a_session_that_read_ahead(pg: SqlStore) -> None:
    """A write session reads (its read models' ACCESS SHARE locks) before it waits for the event
    table's lock; a rebuild's swap holds that lock and drops the read models. Without one lock
    order that was a deadlock, broken by failing either side; now the swap waits for the session,
    and both succeed."""
    from jobnik.projections.rebuild.bluegreen import rebuild

    jobnik = Jobnik(pg)
    one_task_job(jobnik)
    task = jobnik.dequeue("opt")
    read = threading.Event()
    outcome: dict[str, Any] = {}

    def session() -> None:
        try:
            with pg.session(write=True) as s:
                s.task(task.id)  # read ahead: the read models' ACCESS SHARE locks
                read.set()
                time.sleep(1.5)  # the rebuild reaches its swap meanwhile
                s.lock()  # sent at commit: waits for the event table's lock
            outcome["session"] = "ok"
        except Exception as e:  # noqa: BLE001 - asserted below
            outcome["session"] = repr(e)

    def swap() -> None:
        read.wait(10)
        try:
            rebuild(pg)
            outcome["rebuild"] = "ok"
        except Exception as e:  # noqa: BLE001 - asserted below
            outcome["rebuild"] = repr(e)

    threads = [threading.Thread(target=session), threading.Thread(target=swap)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert outcome == {"session": "ok", "rebuild": "ok"}
    with pg.session(write=False) as r:
        assert r.task(task.id).status == TaskStatus.IN_PROGRESS


HOLD_CASES = ["pause", "abort", "priority", "failing report", "lease sweep", "parent abort"]


@pytest.mark.parametrize("command", HOLD_CASES)
def test_a_command_that_changes_a_jobs_queue_rows_waits_for_a_claim_without_the_writer_lock(
    pg: SqlStore, pg_database_url: str, command: str
) -> None:
    """A dequeue holds its claimed queue row while it waits for the event table's lock. A
    command that changes the job's queue rows while holding that lock would wait for the row:
    a deadlock, which PostgreSQL breaks after a second by failing one side. Such a command
    first waits for the job's claimed rows, before it takes the writer lock."""
    import psycopg

    now = [datetime.now(UTC)]
    jobnik = Jobnik(pg, clock=lambda: now[0])
    parent = None
    if command == "parent abort":  # the claimed task is a child job's
        parent = jobnik.create_job(NewJob(name="parent", data={}))
        parent_stage = jobnik.add_stage(parent.id, NewStage(type="parent", data={}))
        jobnik.add_tasks(parent_stage.id, [NewTask(data={})])
        parent_task = jobnik.dequeue("parent")
    job = jobnik.create_job(
        NewJob(name="hold", data={}, parent_task_id=parent_task.id if parent else None)
    )
    stage = jobnik.add_stage(job.id, NewStage(type="hold", data={}))
    jobnik.add_tasks(stage.id, [NewTask(data={"n": n}, max_attempts=1) for n in range(4)])
    doomed = jobnik.dequeue("hold", lease_seconds=30)  # the failing report's, the sweep's
    claimed = threading.Event()
    finish = threading.Event()
    outcome: dict[str, Any] = {}

    def dequeue_in_flight() -> None:
        try:
            with pg.session(write=True) as s:
                task = s.claim("hold", utcnow())  # FOR UPDATE: its queue row is locked from here
                assert task is not None
                outcome["claimed"] = task.id
                claimed.set()
                finish.wait(30)
                task.dequeue(datetime.now(UTC), Actor.WORKER, 60)
                s.save(task)  # waits for the writer lock
            outcome["dequeue"] = "ok"
        except Exception as e:  # noqa: BLE001 - asserted below
            outcome["dequeue"] = repr(e)

    def run_command() -> None:
        try:
            if command == "pause":
                jobnik.set_job_status(job.id, JobStatus.PAUSED)
            elif command == "abort":
                jobnik.set_job_status(job.id, JobStatus.ABORTED)
            elif command == "priority":
                jobnik.change_priority(job.id, Priority.VERY_HIGH)
            elif command == "failing report":
                jobnik.report_task(doomed.id, TaskStatus.FAILED, attempt=1, reason="boom")
            elif command == "lease sweep":
                now[0] += timedelta(seconds=31)
                assert jobnik.sweep() == 1
            else:
                assert parent is not None
                jobnik.set_job_status(parent.id, JobStatus.ABORTED)
            outcome["command"] = "ok"
        except Exception as e:  # noqa: BLE001 - asserted below
            outcome["command"] = repr(e)

    holder = threading.Thread(target=dequeue_in_flight)
    holder.start()
    assert claimed.wait(10)
    runner = threading.Thread(target=run_command)
    runner.start()
    with psycopg.connect(pg_database_url, autocommit=True) as admin:
        waiting: list[Any] = []
        deadline = time.monotonic() + 10
        while not waiting and time.monotonic() < deadline:
            waiting = admin.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                "AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()"
            ).fetchall()
            time.sleep(0.02)
        assert waiting, "the command did not wait for the claimed row"
        writer_lock = admin.execute(
            "SELECT count(*) FROM pg_locks WHERE pid = %s AND granted "
            "AND relation = 'jobnik_events'::regclass",
            [waiting[0][0]],
        ).fetchone()
    finish.set()
    holder.join(30)
    runner.join(30)

    assert writer_lock == (0,), "it waited for the claimed row while holding the writer lock"
    assert outcome == {"claimed": outcome["claimed"], "dequeue": "ok", "command": "ok"}
    with pg.session(write=False) as r:
        job_now, claimed_task = r.job(job.id), r.task(outcome["claimed"])
    assert claimed_task.status == TaskStatus.IN_PROGRESS
    expected = {
        "pause": JobStatus.PAUSED,
        "abort": JobStatus.ABORTED,
        "priority": JobStatus.IN_PROGRESS,
        "failing report": JobStatus.FAILED,
        "lease sweep": JobStatus.FAILED,
        "parent abort": JobStatus.ABORTED,
    }
    assert job_now.status == expected[command]


def test_a_command_after_a_jobs_change_sees_the_new_job(pg: SqlStore) -> None:
    jobnik = Jobnik(pg)
    job, stage = one_task_job(jobnik)
    jobnik.add_tasks(stage.id, [NewTask(data={})])
    task = jobnik.dequeue("opt")  # read the job before it started it
    jobnik.dequeue("opt")  # read the started job
    jobnik.set_job_status(job.id, JobStatus.ABORTED)
    before = conflicts_retried()
    done = jobnik.report_task(task.id, TaskStatus.COMPLETED, attempt=task.attempt)
    assert done.status == TaskStatus.ABORTED  # the late report path: the job is aborted
    assert conflicts_retried() == before


def test_a_report_after_another_process_aborted_the_job_sees_the_abort(
    pg: SqlStore, other: SqlStore
) -> None:
    """Another process aborts the job between this process's dequeue and its report: the report
    reads the rows as the abort left them."""
    here, there = Jobnik(pg), Jobnik(other)
    job, stage = one_task_job(here)
    task = here.dequeue("opt")
    there.set_job_status(job.id, JobStatus.ABORTED)
    before = conflicts_retried()
    done = here.report_task(task.id, TaskStatus.COMPLETED, attempt=task.attempt)
    assert done.status == TaskStatus.ABORTED  # the late report after the abort
    assert conflicts_retried() == before
    with pg.session(write=False) as r:
        assert r.summary(stage.id).completed == 0
        assert r.summary(stage.id).aborted == 1


def test_a_stale_attempt_is_refused_after_another_process_swept_it(
    pg: SqlStore, other: SqlStore
) -> None:
    now = [datetime.now(UTC)]
    here, there = Jobnik(pg, clock=lambda: now[0]), Jobnik(other, clock=lambda: now[0])
    job = here.create_job(NewJob(name="swept", data={}))
    stage = here.add_stage(job.id, NewStage(type="swept", data={}))
    here.add_tasks(stage.id, [NewTask(data={}, max_attempts=3)])
    task = here.dequeue("swept", lease_seconds=30)
    now[0] += timedelta(seconds=31)
    assert there.sweep() == 1
    before = conflicts_retried()
    with pytest.raises(StaleAttempt):
        here.report_task(task.id, TaskStatus.COMPLETED, attempt=task.attempt)
    assert conflicts_retried() == before
    with pg.session(write=False) as r:
        assert r.task(task.id).status == TaskStatus.RETRIED
    events = pg.recorder.select_events(task.id)
    assert type(pg.mapper.to_domain_event(events[-1])).__name__ == "TaskAttemptRefused"


def test_a_report_in_one_process_after_the_last_other_in_another_completes_the_stage_once(
    pg: SqlStore, other: SqlStore
) -> None:
    here, there = Jobnik(pg), Jobnik(other)
    job = here.create_job(NewJob(name="counts", data={}))
    stage = here.add_stage(job.id, NewStage(type="counts", data={}))
    here.add_tasks(stage.id, [NewTask(data={}), NewTask(data={})])
    a, b = here.dequeue("counts"), there.dequeue("counts")
    there.report_task(b.id, TaskStatus.COMPLETED, attempt=b.attempt)
    here.report_task(a.id, TaskStatus.COMPLETED, attempt=a.attempt)
    with pg.session(write=False) as r:
        assert r.stage(stage.id).status == StageStatus.COMPLETED
        assert r.job(job.id).status == JobStatus.COMPLETED
    history = [pg.mapper.to_domain_event(e) for e in pg.recorder.select_events(stage.id)]
    assert [type(e).__name__ for e in history].count("StageCompleted") == 1


def test_a_child_job_created_while_another_waits_for_the_lock_counts_toward_the_bound(
    pg: SqlStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The count of a task's children is taken under the writer lock: a child committed after
    this creation loaded the parent task, before it locked, is counted."""
    jobnik = Jobnik(pg, max_child_jobs=1)
    one_task_job(jobnik, "parent")
    parent = jobnik.dequeue("parent")
    assert parent is not None
    child = NewJob(name="child", data={}, parent_task_id=parent.id)
    made: list[Any] = []
    interleave_before_lock(monkeypatch, lambda: made.append(jobnik.create_job(child)))

    with pytest.raises(TooManyChildJobs):
        jobnik.create_job(child)

    with pg.session(write=False) as r:
        assert r.children_counts(parent.id).total == 1
    assert len(made) == 1
