"""Parallel replay (PostgreSQL): the jobs of the log shared between processes, each feeding the
shadows with the events of its jobs.

One rebuild process is bound by its own CPU: the read-ahead, fold and writer threads share one
GIL, and the database's work runs beside them on another core (README, Performance). Every row
of the per-job projections (`per_job`: the inline read models and run_stats) belongs to one job
and is written only by the events of that job, its stages and its tasks; the rows a fold reads
back (the job and stage rows an Enqueue needs) are of the same job. So the events of different
jobs can be replayed by different processes into the same shadow tables, in any interleaving:
each process applies its jobs' events in log order, and no process reads or writes another's
rows. What is not per job (last_status: the latest job of each name) is fed by the rebuilding
process meanwhile, from its own topics.

Routing. Each event's job: a job's own events are the job's; a stage's and a task's are the job
their creation event names (`history.KIND`: the rule the history index files events by). One
statement reads the creation events' job ids from the log on the server (split across its
parallel workers: JSON parsing is most of the routing's time); the jobs are then dealt to the
parts largest first (by their number of stages and tasks, in a snake: 0, 1, 1, 0, ...), so the
parts get about equal work even when a log holds a few big jobs, which hashing the job ids
split unevenly. The result is an unlogged table of routes (originator id → part); each process
reads its part's events through a join with it. If any event up to the head has no route (a
stored form the statement cannot read), nothing runs in parallel and the one-process pass does
all the work, as before.

Then the rebuild goes on in its own process from the head the parts stopped at (events written
meanwhile, the swap) with every projection, its folds starting with no memory of the rows the
parts wrote (they read them back when needed, as after any page).
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import queue
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from multiprocessing.process import BaseProcess
from typing import Any, Final

import psycopg
from eventsourcing.utils import get_topic

from jobnik.domain.errors import DatabaseError
from jobnik.projections.inline.history import KIND
from jobnik.projections.store.base import SqlStore
from jobnik.projections.store.cursor import Cursor

log = logging.getLogger(__name__)

ROUTES: Final = "jobnik_rebuild_routes"
_JOBS: Final = "jobnik_rebuild_jobs"  # (originator id, job): the routing's first step
MIN_EVENTS: Final = 50_000  # fewer events to replay: one process (starting others costs more)
MAX_PROCESSES: Final = 8
Route = tuple[int, int]  # (this part, of so many parts)


def processes(configured: int | None = None) -> int:
    """Processes a PostgreSQL rebuild replays with: `configured` (the server's
    `rebuild_processes` setting), else one per CPU, up to MAX_PROCESSES; 1 replays in the
    rebuilding process alone."""
    if configured is not None:
        return configured
    return max(1, min(os.cpu_count() or 1, MAX_PROCESSES))


def _job_hex(job: str, events: str) -> str:
    """SQL: the job of a creation event of `events`, as 32 hex digits."""
    return (
        f"CASE WHEN {events}.topic = %(job_topic)s "
        f"THEN replace({events}.originator_id::text, '-', '') "
        f"ELSE convert_from({events}.state, 'UTF8')::json -> '{job}' ->> '_data_' END"
    )


@contextmanager
def routes(store: SqlStore, parts: int, head: int) -> Iterator[bool]:
    """The routes table for the log up to `head` split in `parts`; True when every event has a
    route (else the parts must not run). Dropped afterwards."""
    creations = {get_topic(cls): kind for cls, kind in KIND.items()}
    job_topic = next(t for t, kind in creations.items() if kind == "job")
    params: dict[str, Any] = {"head": head, "parts": parts, "job_topic": job_topic}
    params.update({f"t{i}": t for i, t in enumerate(creations)})
    topics = ", ".join(f"%(t{i})s" for i in range(len(creations)))
    try:
        with store.cursor(write=True, lock=False) as cur:
            cur.execute(f"DROP TABLE IF EXISTS {ROUTES}, {_JOBS}")
            # (the planner does not know the JSON's cost: without these it scans alone)
            cur.execute("SET LOCAL parallel_setup_cost = 0")
            cur.execute("SET LOCAL parallel_tuple_cost = 0")
            cur.execute(
                f"CREATE UNLOGGED TABLE {_JOBS} AS SELECT e.originator_id, "
                f"{_job_hex('job_id', 'e')} AS job FROM {store.events_table} e "
                f"WHERE e.notification_id <= %(head)s AND e.topic IN ({topics})",
                params,
            )
            cur.execute(
                f"CREATE UNLOGGED TABLE {ROUTES} AS SELECT c.originator_id, j.part "
                f"FROM {_JOBS} c JOIN (SELECT job, CASE WHEN rank / %(parts)s %% 2 = 0 "
                "THEN rank %% %(parts)s ELSE %(parts)s - 1 - rank %% %(parts)s END AS part "
                "FROM (SELECT job, row_number() OVER (ORDER BY count(*) DESC, job) - 1 AS rank "
                f"FROM {_JOBS} WHERE job IS NOT NULL GROUP BY job) ranked) j USING (job)",
                params,
            )
            cur.execute(f"DROP TABLE {_JOBS}")
            cur.execute(f"ALTER TABLE {ROUTES} ADD PRIMARY KEY (originator_id)")
            cur.execute(f"ANALYZE {ROUTES}")
            complete = _complete(cur, store, head)
        if not complete:
            log.warning("rebuild: some events have no job route; replaying in one process")
    except (DatabaseError, psycopg.Error) as e:  # e.g. a stored form the statement cannot read
        log.warning("rebuild: could not route events to jobs (%s); replaying in one process", e)
        complete = False
    try:
        yield complete
    finally:
        with store.cursor(write=True, lock=False) as cur:
            cur.execute(f"DROP TABLE IF EXISTS {ROUTES}, {_JOBS}")


def _complete(cur: Cursor, store: SqlStore, head: int) -> bool:
    row = cur.one(
        f"SELECT EXISTS (SELECT 1 FROM {store.events_table} e WHERE e.notification_id <= "
        f"%(head)s AND NOT EXISTS (SELECT 1 FROM {ROUTES} r "
        "WHERE r.originator_id = e.originator_id)) AS missing",
        {"head": head},
    )
    return row is not None and not row["missing"]


def route_join(
    events: str, route: Route | None, param: Callable[[str], str]
) -> tuple[str, dict[str, Any]]:
    """The JOIN that keeps the events of one part (nothing when `route` is None); `param`: the
    dialect's placeholder."""
    if route is None:
        return "", {}
    return (
        f" JOIN {ROUTES} r ON r.originator_id = {events}.originator_id "
        f"AND r.part = {param('part')}",
        {"part": route[0]},
    )


