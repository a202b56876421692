"""The dequeue benchmark's scenarios: fresh databases filled through the engine's commands."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

from jobnik.domain.application import Jobnik, NewJob, NewStage, NewTask
from jobnik.projections.startup import migrate
from jobnik.projections.store.backends import open_store
from jobnik.projections.store.base import SqlStore
from jobnik.projections.store.config import library_env
from jobnik.projections.store.postgres import PostgresStore
from jobnik.projections.store.sqlite import SqliteStore
from jobnik.scripts.bench.databases import fresh_database

BATCH = 1_000
TABLES = ("queue_v1", "tasks_v1", "summaries_v1", "stages_v1", "jobs_v1")


def say(line: str = "") -> None:
    print(line, flush=True)


# -- databases ---------------------------------------------------------------------------------


@contextmanager
def scenario_database(backend: str, label: str, pg_url: str, tmp: Path) -> Iterator[str]:
    """The URL of a fresh database for one scenario; dropped (or deleted) afterwards."""
    if backend == "postgres":
        with fresh_database(pg_url, f"jobnik_bench_{os.getpid()}_{label}") as url:
            yield url
    else:
        yield f"sqlite:///{tmp / f'bench_{label}.db'}"


@contextmanager
def opened(url: str) -> Iterator[SqlStore]:
    """The store on database `url`, migrated; closed afterwards."""
    store = open_store(library_env({"JOBNIK_DATABASE_URL": url}))
    try:
        migrate(store)
        yield store
    finally:
        store.close()


@contextmanager
def scenario_store(backend: str, label: str, pg_url: str, tmp: Path) -> Iterator[SqlStore]:
    """A fresh, migrated database for one scenario; dropped (or deleted) afterwards."""
    with scenario_database(backend, label, pg_url, tmp) as url, opened(url) as store:
        yield store


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


# A delayed task's not-before time: long after any run ends.
LATER: Final = datetime(2100, 1, 1, tzinfo=UTC)


def populate(sc: Scenario, depth: int, types: int, backend: str, delayed: int = 0) -> None:
    """`types` jobs x 1 stage (of a distinct type) x depth/types tasks, in batches of BATCH,
    each stage's queued tasks followed by delayed/types delayed ones (not before LATER)."""
    per_type, extra = divmod(depth, types)
    late, late_extra = divmod(delayed, types)
    depth += delayed
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
        later = late + (1 if j < late_extra else 0)
        for first in range(0, count + later, BATCH):
            n = min(BATCH, count + later - first)
            sc.app.add_tasks(
                stage.id,
                [
                    NewTask(data={"i": i}, not_before=LATER if i >= count else None)
                    for i in range(first, first + n)
                ],
            )
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
