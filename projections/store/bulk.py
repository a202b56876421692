"""A rebuild's folded pages written into shadow tables in bulk (rebuild/fold.py decides what).

PostgreSQL: one `DELETE ... USING unnest(...)` per table, binary COPY for new rows, one
`UPDATE ... FROM unnest(...)` per table and column set, whatever the number of rows, and the
history index joined from the event log itself. SQLite (no network): `executemany`.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Any, Final

from psycopg.types.json import Jsonb

from jobnik.projections.inline.ops import IndexEvent
from jobnik.projections.inline.tables import ENTITY_JOBS, JOB_EVENTS, KEYS
from jobnik.projections.store.cursor import Cursor
from jobnik.projections.store.executor import OpExecutor
from jobnik.projections.store.names import checked
from jobnik.projections.store.schema import JSON_COLUMNS

_INT: Final = re.compile(r"^\(?'?(-?\d+)'?\)?(::\w+)?$")
Patch = tuple[tuple[Any, ...], dict[str, Any], dict[str, int]]  # key, values set, deltas added


@dataclass
class Column:
    type: str  # PostgreSQL's name for the column's type (array casts), or SQLite's declared type
    default: int | None  # an integer DEFAULT, else None
    has_default: bool
    oid: int = 0  # PostgreSQL's type oid (binary COPY)


def column(type_: str, default: str | None, oid: int = 0) -> Column:
    if default is None:
        return Column(type_, None, False, oid)
    m = _INT.match(default.strip())
    return Column(type_, int(m.group(1)) if m else None, True, oid)


class BulkWriter(ABC):
    """Writes rows into the tables `rename` names; `columns` caches each table's columns."""

    def __init__(self, executor: OpExecutor, rename: Callable[[str], str]) -> None:
        self.executor = executor
        self.d = executor.d
        self.rename = rename
        self.columns: dict[str, dict[str, Column]] = {}

    def begin(self, cur: Cursor) -> None:  # noqa: B027 - a hook, often empty
        """Before a page's statements."""

    def types(self, cur: Cursor, table: str) -> dict[str, Column]:
        """The columns of `table` (by its live name)."""
        if table not in self.columns:
            self.columns[table] = {
                r["name"]: column(r["type"], r["dflt"], r.get("oid", 0))
                for r in self._catalog(cur, self.rename(table))
            }
        return self.columns[table]

    @abstractmethod
    def _catalog(self, cur: Cursor, name: str) -> list[dict[str, Any]]:
        """The columns of table `name`: name, type, dflt (its DEFAULT's text), oid."""

    @abstractmethod
    def load(self, cur: Cursor, table: str, ids: Sequence[Any]) -> list[dict[str, Any]]:
        """The stored rows of `table` whose `id` is one of `ids`."""

    @abstractmethod
    def delete(self, cur: Cursor, table: str, keys: list[tuple[Any, ...]]) -> None:
        """Delete the rows of `table` with these primary keys."""

    @abstractmethod
    def insert(
        self, cur: Cursor, table: str, cols: tuple[str, ...], rows: list[dict[str, Any]]
    ) -> None:
        """Insert `rows`, each with the columns `cols`."""

    @abstractmethod
    def update(
        self,
        cur: Cursor,
        table: str,
        set_cols: tuple[str, ...],
        add_cols: tuple[str, ...],
        items: list[Patch],
    ) -> None:
        """Set `set_cols` and add to `add_cols` of each row an item's key names."""

    @abstractmethod
    def index(self, cur: Cursor, index: Sequence[tuple[Any, int]]) -> None:
        """File each (aggregate, position) under the aggregate's job in the history index."""


