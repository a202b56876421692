"""Scrapes over many stage types (`jobnik bench --only cardinality`): GET /metrics with MANY
stage types against the same with FEW, both served by a live uvicorn process.

Stage types are named by clients, so nothing bounds their number; the metrics give series of their
own to JOBNIK_METRICS_STAGE_TYPES of them (50 by default) and count the others as `__other__`.
Two fresh databases, each with its types made by the engine (a job, a stage and a task each): FEW
(60, already beyond that bound) and MANY (five times the depth and scrape figures' stage types,
`--types`: 5,000 by default, 250 with --quick). Against each, SCRAPERS
threads scrape /metrics at once, each ROUNDS times on its own connection, as a fleet of
Prometheus servers would. Figures: the median and the slowest of those scrapes at MANY, beside
the same at FEW, and the size of a scrape. The goals: the slowest scrape at MANY well inside
Prometheus' default scrape timeout (10 s): under a quarter of it; and a scrape at MANY no larger
than 1.1 times one at FEW.
"""

from __future__ import annotations

import http.client
import statistics
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Final
from urllib.parse import urlparse

from jobnik.domain.application import Jobnik, NewTask
from jobnik.projections.catchup.registry import CATCH_UP
from jobnik.projections.catchup.runner import catch_up
from jobnik.projections.startup import migrate
from jobnik.projections.store.backends import open_store
from jobnik.projections.store.config import library_env
from jobnik.scripts.bench.context import Ctx, check
from jobnik.scripts.bench.databases import fresh_database
from jobnik.scripts.bench.http_lifecycle import server
from jobnik.scripts.bench.scrape import stages

FEW: Final = 60
MANY_PER_TYPE: Final = 5  # MANY: this many times the sizes' depth_types, at least FEW + 20
SCRAPERS: Final = 30
PROMETHEUS_TIMEOUT_MS: Final = 10_000.0
SLOWEST_SHARE: Final = 0.25  # of Prometheus' timeout, at most
SIZE_RATIO: Final = 1.1


@dataclass(frozen=True)
class Scrapes:
    """Concurrent scrapes' latencies (ms) and one scrape's size (bytes, lines)."""

    ms: list[float]
    size: int
    lines: int


@contextmanager
def database(ctx: Ctx, types: int) -> Iterator[str]:
    """A fresh database holding `types` stage types, each with one job, stage and task; its URL
    (dropped, or deleted, afterwards)."""
    label = f"card_{types}"
    if ctx.backend == "postgres":
        with fresh_database(ctx.pg_url, f"jobnik_bench_{label}") as url:
            fill(url, types)
            yield url
        return
    path = ctx.tmp / f"bench_{label}.db"
    url = f"sqlite:///{path}"
    try:
        fill(url, types)
        yield url
    finally:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)


def fill(url: str, types: int) -> None:
    store = open_store(library_env({"JOBNIK_DATABASE_URL": url}))
    try:
        migrate(store)
        app = Jobnik(store)
        for stage_id in stages(app, types, f"card-{types}"):
            app.add_tasks(stage_id, [NewTask(data={})])
        for projection in CATCH_UP:
            while catch_up(store, projection, 10_000):
                pass
    finally:
        store.close()


def scrape_at_once(base: str, scrapers: int, rounds: int) -> Scrapes:
    """`scrapers` threads scrape /metrics `rounds` times each, all starting together."""
    address = urlparse(base)
    start = threading.Barrier(scrapers)
    took: list[float] = []
    sizes: list[tuple[int, int]] = []
    lock = threading.Lock()

    def scraper() -> None:
        conn = http.client.HTTPConnection(address.hostname or "", address.port, timeout=60)
        start.wait()
        try:
            for _ in range(rounds):
                t0 = time.perf_counter()
                conn.request("GET", "/metrics")
                r = conn.getresponse()
                body = r.read()
                ms = (time.perf_counter() - t0) * 1000
                check(r.status == 200, f"/metrics answered {r.status}")
                with lock:
                    took.append(ms)
                    sizes.append((len(body), body.count(b"\n")))
        finally:
            conn.close()

    threads = [threading.Thread(target=scraper) for _ in range(scrapers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    size, lines = max(sizes)
    return Scrapes(took, size, lines)


def measure(ctx: Ctx, types: int, rounds: int) -> Scrapes:
    with database(ctx, types) as url:
        log = ctx.tmp / f"card_{types}.log"
        with server(url, log, env={"JOBNIK_SWEEP_INTERVAL": "0"}) as base:
            scrape_at_once(base, 1, 3)  # warm-up: the first requests compile and cache
            return scrape_at_once(base, SCRAPERS, rounds)


def fig_cardinality(ctx: Ctx) -> None:
    many = max(FEW + 20, MANY_PER_TYPE * ctx.sizes.depth_types)
    rounds = 5 if many >= 1000 else 2
    few_at, many_at = measure(ctx, FEW, rounds), measure(ctx, many, rounds)
    at = f"{SCRAPERS} scrapers at once"
    note = f"{many:,} stage types; {SCRAPERS} x {rounds} scrapes, uvicorn, 1 process"
    floor_name = f"the same at {FEW} stage types"
    for what, pick in (("median", statistics.median), ("slowest", max)):
        ctx.add(
            f"scrape /metrics over {many:,} stage types, {at}, {what}",
            pick(many_at.ms),
            pick(few_at.ms),
            "ms",
            higher_is_better=False,
            floor_name=floor_name,
            note=note,
        )
    ctx.add(
        f"scrape /metrics over {many:,} stage types, size",
        many_at.size / 1024,
        few_at.size / 1024,
        "KiB",
        higher_is_better=False,
        floor_name=floor_name,
        note=f"{many_at.lines:,} lines ({few_at.lines:,} at {FEW} types)",
    )
    slowest = max(many_at.ms)
    limit = SLOWEST_SHARE * PROMETHEUS_TIMEOUT_MS
    ctx.goal(
        f"scrape /metrics over {many:,} stage types, {at}: slowest < {limit:,.0f} ms "
        f"({SLOWEST_SHARE:.0%} of Prometheus' timeout)",
        slowest < limit,
        f"{slowest:,.0f} ms",
    )
    ratio = many_at.size / few_at.size
    ctx.goal(
        f"scrape /metrics over {many:,} stage types <= {SIZE_RATIO}x the size at {FEW}",
        ratio <= SIZE_RATIO,
        f"{many_at.size / 1024:,.1f} KiB, {ratio:.2f}x",
    )
