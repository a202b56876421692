"""The retention figure of `jobnik bench`: a log that does not grow, and what archiving costs.

In a fresh database per backend, ROUNDS rounds, each: JOBS jobs created and completed (one stage
of TASKS tasks each), then archived by `Archiver.run` (batch after batch, as `jobnik archive run`
does) once their retention period has passed (the archiver's clock a day ahead, the period an
hour). Before the archive run, the same jobs' events are read and decoded as the archive reads
them (`api/archives.py`'s `history`), timed: the floor of the archiving rate; and the catch-up
projections are brought to the log's head, untimed (the catch-up runner's work, which a run
would otherwise do first).

- live size: the database after each round's archive run (PostgreSQL: `pg_database_size` after
  a plain VACUUM, whose freed space the next round reuses; SQLite: the file and its WAL after a
  checkpoint), the last round's against the first's; goal at most 1.10x; each round after the
  first also says which tables and indexes grew most;
- the archive holds every event: the archive records' event counts summed equal the events read
  (a run whose counts differ fails the figure);
- archiving rate: events archived per second against events read and decoded per second;
- no cost to live work: the HTTP lifecycle (K SDK worker processes against the server, as the
  `http` figure runs it) while an archive run works through a backlog of ended jobs, paced as
  the sweeper paces itself through a backlog (JOBNIK_ARCHIVE_SHARE's default), against the same
  lifecycle with no run; ROUNDS_HTTP pairs, each after a backlog of its own (the database settled
  after it), each pair's drains in the other order than the last's; the median pair's ratio;
  goal at least 90 %. Then once more with the run unpaced (batch after batch), against the
  median pair's drain without a run.
"""

from __future__ import annotations

import tempfile
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Final
from uuid import UUID

from jobnik.api.archives import Archiver, catch_up_all, history
from jobnik.api.settings import ARCHIVE_SHARE
from jobnik.domain.application import Jobnik, NewJob, NewStage, NewTask
from jobnik.domain.statuses import TaskStatus
from jobnik.projections.queries.audit import Audit
from jobnik.projections.store.base import SqlStore
from jobnik.projections.store.postgres import PostgresStore
from jobnik.projections.store.sqlite import SqliteStore
from jobnik.scripts.bench.context import Ctx, check, say
from jobnik.scripts.bench.dequeue_scenarios import opened, scenario_database
from jobnik.scripts.bench.engine import populate
from jobnik.scripts.bench.http_lifecycle import run_http_workers, server

ROUNDS: Final = 5
TASKS: Final = 4  # per job
PERIOD: Final = 3600  # the retention period, seconds
GOAL: Final = 1.10  # the last round's live size against the first's
K: Final = 4  # HTTP worker processes
ROUNDS_HTTP: Final = 3  # lifecycle pairs, without and during an archive run
LIVE_GOAL: Final = 0.9  # the lifecycle during an archive run against without one


def ended_jobs(app: Jobnik, label: str, n: int) -> list[UUID]:
    """`n` jobs of one stage of TASKS tasks, each task dequeued and completed."""
    ids = []
    for j in range(n):
        job = app.create_job(NewJob(name="bench retention", data={"j": j}))
        stage = app.add_stage(job.id, NewStage(type=f"retention-{label}", data={}))
        app.add_tasks(stage.id, [NewTask(data={"i": i}) for i in range(TASKS)])
        for _ in range(TASKS):
            task = app.dequeue(f"retention-{label}")
            app.report_task(task.id, TaskStatus.COMPLETED, attempt=task.attempt)
        ids.append(job.id)
    return ids


def live_size(store: SqlStore) -> int:
    """The database's bytes once the space of what was removed is free for reuse."""
    if isinstance(store, PostgresStore):
        with store.pg.get_connection() as conn:  # (autocommit: VACUUM runs outside a block)
            conn.execute("VACUUM")
            row = conn.execute("SELECT pg_database_size(current_database()) AS n").fetchone()
            return int(row["n"])
    assert isinstance(store, SqliteStore)
    with store.lite.get_connection(commit=False) as conn:
        conn.cursor().execute("PRAGMA wal_checkpoint(TRUNCATE)")
    path = Path(store.path.removeprefix("file:").split("?", 1)[0])
    wal = path.with_name(path.name + "-wal")
    return path.stat().st_size + (wal.stat().st_size if wal.exists() else 0)


