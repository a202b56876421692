"""Retention and archives on both backends, with a controlled clock: an archive run archives
exactly the jobs past their period, their history is read from the archive, archives verify
against their records, the read models that span jobs do not change (nor after a rebuild), and a
run interrupted before its commit leaves every job live."""

from __future__ import annotations

import gzip
import json
import random
import threading
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import pytest

from jobnik.api import archives as archives_module
from jobnik.api.archives import Archiver, Run
from jobnik.api.sweeper import Sweeper
from jobnik.domain.application import Jobnik, NewJob, NewStage, NewTask
from jobnik.domain.archives import ArchiveFile, RetentionCommands, location
from jobnik.domain.errors import ArchiveUnreachable, InvalidRetentionPeriod, JobNotFound
from jobnik.domain.principals import Actor
from jobnik.domain.statuses import JobStatus, TaskStatus
from jobnik.projections.catchup import tracking
from jobnik.projections.catchup.activity import COUNTERS
from jobnik.projections.catchup.registry import CATCH_UP
from jobnik.projections.catchup.runner import catch_up
from jobnik.projections.queries.archives import Candidate, retention
from jobnik.projections.queries.audit import Audit
from jobnik.projections.queries.catchup_views import CatchUpViews
from jobnik.projections.queries.views import Views
from jobnik.projections.rebuild import archiving, parallel, seeds
from jobnik.projections.rebuild.bluegreen import rebuild
from jobnik.projections.rebuild.verify import verify
from jobnik.projections.store.base import SqlStore

from ..unit.builders import per_job_record
from .test_rebuild import random_workload

START = datetime(2026, 7, 1, 12, 0, tzinfo=UTC)
DAY = 24 * 3600


class Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def engine(store: SqlStore, clock: Clock) -> Jobnik:
    return Jobnik(store, clock=clock)


@pytest.fixture
def archiver(store: SqlStore, clock: Clock, tmp_path: Path) -> Archiver:
    return Archiver(store, tmp_path / "archive", 7 * DAY, clock=clock)


@pytest.fixture(autouse=True)
def archive_dir(tmp_path: Path) -> None:
    (tmp_path / "archive").mkdir()


def settle(store: SqlStore) -> None:
    for projection in CATCH_UP:
        while catch_up(store, projection, 7):
            pass


def ended_job(engine: Jobnik, name: str, outcome: str = "COMPLETED", tasks: int = 2) -> UUID:
    job = engine.create_job(NewJob(name=name, data={"for": name}))
    stage = engine.add_stage(job.id, NewStage(type=f"{name}-work", data={}))
    engine.add_tasks(stage.id, [NewTask(data={"i": i}, max_attempts=1) for i in range(tasks)])
    if outcome == "ABORTED":
        engine.set_job_status(job.id, JobStatus.ABORTED, reason="not needed")
        return job.id
    if outcome == "FAILED":
        task = engine.dequeue(f"{name}-work")
        engine.report_task(task.id, TaskStatus.FAILED, attempt=task.attempt, fatal=True)
        return job.id
    for _ in range(tasks):
        task = engine.dequeue(f"{name}-work")
        engine.report_task(task.id, TaskStatus.COMPLETED, attempt=task.attempt)
    return job.id


def spanning(store: SqlStore) -> dict[str, list[dict[str, Any]]]:
    """Every row of every catch-up projection (the read models that span jobs)."""
    with store.cursor(write=False) as cur:
        return {
            t: cur.all(f"SELECT * FROM {t} ORDER BY {', '.join(p.keys[t])}")
            for p in CATCH_UP
            for t in p.tables
        }


# The catch-up tables whose rows are one job's (by its `job_id`), and those of one of its tasks
# (by its stage): an archived job's `JobArchived` removes them.
PER_JOB: frozenset[str] = frozenset(
    {
        "run_stats_v1_jobs",
        "run_stats_v1_stages",
        "last_status_v1_jobs",
        "operations_v1_stages",
        "operations_v1_jobs",
        "activity_v1_stages",
        "activity_v1_job_minutes",
        "schedule_runs_v1",
    }
)
PER_TASK: frozenset[str] = frozenset({"operations_v1_leases"})


