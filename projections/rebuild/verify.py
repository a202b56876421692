"""Verifying projections: replay them into shadows and list every row that differs from the live
tables at the same log position.

The comparison reads a snapshot in which the live tables and the shadows reflect the same log
position (`SqlStore.settled`: writers wait for the final catch-up, or, where one writer holds
the database, for the comparison too). Shadows are dropped afterwards.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from jobnik.projections.catchup import tracking
from jobnik.projections.catchup.projection import CatchUpProjection
from jobnik.projections.catchup.registry import Projection, by_name
from jobnik.projections.rebuild import parallel
from jobnik.projections.rebuild.apply import applier
from jobnik.projections.rebuild.bluegreen import rebuild_lock
from jobnik.projections.rebuild.log import PAGE, read_pages
from jobnik.projections.rebuild.passes import Pass, Progress, fewer_collections, shadows_of
from jobnik.projections.rebuild.shadow import shadow_of
from jobnik.projections.store.base import SqlStore
from jobnik.projections.store.cursor import Cursor
from jobnik.projections.store.names import identity


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
                    for d in compare(store, cur, table, s.projection.keys[table])
                ]
        finally:
            work.drop()


@contextmanager
def _frozen(store: SqlStore, work: Pass, projections: Sequence[Projection]) -> Iterator[Cursor]:
    """A cursor in which every live table and every shadow reflect the same log position."""
    catch_ups = [p for p in projections if isinstance(p, CatchUpProjection)]

    def settle(cur: Cursor) -> None:
        head = work.finish(cur)
        for p in in_lock_order(catch_ups):
            catch_up_in(store, cur, p, head)

    with store.settled(settle) as cur:
        yield cur


def in_lock_order(projections: Sequence[CatchUpProjection]) -> list[CatchUpProjection]:
    """`projections` in the order one transaction locks their rows, by name, as a catch-up
    round does (tracking.locked): two lockers never wait for each other crosswise."""
    return sorted(projections, key=lambda p: p.name)


def catch_up_in(store: SqlStore, cur: Cursor, p: CatchUpProjection, head: int) -> None:
    """Bring a live catch-up projection to `head` inside `cur`'s (write) transaction, as its
    runner would: its registry row locked first, so a round under way commits before."""
    position = tracking.locked(cur, [p.name]).get(p.name)
    if position is None or position >= head:
        return
    live = applier(store, p, identity)
    for notes in read_pages(store, position, PAGE, head, p.topics, cur):
        live(cur, [(n.id, store.decode(n)) for n in notes])
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


def compare(store: SqlStore, cur: Cursor, table: str, key: Sequence[str]) -> list[Difference]:
    """Every row of `table` that differs from its shadow, paired by primary key `key`.

    The database computes the two set differences (EXCEPT), so only differing rows reach Python.
    """
    live_cols = store.columns_of(cur, table)
    shadow_cols = store.columns_of(cur, shadow_of(table))
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
