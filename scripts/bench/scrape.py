"""Scrape cost against task count (`jobnik bench --only scrape`): GET /service-metrics and GET
/metrics at 100 tasks and at DEPTH tasks, both over TYPES stage types.

Two fresh databases, each with TYPES jobs of one stage of a distinct type, made by the engine:
A then gets 100 tasks through `Jobnik.add_tasks` (one in each of the first 100 stages); B gets
one task in every stage the same way, then DEPTH - TYPES more as copies of those rows (tasks_v1,
queue_v1, and the stages' summaries counting them), inserted by bulk SQL: the rows a scrape
could read, a million of them in about a minute instead of the engine's few minutes. (The log
holds no events for the copies: B's read models are not a replay of its log; nothing here
replays it.) The catch-up projections are brought to the head first.

Both apps are served in this process (the whole ASGI app, through Starlette's test client, no
lifespan: no background threads), and the scrapes alternate between A and B (A B B A ...) so
that other load on the machine hits both alike. Each figure is the median over the samples, B
beside A as its floor. The goals: B's scrape costs at most 1.5x A's, and under 100 ms.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Final
from uuid import UUID

from fastapi.testclient import TestClient

from jobnik.api.main import create_app
from jobnik.domain.application import Jobnik, NewJob, NewStage, NewTask
from jobnik.projections.catchup.registry import CATCH_UP
from jobnik.projections.catchup.runner import catch_up
from jobnik.projections.queries.views import Views
from jobnik.projections.store.base import SqlStore
from jobnik.projections.store.postgres import PostgresStore
from jobnik.scripts.bench.context import Ctx
from jobnik.scripts.bench.dequeue import interleave
from jobnik.scripts.bench.dequeue_scenarios import scenario_store, settle

SMALL: Final = 100
TARGET_RATIO: Final = 1.5
TARGET_MS: Final = 100.0
PATHS: Final = ("/service-metrics", "/metrics")

# A task row's copies: ids from a counter, every other column the template's.
COPY_PG: Final = (
    "INSERT INTO tasks_v1 ({columns}) SELECT {values} "
    "FROM tasks_v1 t, generate_series(1, %(n)s) g WHERE t.id = %(template)s"
)
ID_PG: Final = "('00000000-0000-4000-8000-' || lpad(to_hex(%(base)s + g), 12, '0'))::uuid"
COPY_SQLITE: Final = (
    "WITH RECURSIVE g(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM g WHERE i < :n) "
    "INSERT INTO tasks_v1 ({columns}) SELECT {values} FROM tasks_v1 t, g WHERE t.id = :template"
)
ID_SQLITE: Final = "printf('00000000-0000-4000-8000-%012x', :base + g.i)"
QUEUE_COPIES: Final = (
    "INSERT INTO queue_v1 (task_id, job_id, stage_id, stage_type, priority_rank, seq, "
    "stage_open, job_open) SELECT t.id, q.job_id, q.stage_id, q.stage_type, q.priority_rank, "
    "q.seq, q.stage_open, q.job_open FROM tasks_v1 t JOIN queue_v1 q ON q.task_id = {template} "
    "WHERE t.stage_id = {stage} AND t.id <> {template}"
)
COUNT_COPIES: Final = (
    "UPDATE summaries_v1 SET pending = pending + {n}, total = total + {n} WHERE stage_id = {stage}"
)


def stages(app: Jobnik, types: int, label: str) -> list[UUID]:
    """`types` jobs of one stage each, of distinct types; the stages' ids."""
    out = []
    for j in range(types):
        job = app.create_job(NewJob(name=f"scrape {label} {j}", data={}))
        out.append(app.add_stage(job.id, NewStage(type=f"scrape-{j:05d}", data={})).id)
    return out


def copy_tasks(store: SqlStore, templates: dict[UUID, UUID], per_stage: int) -> None:
    """`per_stage` copies of each stage's template task (`templates`: stage id -> task id)."""
    d = store.dialect
    pg = isinstance(store, PostgresStore)
    with store.cursor(write=True) as cur:
        columns = store.columns_of(cur, "tasks_v1")
        new_id = ID_PG if pg else ID_SQLITE
        values = ", ".join(new_id if c == "id" else f"t.{c}" for c in columns)
        template_sql = COPY_PG if pg else COPY_SQLITE
        copy = template_sql.format(columns=", ".join(columns), values=values)
        for k, (stage, template) in enumerate(templates.items()):
            params = {
                "base": k * (per_stage + 1),
                "n": per_stage,
                "template": d.dump("id", template),
            }
            cur.execute(copy, params)
            marks = {"template": d.param("template"), "stage": d.param("stage")}
            keys = {"template": d.dump("id", template), "stage": d.dump("stage_id", stage)}
            cur.execute(d.params(QUEUE_COPIES.format(**marks)), keys)
            cur.execute(
                d.params(COUNT_COPIES.format(n=int(per_stage), stage=marks["stage"])),
                {"stage": keys["stage"]},
            )


@contextmanager
def scenario(ctx: Ctx, label: str, tasks: int, types: int) -> Iterator[TestClient]:
    """A database of `types` stages and `tasks` tasks (see the module), served."""
    with scenario_store(ctx.backend, f"scrape_{label}", ctx.pg_url, ctx.tmp) as store:
        app = Jobnik(store)
        ids = stages(app, types, label)
        if tasks <= types:
            for stage_id in ids[:tasks]:
                app.add_tasks(stage_id, [NewTask(data={})])
        else:
            templates = {s: app.add_tasks(s, [NewTask(data={})])[0].id for s in ids}
            per_stage = tasks // types - 1
            copy_tasks(store, templates, per_stage)
        for projection in CATCH_UP:
            while catch_up(store, projection, 10_000):
                pass
        settle(store)
        yield TestClient(create_app(app, Views(store)))


def timed(client: TestClient, path: str) -> Callable[[int], float]:
    def scrape(_: int) -> float:
        t0 = time.perf_counter()
        r = client.get(path)
        took = time.perf_counter() - t0
        assert r.status_code == 200, r.text
        return took

    return scrape


def fig_scrape(ctx: Ctx) -> None:
    s = ctx.sizes
    types = s.depth_types
    small = min(SMALL, types)
    samples = max(5, s.depth_samples)
    with scenario(ctx, "a", small, types) as a, scenario(ctx, "b", s.depth, types) as b:
        for path in PATHS:
            for client in (a, b):  # warm-up: first requests compile and cache
                for _ in range(3):
                    timed(client, path)(0)
            ta, tb = interleave(samples, timed(a, path), timed(b, path))
            at_a, at_b = statistics.median(ta) * 1000, statistics.median(tb) * 1000
            ctx.add(
                f"scrape {path} at {s.depth:,} tasks over {types:,} types",
                at_b,
                at_a,
                "ms",
                higher_is_better=False,
                floor_name=f"the same at {small} tasks",
                note=f"median of {samples}, in process",
            )
            ratio = at_b / at_a
            ctx.goal(
                f"scrape {path}: at {s.depth:,} tasks <= {TARGET_RATIO}x at {small}, "
                f"< {TARGET_MS:.0f} ms",
                ratio <= TARGET_RATIO and at_b < TARGET_MS,
                f"{at_b:.1f} ms, {ratio:.2f}x",
            )
