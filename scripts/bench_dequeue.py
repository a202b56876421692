"""Dequeue cost against queue depth: does `Jobnik.dequeue` stay cheap when the queue is huge?

What it measures (per backend, PostgreSQL and/or SQLite):

  Scenario A, a fresh database: 100 queued tasks (one job, one stage of one type).
  Scenario B, another fresh database: DEPTH queued tasks across TYPES stage types (one job per
  type, one stage each, DEPTH/TYPES tasks per stage), created through `Jobnik.create_job`,
  `Jobnik.add_stage` and `Jobnik.add_tasks` in batches of 1,000: real events in the library's
  event table and real read-model rows, no raw inserts. Creation throughput is printed as it goes.

  Then, with both databases open, the script times `Jobnik.dequeue(type)` alone: each one is a
  whole write transaction (event-table lock, claim through queue_v1's partial index queue_v1_next,
  task/stage/job rows loaded, events appended, read models updated, commit). No report follows a
  dequeue: the claimed tasks stay IN_PROGRESS. A's and B's dequeues alternate (A, B, B, A, ...)
  so that noise from other processes on the machine hits both alike. In B they rotate over
  --sample-types types spread across the type range. Before timing, every sampled stage gets one
  untimed dequeue (the first one also starts the stage and the job: more events) and a few more
  as warm-up.

  For context the script also times the bare claim query (the exact SQL `SqlSession.claim`
  runs, `SELECT task_id FROM queue_v1 WHERE stage_type = ... AND stage_open AND job_open
  ORDER BY priority_rank, seq LIMIT 1 [FOR UPDATE SKIP LOCKED]`) in its own transaction,
  rolled back, on one held connection, at both depths; and prints the claim's query plan at
  depth B. It exits non-zero when that plan scans queue_v1 (a Seq Scan on PostgreSQL, a SCAN
  on SQLite) or does not use queue_v1_next: the claim must be index-backed.

  After loading (and after the plan check, so the plan is the one autovacuum left), each
  PostgreSQL database gets VACUUM (ANALYZE) and a CHECKPOINT, and each SQLite file a WAL
  checkpoint, so the load's background work does not land in B's measurements only.

How to read it: lines starting with '#' are progress and context; every other line is one figure:

  name                                   value(B)   baseline(A)   ratio(B/A)

Times are milliseconds (median and p90 over the samples). Absolute values depend on the machine
and on what else runs on it; the ratios, measured in the same run, are the point. The jobnik
claim is "a dequeue at 1,000,000 tasks across 1,000 types costs about what it costs with 100":
the dequeue-median ratio should be <= 1.5 (the line says whether it is; it does not change the
exit status, as noise on a busy machine can push it over).

Usage:
  python scripts/bench_dequeue.py [--backend postgres|sqlite|both] [--depth 1000000]
      [--types 1000] [--samples 50] [--quick] [--pg-url postgresql://postgres@127.0.0.1:5432]

--quick is depth 100,000 over 100 types (still 1,000 tasks per type). PostgreSQL databases are
created as jobnik_bench_<pid>_a/_b and dropped at the end; SQLite files live in a temp directory.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse, urlunparse

from jobnik.domain.application import Jobnik, NewJob, NewStage, NewTask
from jobnik.projections.startup import migrate
from jobnik.projections.store.backends import open_store
from jobnik.projections.store.base import SqlStore
from jobnik.projections.store.config import library_env
from jobnik.projections.store.postgres import PostgresStore
from jobnik.projections.store.session import SqlSession
from jobnik.projections.store.sqlite import SqliteStore

DEPTH_A = 100
BATCH = 1_000
WARMUP = 4  # untimed dequeues per sampled stage after its first (stage-starting) one
TARGET = 1.5
TABLES = ("queue_v1", "tasks_v1", "summaries_v1", "stages_v1", "jobs_v1")


def say(line: str = "") -> None:
    print(line, flush=True)


# -- databases ---------------------------------------------------------------------------------


def _admin(pg_url: str) -> Any:
    import psycopg

    u = urlparse(pg_url)
    return psycopg.connect(urlunparse(u._replace(path="/postgres")), autocommit=True)


@contextmanager
def scenario_store(backend: str, label: str, pg_url: str, tmp: Path) -> Iterator[SqlStore]:
    """A fresh, migrated database for one scenario; dropped (or deleted) afterwards."""
    if backend == "postgres":
        import os

        name = f"jobnik_bench_{os.getpid()}_{label}"
        with _admin(pg_url) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
            admin.execute(f"CREATE DATABASE {name}")
        url = urlunparse(urlparse(pg_url)._replace(path=f"/{name}"))
        store = open_store(library_env({"JOBNIK_DATABASE_URL": url}))
        try:
            migrate(store)
            yield store
        finally:
            store.close()
            with _admin(pg_url) as admin:
                admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    else:
        path = tmp / f"bench_{label}.db"
        store = open_store(library_env({"JOBNIK_DATABASE_URL": f"sqlite:///{path}"}))
        try:
            migrate(store)
            yield store
        finally:
            store.close()


def settle(store: SqlStore) -> None:
    """Let the load's after-work happen now rather than during the measurements."""
    if isinstance(store, PostgresStore):
        with store.pg.get_connection() as conn:  # the library's connections autocommit
            for table in (store.events_table, *TABLES):
                conn.execute(f"VACUUM (ANALYZE) {table}")
            conn.execute("CHECKPOINT")
    else:
        assert isinstance(store, SqliteStore)
        with store.lite.get_connection(commit=False) as conn:
            conn.cursor().execute("PRAGMA wal_checkpoint(TRUNCATE)")


