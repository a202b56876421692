"""The volume figures of `jobnik bench`: bulk creation, queue depth, rebuild and replay."""

from __future__ import annotations

import contextlib
import math
import statistics
import time
from typing import Any

from jobnik.domain.application import Jobnik, NewJob, NewStage, NewTask
from jobnik.scripts.bench import floor as bench_floor
from jobnik.scripts.bench.context import Ctx, check
from jobnik.scripts.bench.engine import BATCH, engine

# -- bulk creation -----------------------------------------------------------------------------


def fig_bulk(ctx: Ctx) -> None:
    n = ctx.sizes.bulk_tasks
    with ctx.database("bulk") as url, engine(url) as store:
        app = Jobnik(store)
        job = app.create_job(NewJob(name="bench bulk", data={}))
        stage = app.add_stage(job.id, NewStage(type="bulk", data={}))
        first: Any = None
        t0 = time.perf_counter()
        for start in range(0, n, BATCH):
            batch = [NewTask(data={"i": start + i}) for i in range(min(BATCH, n - start))]
            tasks = app.add_tasks(stage.id, batch)
            first = first or tasks[0]
        engine_s = time.perf_counter() - t0
        stage_key = stage.id if store.backend == "postgres" else str(stage.id)
        template = bench_floor.bulk_template(url, store.events_table, first.id, stage_key)
        raw_s = bench_floor.raw_bulk(url, store.events_table, template, n)
        tables = ", ".join(["events", *template.rows, "summaries_v1"])
        f = ctx.add(
            "bulk creation (add_tasks, 1,000/batch)",
            n / engine_s,
            n / raw_s,
            "tasks/s",
            floor_name=f"multi-row INSERTs into {tables}",
            note=f"{n:,} tasks",
        )
    ctx.goal("bulk creation >= 30% of floor", (f.ratio or 0) >= 0.3, f"{f.ratio:.0%}")


# -- queue depth -------------------------------------------------------------------------------


def fig_depth(ctx: Ctx) -> None:
    from jobnik.scripts.bench import dequeue as bench_dequeue

    s = ctx.sizes
    r = bench_dequeue.run(
        ctx.backend,
        depth=s.depth,
        types=s.depth_types,
        samples=s.depth_samples,
        sample_types=min(10, s.depth_types),
        pg_url=ctx.pg_url,
        settle=s.depth > 10_000,  # VACUUM and CHECKPOINT matter after a big load only
    )
    check(not r.problems, f"the claim is not index-backed: {r.problems}")
    med = statistics.median
    for label, ours, theirs in (
        (f"{bench_dequeue.DEPTH_A}", r.dequeue_a, r.claim_a),
        (f"{r.depth:,} over {r.types:,} types (+{r.delayed:,} delayed)", r.dequeue_b, r.claim_b),
    ):
        ctx.add(
            f"dequeue median at {label}",
            med(ours) * 1000,
            med(theirs) * 1000,
            "ms",
            higher_is_better=False,
            floor_name="bare claim query (index probe)",
        )
    claim_ratio = med(r.claim_b) / med(r.claim_a)
    ctx.goal(
        f"queue depth: dequeue at {r.depth:,} <= 1.5x at {bench_dequeue.DEPTH_A}",
        r.ratio <= bench_dequeue.TARGET,
        f"{r.ratio:.2f}x (bare claim {claim_ratio:.2f}x)",
    )


# -- rebuild and replay ------------------------------------------------------------------------


def fig_rebuild(ctx: Ctx) -> None:
    from jobnik.scripts.bench import rebuild as br

    s = ctx.sizes
    for size in {s.rebuild_small, s.rebuild_large}:  # SQLite logs, written once for both backends
        if size not in ctx.logs:
            ctx.logs[size] = br.write_log(ctx.tmp / f"rebuild-{size}.db", size, f"log {size:,}")
    one = s.rebuild_small == s.rebuild_large  # (the test's tiny sizes: one log, one rebuild)
    with contextlib.ExitStack() as stack:
        small, large = ctx.logs[s.rebuild_small], ctx.logs[s.rebuild_large]
        if ctx.backend == "postgres":
            small = stack.enter_context(br.postgres_copy(small, ctx.pg_url, "small"))
            large = (
                small if one else stack.enter_context(br.postgres_copy(large, ctx.pg_url, "large"))
            )
        raw = br.measure("raw", large)
        big = br.measure("rebuild", large)
        little = big if one else br.measure("rebuild", small)
    speed = ctx.add(
        f"rebuild all projections ({big['events']:,} events)",
        big["events"] / big["seconds"],
        raw["events"] / raw["seconds"],
        "events/s",
        floor_name="read + decode the same log",
    )
    memory = ctx.add(
        f"rebuild peak RSS ({big['events']:,} vs {little['events']:,} ev)",
        big["maxrss_kb"] / 1024,
        little["maxrss_kb"] / 1024,
        "MB",
        higher_is_better=False,
        floor_name="the same rebuild of the smaller log",
        note=f"read+decode alone peaks at {raw['maxrss_kb'] / 1024:,.0f} MB",
    )
    ctx.goal(
        "rebuild >= 50% of read+decode, memory ratio <= 1.2",
        (speed.ratio or 0) >= 0.5 and (memory.ratio or math.inf) <= br.MAX_RATIO,
        f"speed {speed.ratio:.0%}, memory {memory.ratio:.2f}x",
    )