class PostgresBulk(BulkWriter):
    def __init__(self, executor: OpExecutor, rename: Callable[[str], str], events: str) -> None:
        super().__init__(executor, rename)
        self.events = events  # the event log's table (`index` reads it)

    def begin(self, cur: Cursor) -> None:
        # The shadows have no statistics: the planner would hash-join each page's keys with a
        # scan of the whole table (a rebuild quadratic in the log). Probe the primary key.
        cur.execute("SET LOCAL enable_hashjoin = off")
        cur.execute("SET LOCAL enable_mergejoin = off")

    def _catalog(self, cur: Cursor, name: str) -> list[dict[str, Any]]:
        return cur.raw_all(
            "SELECT a.attname AS name, format_type(a.atttypid, a.atttypmod) AS type, "
            "a.atttypid::int AS oid, "
            "pg_get_expr(d.adbin, d.adrelid) AS dflt FROM pg_attribute a "
            "LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum "
            "WHERE a.attrelid = %(t)s::regclass AND a.attnum > 0 AND NOT a.attisdropped",
            {"t": name},
        )

    def load(self, cur: Cursor, table: str, ids: Sequence[Any]) -> list[dict[str, Any]]:
        return cur.all(
            self.rename(f"SELECT * FROM {table} WHERE id = ANY(%(ids)b)"), {"ids": list(ids)}
        )

    def _arrays(
        self, cur: Cursor, table: str, cols: Sequence[str], rows: Iterable[Sequence[Any]]
    ) -> tuple[str, dict[str, Any]]:
        """`unnest(%(a0)s::type[], ...) AS v(col, ...)` and its parameters."""
        types = self.types(cur, table)
        columns = list(zip(*rows, strict=True))
        params = {  # binary arrays: psycopg dumps them many times faster than text ones
            f"a{i}": [Jsonb(v) if v is not None else v for v in values]
            if c in JSON_COLUMNS
            else list(values)
            for i, (c, values) in enumerate(zip(cols, columns, strict=True))
        }
        casts = ", ".join(f"%(a{i})b::{types[c].type}[]" for i, c in enumerate(cols))
        return f"unnest({casts}) AS v({', '.join(map(checked, cols))})", params

    def delete(self, cur: Cursor, table: str, keys: list[tuple[Any, ...]]) -> None:
        pk = KEYS[table]
        source, params = self._arrays(cur, table, pk, keys)
        match = " AND ".join(f"t.{c} = v.{c}" for c in pk)
        cur.execute(self.rename(f"DELETE FROM {table} t USING {source} WHERE {match}"), params)

    def insert(
        self, cur: Cursor, table: str, cols: tuple[str, ...], rows: list[dict[str, Any]]
    ) -> None:
        # Binary COPY: no SQL to parse, rows formatted in C; jsonb values dumped as they are.
        types = self.types(cur, table)
        names = ", ".join(map(checked, cols))
        get = itemgetter(*cols)
        statement = self.rename(f"COPY {table} ({names}) FROM STDIN (FORMAT BINARY)")
        oids = [types[c].oid for c in cols]
        data = [get(r) for r in rows] if len(cols) > 1 else [(get(r),) for r in rows]
        cur.later(lambda c: _copy(c, statement, oids, data))  # `data`: a snapshot of `rows`

    def update(
        self,
        cur: Cursor,
        table: str,
        set_cols: tuple[str, ...],
        add_cols: tuple[str, ...],
        items: list[Patch],
    ) -> None:
        pk = KEYS[table]
        cols = (*pk, *set_cols, *add_cols)
        source, params = self._arrays(
            cur,
            table,
            cols,
            ([*k, *(s[c] for c in set_cols), *(a[c] for c in add_cols)] for k, s, a in items),
        )
        assign = [f"{c} = v.{c}" for c in set_cols] + [f"{c} = t.{c} + v.{c}" for c in add_cols]
        match = " AND ".join(f"t.{c} = v.{c}" for c in pk)
        cur.execute(
            self.rename(f"UPDATE {table} t SET {', '.join(assign)} FROM {source} WHERE {match}"),
            params,
        )

    def index(self, cur: Cursor, index: Sequence[tuple[Any, int]]) -> None:
        first, last = index[0][1], index[-1][1]
        if last - first + 1 == len(index):
            # Every event from `first` to `last` is here (the usual case): the server joins
            # them from the log itself, no ids to send.
            cur.execute(
                self.rename(
                    f"INSERT INTO {JOB_EVENTS} (job_id, position) "
                    f"SELECT e.job_id, s.notification_id FROM {self.events} s "
                    f"JOIN {ENTITY_JOBS} e ON e.entity_id = s.originator_id "
                    "WHERE s.notification_id BETWEEN %(first)s AND %(last)s"
                ),
                {"first": first, "last": last},
            )
            return
        cur.execute(
            self.rename(
                f"INSERT INTO {JOB_EVENTS} (job_id, position) SELECT e.job_id, v.position "
                "FROM unnest(%(ids)b::uuid[], %(positions)b::bigint[]) AS v(id, position) "
                f"JOIN {ENTITY_JOBS} e ON e.entity_id = v.id"
            ),
            {"ids": [i for i, _ in index], "positions": [p for _, p in index]},
        )


