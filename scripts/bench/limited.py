"""The limits figure of `jobnik bench`: the engine lifecycle on a stage type whose limits never
bind against one without limits.

A limit set on a stage type makes every claim of it work out the room its limits leave (the
tasks of the type in progress, counted on an index, and the tokens in its rate's bucket, which
each claim then draws from), and a per-key limit makes every command that queues or ends one of
its tasks work out its key's gate (and a per-key rate adds the key's bucket, which each claim
draws from): the cost of flow control to work it does not hold back. Here a concurrency limit and
a rate are set far above what K threads can reach, on a third type a per-key limit twice K on the
one job's key, and on a fourth a per-key rate of 1,000 starts a second, so none binds; the
figures are those types' tasks/s beside a type with no limits, alternated over ROUNDS rounds in
one database. A database's later drains may run slower than its first ones, so every other round
runs the variants in the reverse order: each variant has the same mean place.
"""

from __future__ import annotations

from jobnik.domain.application import Jobnik
from jobnik.domain.limit_commands import LimitCommands
from jobnik.domain.limits import MAX_IN_PROGRESS, MAX_PER_KEY
from jobnik.domain.principals import Actor
from jobnik.scripts.bench.context import Ctx, check
from jobnik.scripts.bench.engine import drain, engine, populate

K = 4  # worker threads
ROUNDS = 2  # each variant's runs, alternated: none, limits, per key, key rate, key rate, ...
GOAL = 0.9  # with limits that never bind, as a share of without: within noise
# Each variant's limits on its stage type: none; a concurrency limit and a rate far above what K
# threads reach; a per-key limit of twice K on the one job's key; a per-key rate of the most
# starts a second.
VARIANTS = ("none", "limits", "per key", "key rate")


def _limit(limits: LimitCommands, variant: str, stage_type: str) -> None:
    if variant == "limits":
        limits.set(stage_type, MAX_IN_PROGRESS, by=Actor.API, reason="bench")
        limits.set_rate(stage_type, MAX_IN_PROGRESS, 1, by=Actor.API, reason="bench")
    elif variant == "per key":
        limits.set_key_limit(stage_type, 2 * K, by=Actor.API, reason="bench")
    elif variant == "key rate":
        limits.set_key_rate(stage_type, MAX_PER_KEY, 1, by=Actor.API, reason="bench")


def fig_limits(ctx: Ctx) -> None:
    n = max(ctx.sizes.lifecycle_tasks // 4, 4)
    rates: dict[str, list[float]] = {v: [] for v in VARIANTS}
    with ctx.database("limits") as url, engine(url) as store:
        app = Jobnik(store)
        limits = LimitCommands(store, app.clock)
        for r in range(ROUNDS):
            for variant in VARIANTS if r % 2 == 0 else reversed(VARIANTS):
                stage_type = f"limits-{variant.replace(' ', '-')}-{r}"
                _limit(limits, variant, stage_type)
                populate(app, stage_type, n)
                got = drain(app, stage_type, K)
                check(got.tasks == n, f"completed {got.tasks} of {n}")
                rates[variant].append(got.rate)
    note = f"{n:,} tasks, {K} threads, best of {ROUNDS} alternated runs each"
    for variant, name in (
        ("limits", "engine lifecycle, a concurrency limit and a rate that never bind"),
        ("per key", "engine lifecycle, a per-key limit that never binds"),
        ("key rate", "engine lifecycle, a per-key rate that never binds"),
    ):
        both = {False: rates["none"], True: rates[variant]}
        ctx.share(name, both, "the same stage type without limits", note, GOAL)
