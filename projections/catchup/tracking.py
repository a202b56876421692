"""The projection registry `jobnik_projections`: per projection its version and tracking position.

`version` is the version of the projection code that built the rows now in its tables, `position`
the log position those rows reflect (for a catch-up projection: its tracking position, written in
the same transaction as its rows; for the inline read models: the position their last rebuild
swapped in at, after which every write keeps them current), `rebuilt_at` when a rebuild last
swapped them in.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from jobnik.projections.store.base import SqlStore
from jobnik.projections.store.cursor import Cursor

TABLE: Final = "jobnik_projections"


@dataclass(frozen=True)
class Entry:
    name: str
    version: int
    position: int
    rebuilt_at: datetime | None


def _entry(row: dict[str, Any] | None) -> Entry | None:
    if row is None:
        return None
    rebuilt = row["rebuilt_at"]
    return Entry(
        str(row["name"]),
        int(row["version"]),
        int(row["position"]),
        rebuilt if isinstance(rebuilt, datetime) else None,
    )


def get(cur: Cursor, name: str) -> Entry | None:
    """The registry row of `name`."""
    sql = f"SELECT * FROM jobnik_projections WHERE name = {cur.dialect.param('n')}"
    return _entry(cur.one(sql, {"n": name}))


def locked(cur: Cursor, names: Sequence[str]) -> dict[str, int]:
    """The positions of `names`, their rows locked (where rows lock) until the transaction ends, in
    name order (two lockers of the same rows never wait for each other crosswise): how a
    catch-up round and a rebuild's swap take turns."""
    lock = f" ORDER BY name{cur.dialect.for_update}"
    listed, params = _listed(cur, names)
    rows = cur.all(
        f"SELECT name, position FROM jobnik_projections WHERE name IN ({listed}){lock}", params
    )
    return {str(r["name"]): int(r["position"]) for r in rows}


def entries(cur: Cursor) -> dict[str, Entry]:
    rows = cur.all("SELECT * FROM jobnik_projections ORDER BY name")
    return {e.name: e for e in (_entry(r) for r in rows) if e is not None}


def register(cur: Cursor, name: str, version: int, position: int) -> None:
    """Add `name` if it is not registered yet (concurrent starts: the first one wins)."""
    p = cur.dialect.param
    cur.execute(
        f"INSERT INTO jobnik_projections (name, version, position, rebuilt_at) VALUES "
        f"({p('n')}, {p('v')}, {p('p')}, NULL) ON CONFLICT (name) DO NOTHING",
        {"n": name, "v": version, "p": position},
    )


def advance(cur: Cursor, names: str | Sequence[str], position: int) -> None:
    """Move the position of `names` (a name, or several: in one statement) to `position`."""
    listed, params = _listed(cur, [names] if isinstance(names, str) else names)
    cur.execute(
        f"UPDATE jobnik_projections SET position = {cur.dialect.param('p')} "
        f"WHERE name IN ({listed})",
        {**params, "p": position},
    )


def _listed(cur: Cursor, names: Sequence[str]) -> tuple[str, dict[str, Any]]:
    """The parameter marks of an `IN (...)` list of `names`, and their parameters."""
    params: dict[str, Any] = {f"n{i}": name for i, name in enumerate(names)}
    return ", ".join(cur.dialect.param(k) for k in params), params


def record_rebuild(cur: Cursor, name: str, version: int, position: int, at: datetime) -> None:
    p = cur.dialect.param
    cur.execute(
        f"UPDATE jobnik_projections SET version = {p('v')}, position = {p('p')}, "
        f"rebuilt_at = {p('at')} WHERE name = {p('n')}",
        {"n": name, "v": version, "p": position, "at": cur.dialect.dump("rebuilt_at", at)},
    )


def position_of(store: SqlStore, name: str) -> int:
    """The tracking position of `name` (0 when it is not registered)."""
    with store.cursor(write=False) as cur:
        entry = get(cur, name)
    return entry.position if entry else 0
