"""Shadow tables for blue/green rebuilds: `<table>__next` next to every live table, then a swap.

A projection's SQL (its DDL, the executor's statements) names its live tables; `Renamer` rewrites
those names, and every index name that starts with one (all of ours do: `jobs_v1_name`,
`queue_v1_next`, PostgreSQL's `jobs_v1_pkey`), to the shadow names. `swap` then drops the live
tables and renames the shadows in the caller's transaction. PostgreSQL renames the indexes back
too; SQLite cannot rename an index, so it drops the shadow-named ones and builds them again under
their live names, inside the same transaction (on SQLite the swap takes as long as those index
builds; on PostgreSQL it is catalogue updates only).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any, Final

from jobnik.projections.store import Cursor

SHADOW: Final = "__next"
_NAME: Final = re.compile(r"^[a-z_][a-z0-9_]*$")


def checked(name: str) -> str:
    """`name` if it is a plain lower-case identifier (table names are formatted into SQL)."""
    if not _NAME.match(name):
        raise ValueError(f"not a plain identifier: {name!r}")
    return name


def shadow_of(table: str) -> str:
    return checked(table) + SHADOW


def live_of(name: str) -> str:
    """The live name of a shadow table or index (`jobs_v1__next_name` → `jobs_v1_name`)."""
    return name.replace(SHADOW, "", 1)


class Renamer:
    """Rewrites SQL so that it names the shadow twins of `tables` (and of their indexes)."""

    def __init__(self, tables: Iterable[str]) -> None:
        names = sorted({checked(t) for t in tables}, key=len, reverse=True)  # longest first
        self.pattern = re.compile(r"\b(" + "|".join(names) + r")(?=_|\b)")
        self._cached = cache(self._rename)

    def _rename(self, sql: str) -> str:
        return self.pattern.sub(lambda m: m.group(1) + SHADOW, sql)

    def __call__(self, sql: str) -> str:
        return self._cached(sql)

    def mentions(self, sql: str) -> bool:
        return self.pattern.search(sql) is not None


def identity(sql: str) -> str:
    return sql


def drop_shadows(cur: Cursor, tables: Iterable[str]) -> None:
    for table in tables:
        cur.execute(f"DROP TABLE IF EXISTS {shadow_of(table)}")


def swap(cur: Cursor, tables: Sequence[str]) -> None:
    """Replace each live table by its shadow, indexes and all (the caller's transaction)."""
    for table in tables:
        cur.execute(f"DROP TABLE IF EXISTS {checked(table)}")
    for table in tables:
        cur.execute(f"ALTER TABLE {shadow_of(table)} RENAME TO {table}")
    if cur.dialect.name == "postgres":
        for table in tables:
            rows = cur.raw_all(
                "SELECT indexname FROM pg_indexes WHERE schemaname = current_schema() "
                "AND tablename = %(t)s",
                {"t": table},
            )
            for r in rows:
                name = r["indexname"]
                if SHADOW in name:
                    cur.execute(f"ALTER INDEX {checked(name)} RENAME TO {live_of(name)}")
        return
    for table in tables:
        rows = cur.raw_all(
            "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND tbl_name = :t "
            "AND sql IS NOT NULL",
            {"t": table},
        )
        for r in rows:
            if SHADOW in r["name"]:
                cur.execute(f"DROP INDEX {checked(r['name'])}")
                cur.execute(r["sql"].replace(SHADOW, ""))


# -- comparing a shadow with its live table -----------------------------------------------------


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
