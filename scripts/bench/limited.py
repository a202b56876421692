"""The limits figure of `jobnik bench`: the engine lifecycle on a stage type whose limits never
bind against one without limits.

A limit set on a stage type makes every claim of it work out the room its limits leave (the
tasks of the type in progress, counted on an index, and the tokens in its rate's bucket, which
each claim then draws from), and a per-key limit makes every command that queues or ends one of
its tasks work out its key's gate: the cost of flow control to work it does not hold back. Here a
concurrency limit and a rate are set far above what K threads can reach, and a per-key limit
twice K on the one job's key, so none binds;
the figure is that type's tasks/s beside a type with no limits, alternated over ROUNDS rounds in
one database.
"""

from __future__ import annotations

from jobnik.domain.application import Jobnik
from jobnik.domain.limit_commands import LimitCommands
from jobnik.domain.limits import MAX_IN_PROGRESS
from jobnik.domain.principals import Actor
from jobnik.scripts.bench.context import Ctx, check
from jobnik.scripts.bench.engine import drain, engine, populate

K = 4  # worker threads
ROUNDS = 2  # each variant's runs, alternated: without, with, without, with
GOAL = 0.9  # with limits that never bind, as a share of without: within noise


def fig_limits(ctx: Ctx) -> None:
    n = max(ctx.sizes.lifecycle_tasks // 4, 4)
    rates: dict[bool, list[float]] = {False: [], True: []}
    with ctx.database("limits") as url, engine(url) as store:
        app = Jobnik(store)
        limits = LimitCommands(store, app.clock)
        for r in range(ROUNDS):
            for limited in (False, True):
                stage_type = f"limits-{'on' if limited else 'off'}-{r}"
                if limited:
                    limits.set(stage_type, MAX_IN_PROGRESS, by=Actor.API, reason="bench")
                    limits.set_rate(stage_type, MAX_IN_PROGRESS, 1, by=Actor.API, reason="bench")
                    limits.set_key_limit(stage_type, 2 * K, by=Actor.API, reason="bench")
                populate(app, stage_type, n)
                got = drain(app, stage_type, K)
                check(got.tasks == n, f"completed {got.tasks} of {n}")
                rates[limited].append(got.rate)
    ctx.share(
        "engine lifecycle, a concurrency limit, a per-key limit and a rate that never bind",
        rates,
        "the same stage type without limits",
        f"{n:,} tasks, {K} threads, best of {ROUNDS} alternated runs each",
        GOAL,
    )