Feed = Callable[[SqlStore, Sequence[str], Route, int, int, Callable[[int], None]], None]


def run_parts(
    store: SqlStore,
    feed: Feed,
    names: Sequence[str],
    parts: int,
    after: int,
    head: int,
    meanwhile: Callable[[], None],
    progress: Callable[[int], None],
) -> int | None:
    """`feed(store, names, (part, parts), after, head, done)` in a fresh process per part, while
    this process runs `meanwhile` and reports the events the parts applied to `progress`;
    returns the events the parts applied, or None when the log could not be routed (nothing
    ran: the caller replays in one process). The processes start (their imports take a few
    tenths of a second) while the routes are written. Raises DatabaseError if a part fails,
    after stopping the others."""
    context = multiprocessing.get_context("spawn")  # (fork would copy this process's threads)
    done = [context.Value("q", 0, lock=False) for _ in range(parts)]
    go = context.Value("i", 0)  # 1: the routes are ready; -1: stop without work
    results: multiprocessing.Queue[tuple[int, str | None]] = context.Queue()
    workers = [
        context.Process(
            target=_part,
            args=(feed, store.env, list(names), (i, parts), after, head, done[i], go, results),
            name=f"jobnik-rebuild-part-{i}",
            daemon=True,
        )
        for i in range(parts)
    ]
    ok = False
    try:
        for w in workers:
            w.start()
        with routes(store, parts, head) as complete:
            go.value = 1 if complete else -1
            if not complete:
                ok = True
                return None
            meanwhile()
            _wait(workers, results, lambda: progress(sum(d.value for d in done)))
        ok = True
        return int(sum(d.value for d in done))
    finally:
        go.value = go.value or -1
        for w in workers:
            if w.pid is None:  # never started
                continue
            if not ok:
                w.terminate()  # (its connections close: the server rolls its page back)
            w.join()


def _wait(
    workers: Sequence[BaseProcess],
    results: multiprocessing.Queue[tuple[int, str | None]],
    report: Callable[[], None],
) -> None:
    """Until every part reported success; DatabaseError for the first that failed or died."""
    finished: set[int] = set()
    while len(finished) < len(workers):
        try:
            part, error = results.get(timeout=0.2)
        except queue.Empty:
            dead = [i for i, w in enumerate(workers) if i not in finished and not w.is_alive()]
            if dead and results.empty():
                code = workers[dead[0]].exitcode
                raise DatabaseError(f"rebuild part {dead[0]} stopped (exit code {code})") from None
        else:
            if error is not None:
                raise DatabaseError(f"rebuild part {part} failed:\n{error}")
            finished.add(part)
        report()


def _part(
    feed: Feed,
    env: dict[str, str],
    names: list[str],
    route: Route,
    after: int,
    head: int,
    done: Any,
    go: Any,
    results: multiprocessing.Queue[tuple[int, str | None]],
) -> None:
    """A part's process: its own store and connections, the feed once the routes are ready,
    and its outcome reported."""
    try:
        store = SqlStore(env)  # (connects while the routes are written)
        while go.value == 0:
            time.sleep(0.01)
        if go.value < 0:
            store.close()
            return
        try:

            def applied(n: int) -> None:
                done.value = n

            feed(store, names, route, after, head, applied)
        finally:
            store.close()
    except BaseException:  # noqa: BLE001 - reported to the rebuilding process, which raises
        results.put((route[0], traceback.format_exc()))
        return
    results.put((route[0], None))