def relation_sizes(store: SqlStore) -> dict[str, int]:
    """The bytes of each table and index of the database (after `live_size`)."""
    if isinstance(store, PostgresStore):
        with store.pg.get_connection() as conn:
            rows = conn.execute(
                "SELECT c.relname AS name, pg_relation_size(c.oid) AS n FROM pg_class c "
                "JOIN pg_namespace s ON s.oid = c.relnamespace "
                "WHERE s.nspname = current_schema() AND c.relkind IN ('r', 'i')"
            ).fetchall()
            return {r["name"]: int(r["n"]) for r in rows}
    assert isinstance(store, SqliteStore)
    with store.lite.get_connection(commit=False) as conn:
        cur = conn.cursor()
        cur.execute("SELECT name, SUM(pgsize) AS n FROM dbstat GROUP BY name")
        return {str(name): int(n) for name, n in cur.fetchall()}


def growth(before: dict[str, int], after: dict[str, int], most: int = 6) -> str:
    """The tables and indexes that grew most from `before` to `after`, in KB."""
    grown = sorted(((after[k] - before.get(k, 0), k) for k in after), reverse=True)[:most]
    return ", ".join(f"{k} {n / 1e3:+.0f} KB" for n, k in grown if n > 0)


def fig_retention(ctx: Ctx) -> None:
    jobs = max(ctx.sizes.lifecycle_tasks // 20, 2)
    sizes: list[int] = []
    relations: dict[str, int] = {}
    read = archived = 0
    read_s = archive_s = 0.0
    with (
        tempfile.TemporaryDirectory(prefix="jobnik-archive-") as directory,
        scenario_database(ctx.backend, "retention", ctx.pg_url, ctx.tmp) as url,
        opened(url) as store,
    ):
        app = Jobnik(store)
        ahead = datetime.now(UTC) + timedelta(days=1)
        archiver = Archiver(store, Path(directory), PERIOD, clock=lambda: ahead)
        for r in range(ROUNDS):
            ids = ended_jobs(app, str(r), jobs)
            t0 = time.perf_counter()
            events = sum(1 for job_id in ids for _ in history(Audit(store), job_id))
            read_s += time.perf_counter() - t0
            read += events
            ahead = datetime.now(UTC) + timedelta(days=1)
            catch_up_all(store)  # (the catch-up runner's work, not the archive run's)
            t0 = time.perf_counter()
            counted = 0
            while done := archiver.run().archived:
                counted += sum(rec.file.events for rec in map(archiver.record, done) if rec)
            archive_s += time.perf_counter() - t0
            check(counted == events, f"round {r}: the archives hold {counted} of {events} events")
            archived += counted
            sizes.append(live_size(store))
            say(f"# {ctx.backend} retention round {r + 1}: {events:,} events archived, "
                f"live size {sizes[-1] / 1e6:.1f} MB")  # fmt: skip
            relations, before = relation_sizes(store), relations
            if r:
                say(f"#   grew most: {growth(before, relations)}")
        during_archive(ctx, store, url, archiver)
    mb = 1e6
    f = ctx.add(
        f"live size after {ROUNDS} archived rounds",
        sizes[-1] / mb,
        sizes[0] / mb,
        "MB",
        higher_is_better=False,
        floor_name="after the first round",
        note=f"{jobs:,} jobs of {TASKS} tasks a round; {archived:,} events archived, every one",
    )
    ctx.goal(
        f"retention: live size after {ROUNDS} rounds <= {GOAL:.2f}x the first's",
        (f.ratio or 0) <= GOAL,
        f"{f.ratio:.2f}x",
    )
    ctx.add(
        "archive run",
        archived / archive_s,
        read / read_s,
        "events/s",
        floor_name="reading and decoding the same events",
        note="written, compressed, synced and removed",
    )


def _archive(archiver: Archiver, stop: threading.Event, ran: list[float]) -> None:
    """Archive runs, paced (`Archiver.runs`), until `stop` or none is due; `ran[0]`: how long
    they ran."""
    t0 = time.perf_counter()
    for _ in archiver.runs(stop):
        pass
    ran[0] = time.perf_counter() - t0


def _backlog(store: SqlStore, label: str, jobs: int) -> None:
    """`jobs` ended jobs, due, with the catch-up projections at the log's head (the catch-up
    runner's work, not the archive run's) and the database settled after making them (its
    dead rows vacuumed, as autovacuum would: `live_size`)."""
    ended_jobs(Jobnik(store), f"backlog-{label}", jobs)
    catch_up_all(store)
    live_size(store)


def _drain(ctx: Ctx, base: str, label: str, archiver: Archiver | None) -> tuple[float, float]:
    """The HTTP drain `label`, beside archive runs through the backlog when `archiver` is given:
    tasks/s, and the share of the drain the runs were busy."""
    stop, ran = threading.Event(), [0.0]
    runner = threading.Thread(target=_archive, args=(archiver, stop, ran)) if archiver else None
    if runner:
        runner.start()
    seconds, dequeues, _ = run_http_workers(base, label, K)
    stop.set()
    if runner:
        runner.join()
    check(len(dequeues) == ctx.sizes.http_tasks, f"HTTP workers completed {len(dequeues)}")
    return ctx.sizes.http_tasks / seconds, min(ran[0] / seconds, 1.0)


def during_archive(ctx: Ctx, store: SqlStore, url: str, archiver: Archiver) -> None:
    """The HTTP lifecycle without an archive run and during one, alternated (see the module).

    Each pair's backlog is made just before the pair, large enough to keep the run busy for the
    whole drain (the overlap says how much of it the run was busy), and the database settled
    after it, so both drains of a pair find the same database and every pair's run the same
    work; the pairs alternate which drain goes first; the figure is the pair whose ratio is the
    median."""
    n, jobs = ctx.sizes.http_tasks, max(ctx.sizes.lifecycle_tasks // 5, 2)
    app = Jobnik(store)
    for r in range(ROUNDS_HTTP):
        for during in (False, True):
            populate(app, f"live-{r}-{during}", n)
    populate(app, "live-flat-out", n)
    pairs: list[tuple[float, float, float]] = []  # (during, without) tasks/s and the overlap
    with server(url, ctx.tmp / "retention-server.log") as base:
        for r in range(ROUNDS_HTTP):
            _backlog(store, str(r), jobs)
            archiver.share = ARCHIVE_SHARE
            rates: dict[bool, tuple[float, float]] = {}
            for during in (False, True) if r % 2 == 0 else (True, False):
                rates[during] = _drain(
                    ctx, base, f"live-{r}-{during}", archiver if during else None
                )
            (during_rate, overlap), (without, _) = rates[True], rates[False]
            pairs.append((during_rate, without, overlap))
            say(f"# {ctx.backend} retention pair {r + 1}: {during_rate:,.1f} tasks/s during an "
                f"archive run (busy {overlap:.0%} of the drain), {without:,.1f} without: "
                f"{during_rate / without:.0%}")  # fmt: skip
        _backlog(store, "flat-out", jobs)
        archiver.share = 1.0
        flat_out, flat_overlap = _drain(ctx, base, "live-flat-out", archiver)
    by_ratio = sorted(pairs, key=lambda p: p[0] / p[1])
    median = by_ratio[(len(by_ratio) - 1) // 2]
    f = ctx.add(
        "HTTP lifecycle during an archive run",
        median[0],
        median[1],
        "tasks/s",
        floor_name="the same with no archive run",
        note=f"{n:,} tasks, {K} SDK processes; each pair's run had {jobs:,} jobs due, paced to "
        f"work {ARCHIVE_SHARE:.0%} of the time (JOBNIK_ARCHIVE_SHARE's default), busy "
        f"{min(p[2] for p in pairs):.0%}+ of its drain; the median pair of {ROUNDS_HTTP} "
        f"alternated ({', '.join(f'{p[0] / p[1]:.0%}' for p in by_ratio)})",
    )
    ctx.add(
        "HTTP lifecycle during an archive run, batch after batch",
        flat_out,
        median[1],
        "tasks/s",
        floor_name="the median pair's drain with no archive run",
        note=f"the run unpaced (share 1, as `jobnik archive run --share 1`) through {jobs:,} "
        f"jobs, busy {flat_overlap:.0%} of the drain",
    )
    ctx.goal(
        f"HTTP lifecycle during an archive run >= {LIVE_GOAL:.0%} of without",
        (f.ratio or 0) >= LIVE_GOAL,
        f"{f.ratio:.0%}",
    )
