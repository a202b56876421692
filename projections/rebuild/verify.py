"""Verifying projections: replay them into shadows and list every row that differs from the live
tables at the same log position.

On PostgreSQL the comparison reads a REPEATABLE READ snapshot taken while writers were held back,
so writers wait only for the final catch-up; on SQLite it runs inside the write transaction
(writers wait for the comparison). Shadows are dropped afterwards.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from jobnik.projections.catchup import tracking
from jobnik.projections.catchup.projection import CatchUpProjection
from jobnik.projections.catchup.registry import Projection, by_name
from jobnik.projections.catchup.runner import catch_up
from jobnik.projections.rebuild import parallel
from jobnik.projections.rebuild.apply import applier
from jobnik.projections.rebuild.bluegreen import rebuild_lock
from jobnik.projections.rebuild.log import PAGE, read_pages
from jobnik.projections.rebuild.passes import Pass, Progress, fewer_collections, shadows_of
from jobnik.projections.rebuild.shadow import shadow_of
from jobnik.projections.store.base import SqlStore
from jobnik.projections.store.cursor import Cursor
from jobnik.projections.store.names import checked, identity


def verify(
    store: SqlStore,
    progress: Progress | None = None,
    *,
    names: Sequence[str] | None = None,
    wait: float = 0.0,
    processes: int | None = None,
) -> list[Difference]:
    """Replay projections `names` (all when None) into shadows and list every row that differs
    from the live tables at the same log position. The live tables are not changed, except that
    catch-up projections are first brought up to the head (as their runner would)."""
    projections = by_name(names)
    with rebuild_lock(store, wait=wait), fewer_collections():
        work = Pass(store, shadows_of(store, projections), progress)
        work.create()
        try:
            work.build(processes=parallel.processes(processes))
            with _frozen(store, work, projections) as cur:
                return [
                    d
                    for s in work.shadows
                    for table in s.projection.tables
                    for d in compare(cur, table, s.projection.keys[table])
                ]
        finally:
            work.drop()


@contextmanager
def _frozen(store: SqlStore, work: Pass, projections: Sequence[Projection]) -> Iterator[Cursor]:
    """A cursor in which every live table and every shadow reflect the same log position."""
    catch_ups = [p for p in projections if isinstance(p, CatchUpProjection)]
    if store.pg is None:
        with store.cursor(write=True) as cur:  # SQLite: one writer, so this holds everyone
            head = work.finish(cur)
            for p in catch_ups:
                _catch_up_in(store, cur, p, head)
            yield cur
        return
    with store.cursor(write=False) as snapshot:
        snapshot.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        with store.pg.get_connection() as held, held.transaction(force_rollback=True):
            held.execute(f"LOCK TABLE {store.events_table} IN EXCLUSIVE MODE")  # writers wait
            with store.cursor(write=True, lock=False) as cur:
                head = work.finish(cur)
            for p in catch_ups:
                _catch_up_live(store, p, head)
            snapshot.execute("SELECT 1")  # the snapshot: taken while no writer can commit
        yield snapshot


def _catch_up_live(store: SqlStore, p: CatchUpProjection, head: int) -> None:
    """Bring a live catch-up projection to `head` (the runner may be doing it too)."""
    while tracking.position_of(store, p.name) < head:
        if not catch_up(store, p, PAGE):
            time.sleep(0.01)  # the runner holds the row: its batch moves the position


def _catch_up_in(store: SqlStore, cur: Cursor, p: CatchUpProjection, head: int) -> None:
    """Bring a live catch-up projection to `head` inside `cur`'s (write) transaction."""
    entry = tracking.get(cur, p.name)
    if entry is None or entry.position >= head:
        return
    live = applier(store, p, identity)
    for notes in read_pages(store, entry.position, PAGE, head, p.topics, cur):
        live(cur, [(n.id, store.mapper.to_domain_event(n)) for n in notes])
    tracking.advance(cur, p.name, head)


@dataclass(frozen=True)
class Difference:
    """One row that differs between a live table and its replay (None: the row is missing)."""

    table: str
    key: Mapping[str, Any]
    live: Mapping[str, Any] | None
    replay: Mapping[str, Any] | None

    @property
    def columns(self) -> list[str]:
        """The columns whose values differ (all of them when a side is missing)."""
        if self.live is None or self.replay is None:
            return list((self.live or self.replay or {}).keys())
        return [c for c in self.live if self.live.get(c) != self.replay.get(c)]

    def describe(self) -> str:
        key = ", ".join(f"{k}={v}" for k, v in self.key.items())
        if self.live is None:
            return f"{self.table} [{key}]: missing from the live table"
        if self.replay is None:
            return f"{self.table} [{key}]: in the live table, not in the replay"
        cols = "; ".join(
            f"{c}: live={self.live.get(c)!r} replay={self.replay.get(c)!r}" for c in self.columns
        )
        return f"{self.table} [{key}]: {cols}"


def columns_of(cur: Cursor, table: str) -> list[str]:
    if cur.dialect.name == "postgres":
        rows = cur.raw_all(
            "SELECT column_name FROM information_schema.columns WHERE "
            "table_schema = current_schema() AND table_name = %(t)s ORDER BY ordinal_position",
            {"t": table},
        )
        return [r["column_name"] for r in rows]
    return [r["name"] for r in cur.raw_all(f"PRAGMA table_info({checked(table)})")]


def compare(cur: Cursor, table: str, key: Sequence[str]) -> list[Difference]:
    """Every row of `table` that differs from its shadow, paired by primary key `key`.

    The database computes the two set differences (EXCEPT), so only differing rows reach Python.
    """
    live_cols, shadow_cols = columns_of(cur, table), columns_of(cur, shadow_of(table))
    if live_cols != shadow_cols:
        return [
            Difference(
                table,
                {"columns": "schema"},
                {"columns": ", ".join(live_cols)},
                {"columns": ", ".join(shadow_cols)},
            )
        ]
    cols = ", ".join(live_cols)
    twin = shadow_of(table)
    only_live = cur.all(f"SELECT {cols} FROM {table} EXCEPT SELECT {cols} FROM {twin}")
    only_replay = cur.all(f"SELECT {cols} FROM {twin} EXCEPT SELECT {cols} FROM {table}")

    def pk(row: Mapping[str, Any]) -> tuple[Any, ...]:
        return tuple(row[k] for k in key)

    replayed = {pk(r): r for r in only_replay}
    out = []
    for row in only_live:
        k = pk(row)
        out.append(Difference(table, dict(zip(key, k, strict=True)), row, replayed.pop(k, None)))
    for k, row in replayed.items():
        out.append(Difference(table, dict(zip(key, k, strict=True)), None, row))
    return out
