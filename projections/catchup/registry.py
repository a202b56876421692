"""Every projection jobnik keeps, with its name and version, and the set-up of its registry rows.

- `inline`: the inline read models (jobs, stages, summaries, tasks, queue, task logs, history
  index, tokens, schedules and their fire keys), one unit: they are written together in the
  transaction of every command.
- `last_status`, `run_stats`, `operations`, `activity`, `schedule_runs`: the catch-up
  projections (runner.py).

A projection's `version` is the version of the code that computes its rows. Bump it whenever that
code changes what it writes (a fixed bug, a new column, a new event handled): at start-up the
registry shows the tables were built by another version and they are rebuilt blue/green
(`JOBNIK_REBUILD_ON_START`, api/main.py). The `_v1` in a table's name is the table's schema
generation, which only a migration changes; a version bump rebuilds under the same names.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Final

from jobnik.projections.catchup import tracking
from jobnik.projections.catchup.activity import Activity
from jobnik.projections.catchup.last_status import LastStatus
from jobnik.projections.catchup.operations import Operations
from jobnik.projections.catchup.projection import CatchUpProjection
from jobnik.projections.catchup.run_stats import RunStats
from jobnik.projections.catchup.schedule_runs import ScheduleRuns
from jobnik.projections.inline.tables import PRIMARY_KEYS, TABLES
from jobnik.projections.store.base import SqlStore
from jobnik.projections.store.dialect import Dialect
from jobnik.projections.store.migrations import schema


class InlineProjection:
    """The inline read models as one projection; its rows come from `inline.project.project`."""

    name = "inline"
    # Bump when inline/ (project.py, task_ops.py, history.py) changes what it writes.
    # 2: a FAILED stage's or job's queued tasks stay in the queue, closed; reruns.
    # 3: a task log append is one row (task_logs_v2).
    version = 3
    tables: tuple[str, ...] = TABLES
    keys: Final = {t: tuple(c.strip() for c in PRIMARY_KEYS[t].split(",")) for t in TABLES}
    topics: tuple[str, ...] = ()  # every event
    # Every row is of one job (or one token), written by its events alone; the rows an Enqueue
    # reads are of its own job (rebuild/parallel.py replays different jobs in different processes).
    per_job = True
    # Indexes no replay statement reads through (the API's lookups: by name, time, type, the
    # claim's, the sweeper's): a rebuild builds them once after the bulk of the replay instead
    # of updating them row by row (the indexes by job and stage stay: barriers delete and
    # update through them).
    late_indexes: frozenset[str] = frozenset(
        {
            "jobs_v1_name",
            "jobs_v1_creation_time",
            "stages_v1_type",
            "tasks_v1_type_status",
            "queue_v1_next",
            "queue_v1_oldest",
            "queue_v1_due",
            "jobs_v1_deadline",
            "stages_v1_deadline",
            "tasks_v1_lease",
            "tasks_v1_delegated",
        }
    )

    def create(self, dialect: Dialect) -> list[str]:
        """The schema's statements that create these tables and their indexes: a shadow built
        from them has the live tables' columns, in the live tables' order (a migrated database
        has the schema's, tests/integration/test_migrations.py)."""
        mentions = re.compile(r"\b(" + "|".join(self.tables) + r")\b").search
        return [s for s in schema(dialect) if s.startswith(TABLE_OR_INDEX) and mentions(s)]


# (the schema's functions name these tables too: they are the live tables', never a shadow's)
TABLE_OR_INDEX: Final = ("CREATE TABLE", "CREATE INDEX", "CREATE UNIQUE INDEX")
Projection = InlineProjection | CatchUpProjection

INLINE: Final = InlineProjection()
CATCH_UP: Final[tuple[CatchUpProjection, ...]] = (
    LastStatus(),
    RunStats(),
    Operations(),
    Activity(),
    ScheduleRuns(),
)
ALL: Final[tuple[Projection, ...]] = (INLINE, *CATCH_UP)


def by_name(names: Sequence[str] | None = None) -> list[Projection]:
    """The projections named (all when None), in registry order; ValueError for an unknown one."""
    if names is None:
        return list(ALL)
    known = {p.name: p for p in ALL}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"unknown projection(s) {unknown}; known: {sorted(known)}")
    return [p for p in ALL if p.name in names]


def ensure(store: SqlStore) -> None:
    """Register every projection not registered yet, creating a catch-up projection's tables.

    A new inline unit is registered at the log's head (migrations keep its tables current); a new
    catch-up projection at position 0, so its runner replays the whole log into it.
    """
    with store.cursor(write=True) as cur:
        known = tracking.entries(cur)
        head = store.log_head(cur)
        for p in ALL:
            if p.name in known:
                continue
            if isinstance(p, CatchUpProjection):
                for statement in p.create(store.dialect):
                    cur.execute(statement)
            tracking.register(cur, p.name, p.version, head if p is INLINE else 0)


@dataclass(frozen=True)
class Status:
    """One line of `jobnik projections status`."""

    name: str
    version: int  # the code's
    built_version: int | None  # the rows' (None: not registered yet)
    position: int
    head: int
    rebuilt_at: datetime | None
    inline: bool

    @property
    def stale(self) -> bool:
        """The rows were built by another version of the code."""
        return self.built_version is not None and self.built_version != self.version

    @property
    def outdated(self) -> bool:
        """The rows were built by an older version: a start-up rebuild is due. (Rows built by a
        newer version, e.g. during a rolling deploy, are left to the newer processes.)"""
        return self.built_version is not None and self.built_version < self.version

    @property
    def lag(self) -> int:
        return 0 if self.inline else max(0, self.head - self.position)


def status(store: SqlStore) -> list[Status]:
    with store.cursor(write=False) as cur:
        known = tracking.entries(cur)
        head = store.log_head(cur)
    out = []
    for p in ALL:
        entry = known.get(p.name)
        inline = p is INLINE
        out.append(
            Status(
                p.name,
                p.version,
                entry.version if entry else None,
                head if inline else (entry.position if entry else 0),
                head,
                entry.rebuilt_at if entry else None,
                inline,
            )
        )
    return out


def outdated(store: SqlStore, among: Sequence[Projection] = ALL) -> list[Projection]:
    """Projections (of `among`) whose rows were built by an older version of their code."""
    names = {s.name for s in status(store) if s.outdated}
    return [p for p in among if p.name in names]
