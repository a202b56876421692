"""The console's jobs page with many jobs in the database (`jobnik bench --only console`).

The jobs table is filled with copies of one job the engine created (new ids, names, statuses and
creation times; the page reads that table only), then `GET /ui/jobs` is timed in process (the
app's own time for the request, no network): its first page, newest first, with its counts per
status, and the same page filtered by status. Floor: the page's three statements (the page's
rows, their total, the counts per status) run bare on the same store.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Final
from uuid import uuid4

from fastapi.testclient import TestClient

from jobnik.api.main import create_app
from jobnik.domain.application import Jobnik, NewJob
from jobnik.domain.statuses import JobStatus
from jobnik.projections.queries.views import Views
from jobnik.projections.startup import migrate
from jobnik.projections.store.backends import open_store
from jobnik.projections.store.base import SqlStore
from jobnik.projections.store.config import library_env
from jobnik.scripts.bench.context import Ctx

TARGET_MS: Final = 300.0
BATCH: Final = 1_000
SAMPLES: Final = 15
VARIED: Final = {"id", "name", "status", "creation_time", "update_time"}
STATUSES: Final = list(JobStatus)


def fill(store: SqlStore, n: int) -> None:
    """`n` jobs in jobs_v1, copies of one the engine created, a second apart."""
    job = Jobnik(store).create_job(NewJob(name="bench console", data={"source": "bench"}))
    p, d = store.dialect.param, store.dialect
    with store.cursor(write=False) as cur:
        template = cur.one(
            f"SELECT * FROM jobs_v1 WHERE id = {p('t')}", {"t": d.dump("id", job.id)}
        )
    assert template is not None
    columns = list(template)
    values = [p(c) if c in VARIED else c for c in columns]
    insert = (
        f"INSERT INTO jobs_v1 ({', '.join(columns)}) SELECT {', '.join(values)} "
        f"FROM jobs_v1 WHERE id = {p('template')}"
    )
    start = template["creation_time"] - timedelta(seconds=n)
    for first in range(0, n - 1, BATCH):
        rows = []
        for i in range(first, min(first + BATCH, n - 1)):
            at = start + timedelta(seconds=i)
            rows.append(
                {
                    "id": d.dump("id", uuid4()),
                    "name": f"bench console {i % 100}",
                    "status": str(STATUSES[i % len(STATUSES)]),
                    "creation_time": d.dump("creation_time", at),
                    "update_time": d.dump("update_time", at),
                    "template": d.dump("id", job.id),
                }
            )
        with store.cursor(write=True) as cur:
            cur.executemany(insert, rows)


def median_ms(run: Callable[[], object], samples: int = SAMPLES) -> float:
    for _ in range(3):  # warm: caches, plans, the templates' compilation
        run()
    times = []
    for _ in range(samples):
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1000


def bare_page(store: SqlStore, status: str | None) -> Callable[[], object]:
    p = store.dialect.param
    where = f" WHERE status = {p('s')}" if status else ""
    params = {"s": status} if status else {}

    def run() -> object:
        with store.cursor(write=False) as cur:
            cur.all(
                f"SELECT * FROM jobs_v1{where} ORDER BY creation_time DESC, id DESC LIMIT 20",
                params,
            )
            cur.one(f"SELECT COUNT(*) AS n FROM jobs_v1{where}", params)
            return cur.all("SELECT status, COUNT(*) AS n FROM jobs_v1 GROUP BY status")

    return run


def fig_console(ctx: Ctx) -> None:
    assert ctx.url is not None
    n = ctx.sizes.console_jobs
    store = open_store(library_env({"JOBNIK_DATABASE_URL": ctx.url}))
    try:
        migrate(store)
        fill(store, n)
        client = TestClient(create_app(Jobnik(store), Views(store)))

        def page(query: str) -> Callable[[], object]:
            def run() -> object:
                r = client.get(f"/ui/jobs{query}")
                assert r.status_code == 200, r.text
                return r

            return run

        first = median_ms(page(""))
        filtered = median_ms(page("?status=COMPLETED"))
        ctx.add(
            f"console jobs page, first of {n:,} jobs",
            first,
            median_ms(bare_page(store, None)),
            "ms",
            higher_is_better=False,
            floor_name="the page's 3 statements",
        )
        ctx.add(
            f"console jobs page, status filter, {n:,} jobs",
            filtered,
            median_ms(bare_page(store, "COMPLETED")),
            "ms",
            higher_is_better=False,
            floor_name="the page's 3 statements",
        )
        ctx.goal(
            f"console: the jobs page's first page at {n:,} jobs < {TARGET_MS:.0f} ms",
            first < TARGET_MS,
            f"{first:.1f} ms (filtered {filtered:.1f} ms)",
        )
    finally:
        store.close()
