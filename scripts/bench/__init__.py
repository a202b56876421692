"""The benchmark suite: each jobnik figure beside a bare-SQL floor measured in the same run.

Figures (`--only NAME,...`; all by default), per backend:

  engine   Engine lifecycle: one job, one stage of N tasks; K = 1, 2, 4 workers each loop
           `Jobnik.dequeue(stage_type)` then `Jobnik.report_task(COMPLETED, attempt=...)` until
           the stage is drained, as K threads of one process and (lines "(processes)") as K
           worker processes, each with its own store, started before the clock starts. tasks/s.
           Floor: the raw SQL lifecycle (scripts/bench/floor: claim with FOR UPDATE SKIP LOCKED +
           mark IN_PROGRESS + an event row in one transaction, mark COMPLETED + an event row in
           another), K threads or K processes alike, same database. The goal is judged on the
           processes: threads share one interpreter lock, which the engine's Python per task
           feels far more than the floor's thin loop.
  http     HTTP lifecycle: `uvicorn jobnik.scripts.asgi:create` as a subprocess (one process per
           core, `--api-processes N`; one on SQLite) and K worker
           processes using the SDK (`Consumer.dequeue`, `Consumer.complete`). tasks/s, and p50/p99
           of dequeue and of complete. Floor: the raw lifecycle with K threads (its claim and done
           transactions' latencies for the latency lines).
  batch    Batches (scripts/bench/batch.py): the engine lifecycle and the HTTP lifecycle with K=4
           SDK processes, each claiming 10 tasks per dequeue and reporting them in one request.
           tasks/s. Floor: the raw lifecycle with 4 threads (one task per transaction).
  plain    A plain keep-alive client (scripts/bench/batch.py): 4 processes x 2 threads, each on
           its own `http.client` connection, looping dequeue + COMPLETED one task at a time: the
           server alone, without the SDK. tasks/s. Floor: the raw lifecycle with 8 threads.
  cpu      The plain figure's drain against one uvicorn process (scripts/bench/cpu.py): the API
           server's CPU time per task (utime + stime of its /proc/PID/stat, read right before
           and right after the drain), the client processes' CPU per task and, on PostgreSQL,
           that of the bench database's backends (from /proc, when it shows them). ms, no floor.
  observe  The HTTP lifecycle at the largest K with telemetry off, with metrics, with metrics and
           request logs, and with metrics and traces (scripts/bench/observe.py). tasks/s of each
           against telemetry off; and a request's server CPU with metrics off and on, in
           process, by turns. The goals: metrics cost at most 5 % of each.
  bulk     Bulk creation: N tasks through `Jobnik.add_tasks` in batches of 1,000. tasks/s.
           Floor: the same rows (the event row and the read-model rows TaskCreated writes, copied
           from a task the engine created) as multi-row INSERTs, a transaction per batch.
  depth    Queue depth: `Jobnik.dequeue` median at 100 queued tasks vs at DEPTH over TYPES stage
           types with DEPTH more delayed (not due) beside them (scripts/bench/dequeue.py's `run`).
           Floor: the bare claim query at each depth.
  scrape   Scrape cost: GET /service-metrics and GET /metrics at DEPTH tasks over TYPES stage types
           vs at 100 tasks over the same types (scripts/bench/scrape.py). Median ms; goals: at
           most 1.5x, under 100 ms.
  cardinality  Scrapes over many stage types: GET /metrics over 5 x TYPES stage types vs over 60,
           30 scrapers at once against uvicorn (scripts/bench/cardinality.py). Median and slowest
           ms, size; goals: the slowest under a quarter of Prometheus' 10 s timeout, the size at
           most 1.1x.
  rebuild  Rebuild and replay (scripts/bench/rebuild.py's functions): events/s of a full
           projection rebuild of the LARGE log vs reading and decoding it; peak RSS of the rebuild
           at LARGE vs SMALL (each in a fresh child process).
  hot      Hot stage: 8 threads complete one stage of N tasks. tasks/s vs the raw floor with 8
           threads; lock waits per 1,000 tasks (write sessions that began while another of this
           process's write sessions was open: each of them queued on the event-table lock /
           BEGIN IMMEDIATE; on PostgreSQL a side thread also samples `pg_locks WHERE NOT
           granted`); retries per 1,000 tasks (commands run again after a conflict, by the
           engine's own retry or by the benchmark's worker loop).
  backoff  Every task fails once and is retried (scripts/bench/backoff.py): the engine lifecycle,
           4 threads, with a retry policy of a millisecond's wait against without one (retried at
           once), alternated in one database. tasks/s; goal: at least 80 %.
  limits   A stage type with a concurrency limit and a rate that never bind
           (scripts/bench/limited.py): the engine lifecycle, 4 threads, against a type without
           limits, alternated in one database. tasks/s; goal: at least 90 % (within noise).
  fairness  A job of 10 tasks queued behind one of 10,000 (half the engine's N) of the same
           priority and stage type (scripts/bench/fairness.py), 4 threads draining both: the time
           until the small job is done with the type's queue order fair against fifo (goal:
           sooner), and the drain's tasks/s fair against fifo (goal: at least 90 %).
  retention  Rounds of jobs created, completed and archived past their retention period
           (scripts/bench/retention.py): the live database's size after the last round against
           after the first (goal: at most 1.10x; every event counted in the archives), and the
           archive run's events/s against reading and decoding the same events.
  console  The console's jobs page (`GET /ui/jobs`, in process) with CONSOLE_JOBS jobs (100,000;
           scripts/bench/console.py): its first page, and filtered by status. ms. Floor: the
           page's three statements run bare.

Every line: name, backend, jobnik value, floor, unit, ratio = value/floor and its orientation
(throughput: share of the floor, higher is better; latency and memory: times the floor, lower is
better). Then one goal line per target. Lines starting with '#' are progress.

Usage:
  jobnik bench [--quick] [--backend postgres|sqlite|both] [--only engine,bulk] [--json PATH]
      [--pg-url postgresql://postgres@127.0.0.1:5432] [--tasks N] [--api-processes N] [--types N]

--quick (about a minute on PostgreSQL) shrinks every size; figures at quick sizes are noisier.
--tasks N sets the task count of the engine, HTTP and hot-stage runs (full: 20,000, 5,000 and
20,000; the full sizes of every figure take the better part of an hour).
Each figure lives in a module of this package named for it (engine, http_lifecycle, batch, cpu,
observe, volume for bulk and depth, scrape, cardinality, rebuild, console, backoff, limited for
limits, fairness, retention);
context, report, floor, processes, worker and databases are what they share.
Every figure but depth, scrape, cardinality, rebuild and retention runs in one fresh database per
backend (PostgreSQL: bench_suite_<pid>, dropped afterwards), each with its own stage types and floor
tables.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from jobnik.scripts.bench.context import FULL, QUICK, Ctx, Sizes, say, suite_database
from jobnik.scripts.bench.engine import fig_engine, fig_hot
from jobnik.scripts.bench.http_lifecycle import fig_http
from jobnik.scripts.bench.report import Figure, Goal, print_figures, print_goals, write_json
from jobnik.scripts.bench.volume import fig_bulk, fig_depth, fig_rebuild

NAMES = (
    "engine", "http", "batch", "plain", "cpu", "observe", "bulk", "depth", "scrape", "rebuild",
    "hot", "console", "cardinality", "backoff", "limits", "fairness", "retention",
)  # fmt: skip
PG_URL = "postgresql://postgres@127.0.0.1:5432"


def fig_cpu(ctx: Ctx) -> None:
    from jobnik.scripts.bench.cpu import fig_cpu as cpu

    cpu(ctx)


def fig_observe(ctx: Ctx) -> None:
    from jobnik.scripts.bench.observe import fig_observe as observe

    observe(ctx)


def fig_console(ctx: Ctx) -> None:
    from jobnik.scripts.bench.console import fig_console as console

    console(ctx)


def fig_scrape(ctx: Ctx) -> None:
    from jobnik.scripts.bench.scrape import fig_scrape as scrape

    scrape(ctx)


def fig_cardinality(ctx: Ctx) -> None:
    from jobnik.scripts.bench.cardinality import fig_cardinality as cardinality

    cardinality(ctx)


def fig_backoff(ctx: Ctx) -> None:
    from jobnik.scripts.bench.backoff import fig_backoff as backoff

    backoff(ctx)


def fig_limits(ctx: Ctx) -> None:
    from jobnik.scripts.bench.limited import fig_limits as limits

    limits(ctx)


def fig_fairness(ctx: Ctx) -> None:
    from jobnik.scripts.bench.fairness import fig_fairness as fairness

    fairness(ctx)


def fig_retention(ctx: Ctx) -> None:
    from jobnik.scripts.bench.retention import fig_retention as retention

    retention(ctx)


def fig_batch(ctx: Ctx) -> None:
    from jobnik.scripts.bench.batch import fig_batch as batch

    batch(ctx)


def fig_plain(ctx: Ctx) -> None:
    from jobnik.scripts.bench.batch import fig_plain as plain

    plain(ctx)


FIGURES: dict[str, Callable[[Ctx], None]] = {
    "engine": fig_engine,
    "http": fig_http,
    "batch": fig_batch,
    "plain": fig_plain,
    "cpu": fig_cpu,
    "observe": fig_observe,
    "bulk": fig_bulk,
    "depth": fig_depth,
    "scrape": fig_scrape,
    "rebuild": fig_rebuild,
    "hot": fig_hot,
    "console": fig_console,
    "cardinality": fig_cardinality,
    "backoff": fig_backoff,
    "limits": fig_limits,
    "fairness": fig_fairness,
    "retention": fig_retention,
}


# -- the suite ---------------------------------------------------------------------------------


def run_suite(
    backends: Sequence[str],
    only: Sequence[str] = NAMES,
    sizes: Sizes = FULL,
    pg_url: str = PG_URL,
    database_url: str | None = None,
    api_processes: int = 1,
) -> tuple[list[Figure], list[Goal]]:
    """Measure the chosen figures on each backend; progress lines as it goes.

    `database_url`: run every figure of its (one) backend in that database rather than in
    fresh ones (queue depth, scrape and rebuild still make their own)."""
    figures: list[Figure] = []
    goals: list[Goal] = []
    logs: dict[int, str] = {}
    with tempfile.TemporaryDirectory(prefix="jobnik-bench-suite-") as tmp:
        for backend in backends:
            with contextlib.ExitStack() as stack:
                url = database_url or stack.enter_context(
                    suite_database(backend, pg_url, Path(tmp))
                )
                ctx = Ctx(backend, sizes, pg_url, Path(tmp), url, api_processes, logs)
                for name in only:
                    t0 = time.perf_counter()
                    FIGURES[name](ctx)
                    say(f"# {backend} {name}: {time.perf_counter() - t0:.1f} s")
            figures += ctx.figures
            goals += ctx.goals
    return figures, goals


def main(
    argv: Sequence[str] | None = None,
    *,
    overrides: dict[str, Any] | None = None,
    prog: str | None = None,
) -> int:
    """The command line; `overrides` replaces sizes (e.g. `TINY.__dict__`)."""
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n", 1)[0])
    parser.add_argument(
        "--backend",
        choices=("postgres", "sqlite", "both"),
        default="postgres",
        help="the database(s) to measure on (default: postgres)",
    )
    parser.add_argument(
        "--only", default=",".join(NAMES), help=f"the figures to run, some of {','.join(NAMES)}"
    )
    parser.add_argument("--quick", action="store_true", help="small sizes (about a minute)")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    parser.add_argument("--pg-url", default=PG_URL, help="a server where databases may be made")
    parser.add_argument(
        "--tasks", type=int, default=None, help="tasks per lifecycle, HTTP and hot-stage run"
    )
    parser.add_argument(
        "--types",
        type=int,
        default=None,
        help="stage types of the depth and scrape figures (cardinality: five times as many)",
    )
    parser.add_argument(
        "--api-processes",
        type=int,
        default=os.cpu_count() or 1,
        help="uvicorn processes serving the HTTP figure on PostgreSQL (default: one per core)",
    )
    args = parser.parse_args(argv)
    only = [x.strip() for x in args.only.split(",") if x.strip()]
    unknown = sorted(set(only) - set(NAMES))
    if unknown:
        parser.error(f"unknown figure(s) {unknown}; choose from {','.join(NAMES)}")
    sizes = replace(QUICK if args.quick else FULL, **(overrides or {}))
    if args.tasks:
        sizes = replace(
            sizes, lifecycle_tasks=args.tasks, http_tasks=args.tasks, hot_tasks=args.tasks
        )
    if args.types:
        sizes = replace(sizes, depth_types=args.types)
    backends = ("postgres", "sqlite") if args.backend == "both" else (args.backend,)
    started = time.perf_counter()
    figures, goals = run_suite(
        backends, only, sizes, args.pg_url, api_processes=max(1, args.api_processes)
    )
    say()
    print_figures(figures, say)
    say()
    print_goals(goals, say)
    took = time.perf_counter() - started
    say(f"# {'quick' if args.quick else 'full'} run: {took:.0f} s")
    if args.json:
        write_json(args.json, figures, goals, quick=args.quick, seconds=took, sizes=sizes.__dict__)
    return 0


if __name__ == "__main__":
    sys.exit(main())
