"""Two figures of `jobnik bench` (the suite), each beside the raw SQL lifecycle measured in
the same run:

  batch  the task lifecycle in batches of BATCH (a batched dequeue, then one batched report of
         COMPLETED): the engine's, with K threads, and over HTTP, with K SDK processes. The floor
         is one task per transaction (scripts/bench/floor.py), K threads: the goal is twice it.
  plain  the one-task-at-a-time HTTP lifecycle driven by a plain keep-alive client (PROCESSES x
         THREADS `http.client` connections, no SDK), so that the server alone is measured.
"""

from __future__ import annotations

import threading

from jobnik.domain.application import Jobnik
from jobnik.domain.statuses import TaskStatus
from jobnik.domain.work import Report
from jobnik.scripts.bench import floor as bench_floor
from jobnik.scripts.bench.context import Ctx, check
from jobnik.scripts.bench.engine import engine, populate
from jobnik.scripts.bench.http_lifecycle import server
from jobnik.scripts.bench.processes import worker_processes
from jobnik.scripts.bench.worker import http_batch_worker, plain_worker

BATCH = 10
K = 4
PROCESSES, THREADS = 4, 2
GOAL = 2.0  # batches of BATCH: at least twice the one-task-per-transaction floor


def drain_batches(app: Jobnik, stage_type: str, k: int, size: int) -> tuple[int, float]:
    """K threads claim `size` tasks at a time and report them COMPLETED in one batch, until
    the stage type has nothing queued: (tasks done, seconds)."""
    done = [0]
    lock = threading.Lock()

    def work(_: int) -> None:
        count = 0
        while tasks := app.dequeue_batch(stage_type, size):
            outcomes = app.report_batch(
                [Report(t.id, t.attempt, TaskStatus.COMPLETED) for t in tasks]
            )
            refused = [o.error for o in outcomes if o.error is not None]
            if refused:
                raise RuntimeError(f"batched report refused: {refused}")
            count += len(tasks)
        with lock:
            done[0] += count

    seconds = bench_floor.parallel(k, work)
    return done[0], seconds


def fig_batch(ctx: Ctx) -> None:
    n_engine, n_http = ctx.sizes.lifecycle_tasks, ctx.sizes.http_tasks
    processes = ctx.api_processes if ctx.backend == "postgres" else 1
    with ctx.database("batch") as url:
        raw = bench_floor.RawLifecycle(url)
        raw.setup()
        with engine(url) as store:
            app = Jobnik(store)
            populate(app, "batch-engine", n_engine)
            populate(app, "batch-http", n_http)  # loaded before the server starts
            done, seconds = drain_batches(app, "batch-engine", K, BATCH)
        raw.load("floor-batch-engine", n_engine)
        floor = raw.run("floor-batch-engine", K)
        check(done == n_engine == floor.tasks, f"drained {done}/{floor.tasks} of {n_engine}")
        ctx.add(
            f"engine lifecycle K={K}, batches of {BATCH}",
            done / seconds,
            floor.rate,
            "tasks/s",
            floor_name=f"raw SQL lifecycle, {K} threads, one task per transaction",
            note=f"{n_engine:,} tasks",
        )
        with server(url, ctx.tmp / "server-batch.log", processes) as base:
            seconds, outs = worker_processes(K, http_batch_worker, base, "batch-http", BATCH)
        raw.load("floor-batch-http", n_http)
        floor = raw.run("floor-batch-http", K)
        done = sum(o["tasks"] for o in outs)
        check(done == n_http == floor.tasks, f"drained {done}/{floor.tasks} of {n_http}")
        f = ctx.add(
            f"HTTP lifecycle K={K}, batches of {BATCH}",
            done / seconds,
            floor.rate,
            "tasks/s",
            floor_name=f"raw SQL lifecycle, {K} threads, one task per transaction",
            note=f"{n_http:,} tasks, {K} SDK processes, {processes} uvicorn processes",
        )
    ratio = f.ratio or 0.0
    ctx.goal(
        f"HTTP batches of {BATCH} >= {GOAL:g}x the floor at K={K}",
        ratio >= GOAL,
        f"{ratio:.2f}x the raw SQL lifecycle",
    )


def fig_plain(ctx: Ctx) -> None:
    n = ctx.sizes.http_tasks
    processes = ctx.api_processes if ctx.backend == "postgres" else 1
    connections = PROCESSES * THREADS
    with ctx.database("plain") as url:
        with engine(url) as store:
            populate(Jobnik(store), "plain", n)
        with server(url, ctx.tmp / "server-plain.log", processes) as base:
            seconds, outs = worker_processes(PROCESSES, plain_worker, base, "plain", THREADS)
        raw = bench_floor.RawLifecycle(url)
        raw.setup()
        raw.load("floor-plain", n)
        floor = raw.run("floor-plain", connections)
        done = sum(o["tasks"] for o in outs)
        check(done == n == floor.tasks, f"drained {done}/{floor.tasks} of {n}")
        ctx.add(
            f"HTTP lifecycle, plain keep-alive client, {connections} connections",
            done / seconds,
            floor.rate,
            "tasks/s",
            floor_name=f"raw SQL lifecycle, {connections} threads",
            note=f"{n:,} tasks, {PROCESSES} processes x {THREADS} threads of http.client, "
            f"{processes} uvicorn processes",
        )
