"""Shadow tables for blue/green rebuilds: `<table>__next` next to every live table, then a swap.

A projection's SQL (its DDL, the executor's statements) names its live tables; `Renamer` rewrites
those names, and every index name that starts with one (all of ours do: `jobs_v1_name`,
`queue_v1_next`, a primary key's `jobs_v1_pkey`), to the shadow names. `swap` then drops the live
tables and renames the shadows in the caller's transaction, and the store gives their indexes
their live names (`SqlStore.restore_index_names`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from functools import cache
from typing import Final

from jobnik.projections.store.base import SqlStore
from jobnik.projections.store.cursor import Cursor
from jobnik.projections.store.names import checked

SHADOW: Final = "__next"


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


def drop_shadows(cur: Cursor, tables: Iterable[str]) -> None:
    for table in tables:
        cur.execute(f"DROP TABLE IF EXISTS {shadow_of(table)}")


def swap(store: SqlStore, cur: Cursor, tables: Sequence[str]) -> None:
    """Replace each live table by its shadow, indexes and all (the caller's transaction)."""
    for table in tables:
        cur.execute(f"DROP TABLE IF EXISTS {checked(table)}")
    for table in tables:
        cur.execute(f"ALTER TABLE {shadow_of(table)} RENAME TO {table}")
    for table in tables:
        store.restore_index_names(cur, table, SHADOW)
