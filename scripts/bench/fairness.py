"""The fairness figure of `jobnik bench`: a small job queued behind a large one of the same
priority and stage type, under fair order against first in, first out.

A job of BIG tasks is queued, then one of SMALL; K threads drain the type. The figure is the
time from the start of the drain until the small job's last task completed, with the type's
queue order fair beside fifo (the ratio is how much sooner the small job is done), and the
drain's tasks/s fair beside fifo (what taking turns costs: each command that queues tasks
reads the queue's turns, and the claim orders by turn). Each order runs ROUNDS times,
alternated, in one database, each round on stage types of its own.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from uuid import UUID

from jobnik.domain.application import Jobnik
from jobnik.domain.limit_commands import LimitCommands
from jobnik.domain.principals import Actor
from jobnik.domain.tasks import Task
from jobnik.scripts.bench.context import Ctx, check
from jobnik.scripts.bench.engine import drain, engine, populate

K = 4  # worker threads
ROUNDS = 2  # each order's runs, alternated: fifo, fair, fifo, fair
SMALL = 10  # the small job's tasks
GOAL = 0.9  # fair order's throughput, as a share of fifo's


def _finish_times(stage_id: UUID) -> tuple[list[float], Callable[[Task], None]]:
    """When each task of `stage_id` completed (filled by the second, the drain's hook)."""
    done: list[float] = []

    def seen(task: Task) -> None:
        if task.stage_id == stage_id:
            done.append(time.monotonic())  # (one list append: safe across threads)

    return done, seen


def fig_fairness(ctx: Ctx) -> None:
    big = max(ctx.sizes.lifecycle_tasks // 2, SMALL)
    rates: dict[bool, list[float]] = {False: [], True: []}
    waits: dict[bool, list[float]] = {False: [], True: []}
    with ctx.database("fairness") as url, engine(url) as store:
        app = Jobnik(store)
        limits = LimitCommands(store, app.clock)
        for r in range(ROUNDS):
            for fair in (False, True):
                stage_type = f"fairness-{'fair' if fair else 'fifo'}-{r}"
                limits.set_order(
                    stage_type, "fair" if fair else "fifo", by=Actor.API, reason="bench"
                )
                populate(app, stage_type, big)
                done, seen = _finish_times(populate(app, stage_type, SMALL).id)
                start = time.monotonic()
                got = drain(app, stage_type, K, seen)
                check(got.tasks == big + SMALL, f"completed {got.tasks} of {big + SMALL}")
                check(len(done) == SMALL, f"the small job completed {len(done)} of {SMALL}")
                rates[fair].append(got.rate)
                waits[fair].append(max(done) - start)
    note = f"{SMALL} tasks behind {big:,}, {K} threads, best of {ROUNDS} alternated runs each"
    ctx.add(
        "small job done, fair order",
        min(waits[True]),
        min(waits[False]),
        "s",
        floor_name="first in, first out",
        note=note,
        higher_is_better=False,
    )
    ctx.goal(
        "small job done sooner under fair order",
        min(waits[True]) < min(waits[False]),
        f"{min(waits[True]):.3f} s against {min(waits[False]):.3f} s "
        f"({min(waits[False]) / max(min(waits[True]), 1e-9):,.0f}x sooner)",
    )
    ctx.share("engine lifecycle, fair order", rates, "first in, first out", note, GOAL)