def without(
    tables: dict[str, list[dict[str, Any]]], archived: list[UUID], at: datetime | None = None
) -> dict[str, list[dict[str, Any]]]:
    """`tables` without the per-job rows an archived job's record removes, and with its queued
    tasks gone from their stage types' activity at `at`, when it was archived."""
    gone = set(archived)
    stages = {r["stage_id"] for r in tables["operations_v1_stages"] if r["job_id"] in gone}

    def kept(table: str, row: dict[str, Any]) -> bool:
        if table in PER_JOB:
            return row["job_id"] not in gone
        return table not in PER_TASK or row["stage_id"] not in stages

    out = {t: [r for r in rows if kept(t, r)] for t, rows in tables.items()}
    left: Counter[str] = Counter()
    for r in tables["activity_v1_stages"]:
        if r["job_id"] in gone:
            left[r["stage_type"]] += r["queued"]
    if not +left:
        return out
    assert at is not None
    minute = int(at.timestamp() // 60)
    out["activity_v1_types"] = [
        {**r, "queued": r["queued"] - left[r["stage_type"]]} for r in out["activity_v1_types"]
    ]
    rows = {(r["stage_type"], r["epoch_minute"]): dict(r) for r in out["activity_v1_minutes"]}
    for stage_type, n in (+left).items():
        zero = {"stage_type": stage_type, "epoch_minute": minute, **dict.fromkeys(COUNTERS, 0)}
        rows.setdefault((stage_type, minute), zero)["queued_change"] -= n
    out["activity_v1_minutes"] = [rows[k] for k in sorted(rows)]
    return out


def live_history(store: SqlStore, job_id: UUID) -> list[int]:
    return [e.position for e in Audit(store).job_history(job_id, 0, 1000).items]


def test_an_archive_run_archives_exactly_the_jobs_ended_more_than_the_period_ago(
    store: SqlStore, engine: Jobnik, clock: Clock, archiver: Archiver
) -> None:
    old = ended_job(engine, "nightly")
    aborted = ended_job(engine, "nightly", "ABORTED")
    deleted = ended_job(engine, "cleanup", "FAILED")
    engine.delete_job(deleted, reason="tidy")
    clock.advance(6 * DAY)
    recent = ended_job(engine, "nightly")
    running = engine.create_job(NewJob(name="nightly", data={})).id
    clock.advance(2 * DAY)
    settle(store)

    dry = archiver.run(dry_run=True)
    run = archiver.run()

    assert {c.job_id for c in dry.due} == {old, aborted, deleted}
    assert set(run.archived) == {old, aborted, deleted}
    for job_id in (old, aborted, deleted):
        with pytest.raises(JobNotFound):
            Audit(store).job_history(job_id)
        assert archiver.record(job_id) is not None
    assert live_history(store, recent)
    assert live_history(store, running)
    assert archiver.run().archived == []


def test_a_child_job_stays_live_while_its_parent_job_runs_for_its_task_to_read_it(
    store: SqlStore, engine: Jobnik, clock: Clock, archiver: Archiver
) -> None:
    parent = engine.create_job(NewJob(name="plan", data={}))
    stage = engine.add_stage(parent.id, NewStage(type="plan-work", data={}))
    engine.add_tasks(stage.id, [NewTask(data={})])
    task = engine.dequeue("plan-work")
    child = engine.create_job(NewJob(name="part", data={}, parent_task_id=task.id))
    part = engine.add_stage(child.id, NewStage(type="part-work", data={}))
    engine.add_tasks(part.id, [NewTask(data={}, max_attempts=1)])
    engine.report_task(task.id, TaskStatus.DELEGATED, attempt=task.attempt)
    work = engine.dequeue("part-work")
    engine.report_task(work.id, TaskStatus.FAILED, attempt=work.attempt)  # the child fails
    clock.advance(8 * DAY)
    settle(store)

    assert archiver.run().archived == []  # the parent's task is queued again to read it
    assert [c.job.id for c in Views(store).children(task.id)] == [child.id]

    again = engine.dequeue("plan-work")
    engine.report_task(again.id, TaskStatus.COMPLETED, attempt=again.attempt)
    clock.advance(8 * DAY)
    settle(store)
    assert set(archiver.run().archived) == {parent.id, child.id}


def test_every_transaction_locks_the_catch_up_projections_rows_in_name_order(
    store: SqlStore,
    engine: Jobnik,
    clock: Clock,
    archiver: Archiver,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # (a catch-up round locks the rows of the projections it moves in name order: a transaction
    # that locked them in another order could wait for it crosswise, a deadlock on PostgreSQL)
    locks: list[tuple[object, list[str]]] = []  # (the cursors kept: one per transaction)
    real = tracking.locked

    def spy(cur: Any, names: Any) -> dict[str, int]:
        locks.append((cur, list(names)))
        return real(cur, names)

    monkeypatch.setattr(tracking, "locked", spy)
    ended_job(engine, "nightly")
    clock.advance(8 * DAY)

    assert archiver.run().archived  # (its commit brings every projection to the head)
    assert verify(store) == []  # (so does its comparison's snapshot)

    by_transaction: dict[int, list[str]] = {}
    for cur, names in locks:
        by_transaction.setdefault(id(cur), []).extend(names)
    assert any(len(names) == len(CATCH_UP) for names in by_transaction.values())
    assert all(names == sorted(names) for names in by_transaction.values()), by_transaction


def test_a_run_that_archives_the_logs_newest_events_hands_none_of_their_positions_out_again(
    store: SqlStore, engine: Jobnik, clock: Clock, archiver: Archiver
) -> None:
    first = ended_job(engine, "nightly")
    clock.advance(8 * DAY)
    settle(store)
    with store.cursor(write=False) as cur:
        head = store.log_head(cur)

    assert archiver.run().archived == [first]
    later = ended_job(engine, "nightly")
    settle(store)

    assert min(live_history(store, later)) > head
    assert verify(store) == []


def test_an_archived_jobs_history_is_read_from_its_archive_as_it_was(
    store: SqlStore, engine: Jobnik, clock: Clock, archiver: Archiver
) -> None:
    job_id = ended_job(engine, "nightly", tasks=3)
    before = Audit(store).job_history(job_id, 0, 1000).items
    clock.advance(8 * DAY)
    settle(store)

    archiver.run()

    lines = list(archiver.lines(job_id))
    assert [json.loads(line)["position"] for line in lines] == [e.position for e in before]
    assert [json.loads(line)["type"] for line in lines] == [e.type for e in before]
    first, cursor = archiver.page(job_id, 0, 2)
    rest, end = archiver.page(job_id, cursor or 0, 100)
    assert [*first, *rest] == lines
    assert end is None


def test_an_archived_jobs_run_statistics_leave_with_it_and_are_answered_archived(
    store: SqlStore, engine: Jobnik, clock: Clock, archiver: Archiver
) -> None:
    archived = ended_job(engine, "nightly")
    clock.advance(8 * DAY)
    kept = ended_job(engine, "nightly")
    settle(store)
    views = CatchUpViews(store)
    assert views.job_statistics(archived).counts.successful == 2

    assert archiver.run().archived == [archived]
    settle(store)

    with pytest.raises(ArchiveUnreachable, match="history"):
        views.job_statistics(archived)
    assert views.job_statistics(kept).counts.successful == 2
    with pytest.raises(JobNotFound):
        views.job_statistics(uuid4())
    with store.cursor(write=False) as cur:
        assert not cur.all("SELECT * FROM run_stats_v1_stages s JOIN archives_v2 a USING (job_id)")
    assert verify(store) == []


def test_verify_checks_every_archive_against_its_record(
    store: SqlStore, engine: Jobnik, clock: Clock, archiver: Archiver, tmp_path: Path
) -> None:
    kept, broken = ended_job(engine, "a"), ended_job(engine, "b")
    clock.advance(8 * DAY)
    settle(store)
    archiver.run()
    assert list(archiver.verify()) == []
    record = archiver.record(broken)
    assert record is not None

    path = tmp_path / "archive" / record.file.location
    path.write_bytes(gzip.compress(b'{"position": 1}\n'))

    problems = list(archiver.verify())
    assert [(p.job_id, "checksum" in p.problem) for p in problems] == [(broken, True)]
    assert archiver.record(kept) is not None


def test_an_unreachable_archive_is_named(
    store: SqlStore, engine: Jobnik, clock: Clock, archiver: Archiver, tmp_path: Path
) -> None:
    job_id = ended_job(engine, "nightly")
    clock.advance(8 * DAY)
    settle(store)
    archiver.run()
    record = archiver.record(job_id)
    assert record is not None
    (tmp_path / "archive" / record.file.location).unlink()

    with pytest.raises(ArchiveUnreachable) as refused:
        archiver.page(job_id, 0, 10)

    assert record.file.location in refused.value.message


def test_archiving_changes_no_read_model_that_spans_jobs_nor_does_a_rebuild_after_it(
    store: SqlStore, engine: Jobnik, clock: Clock, archiver: Archiver
) -> None:
    for name, outcome in [("a", "COMPLETED"), ("a", "FAILED"), ("b", "ABORTED")]:
        ended_job(engine, name, outcome)
    clock.advance(8 * DAY)
    ended_job(engine, "a")
    engine.create_job(NewJob(name="b", data={}))
    settle(store)
    before = spanning(store)

    archived = archiver.run().archived
    settle(store)
    after = spanning(store)
    differences = verify(store)
    rebuild(store)
    rebuilt = spanning(store)

    assert len(archived) == 3
    assert after == without(before, archived, clock.now) != before
    assert differences == []
    assert rebuilt == after


class PerJobRecords:
    """Archive records as earlier releases wrote them, one per job, saved as one aggregate."""

    def __init__(self, events: list[Any]) -> None:
        self.events, self.id = events, events[0].originator_id

    @classmethod
    def record(cls, files: list[ArchiveFile], *, now: datetime, actor: Any) -> PerJobRecords:
        return cls([per_job_record(f, now) for f in files])

    def collect_events(self) -> list[Any]:
        events, self.events = self.events, []
        return events


def test_records_written_one_per_job_read_as_before_and_a_rebuild_after_them_is_exact(
    store: SqlStore, engine: Jobnik, clock: Clock, archiver: Archiver, monkeypatch: Any
) -> None:
    first = [ended_job(engine, "a", "FAILED"), ended_job(engine, "b")]
    clock.advance(8 * DAY)
    settle(store)
    with monkeypatch.context() as older:
        older.setattr(archiving, "ArchiveBatch", PerJobRecords)
        assert sorted(archiver.run().archived, key=str) == sorted(first, key=str)
    second = ended_job(engine, "a")
    clock.advance(8 * DAY)
    assert archiver.run().archived == [second]
    settle(store)
    live = spanning(store)

    differences = verify(store)
    rebuild(store)

    assert differences == []
    assert spanning(store) == live
    assert list(archiver.verify()) == []
    for job_id in (*first, second):
        found = archiver.record(job_id)
        assert found is not None
        assert found.file.location == location(job_id)
        assert archiver.page(job_id, 0, 100)[0]


def test_batches_whose_jobs_lie_before_the_seed_copy_no_seed_and_a_rebuild_is_still_exact(
    store: SqlStore, engine: Jobnik, clock: Clock, tmp_path: Path
) -> None:
    archiver = Archiver(store, tmp_path / "archive", 7 * DAY, batch=1, clock=clock)
    for name in ("a", "b", "a"):
        ended_job(engine, name)
    clock.advance(8 * DAY)
    ended_job(engine, "b")  # (live: not due)
    settle(store)
    with store.cursor(write=False) as cur:
        assert seeds.positions(cur) == {}

    positions = []
    while archiver.run().archived:
        with store.cursor(write=False) as cur:
            positions.append(set(seeds.positions(cur).values()))
        ended_job(engine, "c")  # events after the seed, which the next batches leave to the log
    settle(store)
    live = spanning(store)

    assert len(positions) == 3
    assert positions[0] == positions[1] == positions[2]  # copied once, by the first batch
    assert verify(store) == []
    rebuild(store)
    assert spanning(store) == live


def test_a_run_interrupted_after_its_files_leaves_every_job_live_and_a_rerun_archives_it_once(
    store: SqlStore,
    engine: Jobnik,
    clock: Clock,
    archiver: Archiver,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    job_id = ended_job(engine, "nightly")
    history = live_history(store, job_id)
    clock.advance(8 * DAY)
    settle(store)

    def crash(*args: Any, **kwargs: Any) -> list[UUID]:
        raise KeyboardInterrupt

    with monkeypatch.context() as m:
        m.setattr(archives_module, "commit", crash)
        with pytest.raises(KeyboardInterrupt):
            archiver.run()
    assert live_history(store, job_id) == history
    assert archiver.record(job_id) is None
    assert verify(store) == []

    assert archiver.run().archived == [job_id]
    assert archiver.run().archived == []
    assert list(archiver.verify()) == []


def test_a_name_keeps_its_jobs_for_the_period_an_operator_set(
    store: SqlStore, engine: Jobnik, clock: Clock, archiver: Archiver
) -> None:
    commands = RetentionCommands(store, clock)
    commands.set_retention("audit", 30 * DAY, by=Actor.API, reason="kept for audits")
    commands.set_retention("scratch", 3600, by=Actor.API)
    audit, scratch, other = (
        ended_job(engine, "audit"),
        ended_job(engine, "scratch"),
        ended_job(engine, "other"),
    )
    clock.advance(2 * 3600)
    settle(store)

    assert archiver.run().archived == [scratch]
    clock.advance(8 * DAY)
    assert archiver.run().archived == [other]
    commands.set_retention("audit", None, by=Actor.API)
    assert archiver.run().archived == [audit]
    assert [r.name for r in retention(store)] == ["scratch"]


def test_a_retention_period_of_zero_or_less_is_refused(store: SqlStore, clock: Clock) -> None:
    commands = RetentionCommands(store, clock)

    for period in (0, -1):
        with pytest.raises(InvalidRetentionPeriod):
            commands.set_retention("audit", period, by=Actor.API)

    assert retention(store) == []


class SomeOfThem(Archiver):
    """An archiver that takes a random part of the jobs due."""

    def __init__(self, store: SqlStore, directory: Path, rng: random.Random) -> None:
        later = datetime.now(UTC) + timedelta(days=1)
        super().__init__(store, directory, 1, batch=10_000, clock=lambda: later)
        self.rng = rng

    def due(self) -> list[Candidate]:
        return [c for c in super().due() if self.rng.random() < 0.5]


@pytest.mark.parametrize(("seed", "processes"), [(1, 1), (2, 1), (3, 2)])
def test_archiving_a_random_part_of_random_jobs_changes_no_spanning_read_model(
    store: SqlStore, tmp_path: Path, seed: int, processes: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(parallel, "MIN_EVENTS", 0)  # with 2: the parts' processes too (PG)
    rng = random.Random(seed)
    jobnik = Jobnik(store)
    random_workload(jobnik, rng, 250)
    settle(store)
    before = spanning(store)

    archived = SomeOfThem(store, tmp_path / "archive", rng).run().archived
    settle(store)
    after = spanning(store)
    differences = verify(store, processes=processes)
    rebuild(store, processes=processes)
    rebuilt = spanning(store)
    random_workload(jobnik, rng, 100)  # and the log goes on
    settle(store)

    assert archived
    record = archives_module.record(store, archived[0])
    assert after == without(before, archived, record.archived_at if record else None)
    assert differences == []
    assert rebuilt == after
    assert verify(store) == []


def test_a_run_whose_transaction_fails_before_its_commit_leaves_every_job_live(
    store: SqlStore,
    engine: Jobnik,
    clock: Clock,
    archiver: Archiver,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    jobs = [ended_job(engine, "nightly") for _ in range(3)]
    histories = [live_history(store, j) for j in jobs]
    clock.advance(8 * DAY)
    settle(store)

    def crash(*args: Any, **kwargs: Any) -> None:  # after the removals, before the commit
        raise KeyboardInterrupt

    with monkeypatch.context() as m:
        m.setattr(seeds, "refresh", crash)
        with pytest.raises(KeyboardInterrupt):
            archiver.run()

    assert [live_history(store, j) for j in jobs] == histories
    assert all(archiver.record(j) is None for j in jobs)
    assert verify(store) == []
    assert sorted(archiver.run().archived) == sorted(jobs)
    assert list(archiver.verify()) == []


def swept(
    engine: Jobnik, store: SqlStore, archiver: Archiver, rounds: int
) -> list[tuple[int, float | None]]:
    """What the archiver's runs answered in `rounds` rounds of the leader's sweeper (its archive
    interval 60 s)."""
    runs: list[tuple[int, float | None]] = []

    def archive() -> tuple[int, float | None]:
        runs.append(archiver.sweep())
        return runs[-1]

    sweeper = Sweeper(engine, store.leader_lock("sweeper"), 60, archive=archive, archive_every=60)
    try:
        for _ in range(rounds):
            sweeper.sweep_once()
    finally:
        sweeper.lock.release()
    return runs


def test_the_leaders_sweeper_archives_the_jobs_due(
    store: SqlStore, engine: Jobnik, clock: Clock, archiver: Archiver
) -> None:
    job_id = ended_job(engine, "nightly")
    clock.advance(8 * DAY)
    runs = swept(engine, store, archiver, 2)  # (the second within the interval: no run)

    assert runs == [(1, None)]  # (nothing more due: the next run after the interval)
    assert archiver.record(job_id) is not None


def test_through_a_backlog_the_sweeper_runs_again_after_the_pause_not_the_interval(
    store: SqlStore, engine: Jobnik, clock: Clock, tmp_path: Path
) -> None:
    jobs = [ended_job(engine, "nightly") for _ in range(3)]
    clock.advance(8 * DAY)
    archiver = Archiver(store, tmp_path / "archive", 7 * DAY, batch=2, clock=clock, share=1.0)
    runs = swept(engine, store, archiver, 3)

    # A whole batch due: the next round at once (share 1: no pause); then the rest, and the
    # interval.
    assert runs == [(2, 0.0), (1, None)]
    assert all(archiver.record(j) is not None for j in jobs)


def test_a_run_through_a_backlog_works_its_share_of_the_time(
    store: SqlStore, engine: Jobnik, clock: Clock, tmp_path: Path
) -> None:
    jobs = [ended_job(engine, "nightly") for _ in range(3)]
    clock.advance(8 * DAY)
    archiver = Archiver(store, tmp_path / "archive", 7 * DAY, batch=1, clock=clock, share=0.25)

    assert archiver.pause(Run(more=True, seconds=0.2)) == pytest.approx(0.6)
    assert archiver.pause(Run(more=False, seconds=0.2)) == 0.0
    waits: list[float] = []

    class Stop(threading.Event):
        def wait(self, timeout: float | None = None) -> bool:
            waits.append(timeout or 0.0)
            return False

    done = list(archiver.runs(Stop()))

    assert [len(r.archived) for r in done] == [1, 1, 1, 0]
    assert [r.more for r in done] == [True, True, True, False]
    assert waits == [pytest.approx(r.seconds * 3) for r in done[:3]]
    assert all(archiver.record(j) is not None for j in jobs)