# -- the scenario ------------------------------------------------------------------------------


@dataclass
class Scenario:
    label: str
    store: SqlStore
    app: Jobnik
    types: list[str] = field(default_factory=list)  # every stage type, in creation order
    sampled: list[str] = field(default_factory=list)  # the types dequeued from
    create_s: float = 0.0
    tasks: int = 0


def populate(sc: Scenario, depth: int, types: int, backend: str) -> None:
    """`types` jobs x 1 stage (of a distinct type) x depth/types tasks, in batches of BATCH."""
    per_type, extra = divmod(depth, types)
    step = max(depth // 10, BATCH)
    next_report = step
    start = last_t = time.perf_counter()
    last_n = 0
    for j in range(types):
        stage_type = f"bench-{sc.label}-{j:05d}"
        job = sc.app.create_job(NewJob(name=f"bench {sc.label} {j}", data={"j": j}))
        stage = sc.app.add_stage(job.id, NewStage(type=stage_type, data={}))
        sc.types.append(stage_type)
        count = per_type + (1 if j < extra else 0)
        for first in range(0, count, BATCH):
            n = min(BATCH, count - first)
            sc.app.add_tasks(stage.id, [NewTask(data={"i": first + i}) for i in range(n)])
            sc.tasks += n
            if sc.tasks >= next_report or sc.tasks == depth:
                now = time.perf_counter()
                say(
                    f"# {backend} {sc.label}: {sc.tasks:>9,}/{depth:,} tasks created, "
                    f"{sc.tasks / (now - start):>7,.0f} tasks/s overall, "
                    f"{(sc.tasks - last_n) / (now - last_t):>7,.0f} tasks/s lately, "
                    f"{now - start:7.1f} s"
                )
                last_t, last_n = now, sc.tasks
                next_report += step
    sc.create_s = time.perf_counter() - start


def spread(items: Sequence[str], k: int) -> list[str]:
    """`k` items evenly spaced over `items` (first and last included when k > 1)."""
    k = min(k, len(items))
    if k == 1:
        return [items[0]]
    return [items[round(i * (len(items) - 1) / (k - 1))] for i in range(k)]


# -- the claim query, its plan and its bare cost -----------------------------------------------


class _Capture:
    """A cursor that records the statement `SqlSession.claim` runs (and finds nothing)."""

    sql: str = ""
    params: Any = None

    def one(self, sql: str, params: Any = ()) -> None:
        self.sql, self.params = sql, params


def claim_statement(store: SqlStore, stage_type: str) -> tuple[str, Any]:
    """The engine's own claim SQL and parameters, so the figures track `SqlSession.claim`."""
    capture = _Capture()
    SqlSession(store, capture, write=False).claim(stage_type)  # type: ignore[arg-type]
    if not capture.sql:
        raise RuntimeError("SqlSession.claim ran no statement")
    return capture.sql, capture.params


def claim_plan(store: SqlStore, stage_type: str) -> list[str]:
    sql, params = claim_statement(store, stage_type)
    with store.cursor(write=False) as cur:  # rolled back: the row lock EXPLAIN ANALYZE takes too
        if isinstance(store, PostgresStore):
            rows = cur.all(f"EXPLAIN (ANALYZE, BUFFERS) {sql}", params)
            return [r["QUERY PLAN"] for r in rows]
        cur.raw.execute(f"EXPLAIN QUERY PLAN {sql}", params)  # raw: its `id` is no uuid
        return [r["detail"] for r in cur.raw.fetchall()]


def plan_problems(store: SqlStore, lines: list[str]) -> list[str]:
    text = "\n".join(lines)
    problems = []
    if isinstance(store, PostgresStore):
        if "Seq Scan on queue_v1" in text:
            problems.append("Seq Scan on queue_v1")
    elif any(line.lstrip().startswith("SCAN queue_v1") for line in lines):
        problems.append("SCAN of queue_v1")
    if "queue_v1_next" not in text:
        problems.append("the plan does not use queue_v1_next")
    return problems


@contextmanager
def bare_claim(store: SqlStore) -> Iterator[Callable[[str], float]]:
    """A timer of the claim query alone, each run in its own transaction on one held connection."""
    if isinstance(store, PostgresStore):
        with store.pg.get_connection() as conn:

            def run_pg(stage_type: str) -> float:
                sql, params = claim_statement(store, stage_type)
                t0 = time.perf_counter()
                with conn.transaction(force_rollback=True):
                    row = conn.execute(sql, params).fetchone()
                dt = time.perf_counter() - t0
                if row is None:
                    raise RuntimeError(f"no queued task of type {stage_type}")
                return dt

            yield run_pg
    else:
        assert isinstance(store, SqliteStore)
        with store.lite.get_connection(commit=False) as lconn:
            raw = lconn.cursor().sqlite_cursor

            def run_lite(stage_type: str) -> float:
                sql, params = claim_statement(store, stage_type)
                t0 = time.perf_counter()
                raw.execute("BEGIN")
                row = raw.execute(sql, params).fetchone()
                raw.execute("ROLLBACK")
                dt = time.perf_counter() - t0
                if row is None:
                    raise RuntimeError(f"no queued task of type {stage_type}")
                return dt

            yield run_lite


# -- timing ------------------------------------------------------------------------------------


def timed_dequeue(app: Jobnik, stage_type: str) -> float:
    t0 = time.perf_counter()
    app.dequeue(stage_type)
    return time.perf_counter() - t0


def interleave(
    samples: int, a: Callable[[int], float], b: Callable[[int], float]
) -> tuple[list[float], list[float]]:
    """A and B alternately, A first on even rounds and B first on odd ones (A B B A A B ...)."""
    ta: list[float] = []
    tb: list[float] = []
    for i in range(samples):
        if i % 2 == 0:
            ta.append(a(i))
            tb.append(b(i))
        else:
            tb.append(b(i))
            ta.append(a(i))
    return ta, tb


def p90(xs: list[float]) -> float:
    return statistics.quantiles(xs, n=10, method="inclusive")[-1]


def figure(name: str, value: float, baseline: float | None, note: str = "") -> None:
    if baseline is None:
        say(f"{name:<44} {value:>12,.3f} {'-':>12} {'-':>8}  {note}".rstrip())
    else:
        ratio = value / baseline if baseline else float("inf")
        say(f"{name:<44} {value:>12.3f} {baseline:>12.3f} {ratio:>8.2f}  {note}".rstrip())


# -- one backend -------------------------------------------------------------------------------


@dataclass
class DepthResult:
    """One backend's figures, in seconds: dequeue and bare claim at depth A and at depth B."""

    backend: str
    depth: int
    types: int
    create_s: float
    dequeue_a: list[float]
    dequeue_b: list[float]
    claim_a: list[float]
    claim_b: list[float]
    problems: list[str] = field(default_factory=list)  # the claim's plan is not index-backed

    @property
    def ratio(self) -> float:
        """Dequeue median at depth B over depth A: the figure that should stay <= TARGET."""
        return statistics.median(self.dequeue_b) / statistics.median(self.dequeue_a)


def measure(
    backend: str, args: argparse.Namespace, tmp: Path, *, settled: bool = True
) -> DepthResult:
    """Both scenarios on one backend (no figures printed; progress lines only).

    `settled=False` skips VACUUM/CHECKPOINT after loading (tiny loads in tests)."""
    say(
        f"# {backend}: scenario A = {DEPTH_A} tasks (1 type); scenario B = {args.depth:,} tasks "
        f"over {args.types:,} types; {args.samples} timed dequeues each (dequeue only, no report)"
    )
    with (
        scenario_store(backend, "a", args.pg_url, tmp) as store_a,
        scenario_store(backend, "b", args.pg_url, tmp) as store_b,
    ):
        a = Scenario("a", store_a, Jobnik(store_a))
        b = Scenario("b", store_b, Jobnik(store_b))
        populate(a, DEPTH_A, 1, backend)
        populate(b, args.depth, args.types, backend)
        a.sampled = a.types
        b.sampled = spread(b.types, args.sample_types)
        result = DepthResult(backend, b.tasks, args.types, b.create_s, [], [], [], [])

        say(f"# {backend} claim plan at depth B ({b.tasks:,} queued, type {b.sampled[0]}):")
        lines = claim_plan(store_b, b.sampled[0])
        for line in lines:
            say(f"#   {line}")
        result.problems = plan_problems(store_b, lines)

        t0 = time.perf_counter()
        if settled:
            settle(store_a)
            settle(store_b)
        how = (
            "VACUUM (ANALYZE), CHECKPOINT"
            if isinstance(store_b, PostgresStore)
            else "WAL checkpoint"
        )
        say(f"# {backend}: settled ({how}) in {time.perf_counter() - t0:.1f} s")
        after = claim_plan(store_b, b.sampled[0])
        result.problems += [f"{p} (after ANALYZE)" for p in plan_problems(store_b, after)]
        if result.problems:
            if after != lines:
                say(f"# {backend} claim plan at depth B after VACUUM (ANALYZE):")
                for line in after:
                    say(f"#   {line}")
            return result

        # Warm-up: start every sampled stage (and its job), then a few ordinary dequeues.
        for sc in (a, b):
            for t in sc.sampled:
                for _ in range(1 + WARMUP):
                    sc.app.dequeue(t)

        def dq(sc: Scenario) -> Callable[[int], float]:
            return lambda i: timed_dequeue(sc.app, sc.sampled[i % len(sc.sampled)])

        result.dequeue_a, result.dequeue_b = interleave(args.samples, dq(a), dq(b))
        with bare_claim(store_a) as claim_a, bare_claim(store_b) as claim_b:
            n = max(args.samples, 200)
            result.claim_a, result.claim_b = interleave(
                n,
                lambda i: claim_a(a.sampled[i % len(a.sampled)]),
                lambda i: claim_b(b.sampled[i % len(b.sampled)]),
            )
    return result


def run(
    backend: str,
    *,
    quick: bool = False,
    depth: int | None = None,
    types: int | None = None,
    samples: int = 50,
    sample_types: int = 10,
    pg_url: str = "postgresql://postgres@127.0.0.1:5432",
    settle: bool = True,
) -> DepthResult:
    """The measurement as a function (for scripts/bench.py); the arguments are main()'s."""
    argv = ["--backend", backend, "--samples", str(samples), "--pg-url", pg_url]
    argv += ["--sample-types", str(sample_types), *(["--quick"] if quick else [])]
    argv += [
        *(["--depth", str(depth)] if depth else []),
        *(["--types", str(types)] if types else []),
    ]
    args = parse(argv)
    with tempfile.TemporaryDirectory(prefix="jobnik-bench-") as tmp:
        return measure(backend, args, Path(tmp), settled=settle)


def run_backend(backend: str, args: argparse.Namespace, tmp: Path) -> bool:
    """Both scenarios on one backend; False when the claim's plan is not index-backed."""
    wall = time.perf_counter()
    r = measure(backend, args, tmp)
    if r.problems:
        print(f"FAIL {backend}: claim query is not index-backed: {r.problems}", file=sys.stderr)
        return False
    da, db, ca, cb = r.dequeue_a, r.dequeue_b, r.claim_a, r.claim_b
    ms = 1000.0
    ratio = r.ratio
    verdict = f"target <= {TARGET}: {'met' if ratio <= TARGET else 'MISSED'}"
    say(f"# {'figure':<42} {'value (B)':>12} {'baseline (A)':>12} {'B/A':>8}")
    figure(
        f"{backend} create tasks/s (B, via add_tasks)",
        r.depth / r.create_s,
        None,
        f"{r.depth:,} tasks in {r.create_s:.1f} s",
    )
    figure(
        f"{backend} dequeue median ms",
        statistics.median(db) * ms,
        statistics.median(da) * ms,
        verdict,
    )
    figure(f"{backend} dequeue p90 ms", p90(db) * ms, p90(da) * ms)
    figure(
        f"{backend} claim SQL median ms",
        statistics.median(cb) * ms,
        statistics.median(ca) * ms,
        f"{len(cb)} runs each",
    )
    figure(f"{backend} claim SQL p90 ms", p90(cb) * ms, p90(ca) * ms)
    say(f"# {backend} wall time {time.perf_counter() - wall:.1f} s")
    return True


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Dequeue cost at depth 100 vs a deep queue (see the module docstring)."
    )
    parser.add_argument("--backend", choices=("postgres", "sqlite", "both"), default="postgres")
    parser.add_argument("--depth", type=int, default=None, help="tasks in B (1,000,000)")
    parser.add_argument("--types", type=int, default=None, help="stage types in B (1,000)")
    parser.add_argument("--samples", type=int, default=50, help="timed dequeues per scenario")
    parser.add_argument("--sample-types", type=int, default=10, help="B's types dequeued from")
    parser.add_argument("--quick", action="store_true", help="depth 100,000 over 100 types")
    parser.add_argument(
        "--pg-url",
        default="postgresql://postgres@127.0.0.1:5432",
        help="a PostgreSQL server where the bench may create and drop databases",
    )
    args = parser.parse_args(argv)
    args.depth = args.depth or (100_000 if args.quick else 1_000_000)
    args.types = args.types or (100 if args.quick else 1_000)
    if args.types < 1 or args.depth < args.types:
        parser.error("need --types >= 1 and --depth >= --types")
    if not 2 <= args.samples <= DEPTH_A - 1 - WARMUP:
        parser.error(f"--samples must be 2..{DEPTH_A - 1 - WARMUP} (scenario A holds {DEPTH_A})")
    per_type = args.depth // args.types
    k = min(args.sample_types, args.types)
    if per_type < 1 + WARMUP + -(-args.samples // k):
        parser.error("B has too few tasks per type for these samples; raise --sample-types")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    backends = ("postgres", "sqlite") if args.backend == "both" else (args.backend,)
    ok = True
    with tempfile.TemporaryDirectory(prefix="jobnik-bench-") as tmp:
        for backend in backends:
            ok = run_backend(backend, args, Path(tmp)) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