def _copy(cur: Cursor, statement: str, oids: list[int], rows: list[Sequence[Any]]) -> None:
    with cur.raw.copy(statement) as copy:
        copy.set_types(oids)
        for r in rows:
            copy.write_row(r)


class SqliteBulk(BulkWriter):
    def _catalog(self, cur: Cursor, name: str) -> list[dict[str, Any]]:
        return [
            {"name": r["name"], "type": r["type"], "dflt": r["dflt_value"]}
            for r in cur.raw_all(f"PRAGMA table_info({checked(name)})")
        ]

    def load(self, cur: Cursor, table: str, ids: Sequence[Any]) -> list[dict[str, Any]]:
        found = []
        for start in range(0, len(ids), 500):
            part = {f"v{i}": self.d.dump("id", v) for i, v in enumerate(ids[start:][:500])}
            marks = ", ".join(f":{k}" for k in part)
            found += cur.all(self.rename(f"SELECT * FROM {table} WHERE id IN ({marks})"), part)
        return found

    def delete(self, cur: Cursor, table: str, keys: list[tuple[Any, ...]]) -> None:
        pk = KEYS[table]
        where = " AND ".join(f"{c} = :{c}" for c in pk)
        cur.executemany(
            self.rename(f"DELETE FROM {table} WHERE {where}"),
            [{c: self.d.dump(c, v) for c, v in zip(pk, k, strict=True)} for k in keys],
        )

    def insert(
        self, cur: Cursor, table: str, cols: tuple[str, ...], rows: list[dict[str, Any]]
    ) -> None:
        names = ", ".join(map(checked, cols))
        marks = ", ".join(f":{c}" for c in cols)
        cur.executemany(
            self.rename(f"INSERT INTO {table} ({names}) VALUES ({marks})"),
            [self.d.dump_row(r) for r in rows],
        )

    def update(
        self,
        cur: Cursor,
        table: str,
        set_cols: tuple[str, ...],
        add_cols: tuple[str, ...],
        items: list[Patch],
    ) -> None:
        pk = KEYS[table]
        sets = [f"{c} = :s_{c}" for c in set_cols] + [f"{c} = {c} + :a_{c}" for c in add_cols]
        where = " AND ".join(f"{c} = :k_{c}" for c in pk)
        cur.executemany(
            self.rename(f"UPDATE {table} SET {', '.join(sets)} WHERE {where}"),
            [
                {
                    **{f"k_{c}": self.d.dump(c, v) for c, v in zip(pk, k, strict=True)},
                    **{f"s_{c}": self.d.dump(c, s[c]) for c in set_cols},
                    **{f"a_{c}": a[c] for c in add_cols},
                }
                for k, s, a in items
            ],
        )

    def index(self, cur: Cursor, index: Sequence[tuple[Any, int]]) -> None:
        statement = self.executor.statement(IndexEvent(index[0][0], 0))[0]  # (renamed)
        cur.executemany(
            statement,
            [{"entity_id": self.d.dump("entity_id", i), "position": p} for i, p in index],
        )
