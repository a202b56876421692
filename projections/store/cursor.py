"""The read/write cursor every store hands out: one dialect, plain dict rows."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from jobnik.projections.store.dialect import Dialect


class Cursor:
    """A DB cursor that speaks one dialect and returns plain dict rows."""

    def __init__(self, raw: Any, dialect: Dialect) -> None:
        self.raw = raw
        self.dialect = dialect
        # Seconds its transaction waited for the writer lock (None: it took none, or untimed).
        self.lock_wait: float | None = None

    def execute(self, sql: str, params: Mapping[str, Any] | Sequence[Any] = ()) -> None:
        self.raw.execute(sql, params)

    def executemany(self, sql: str, params: Sequence[Mapping[str, Any]]) -> None:
        self.raw.executemany(sql, params)

    def one(
        self, sql: str, params: Mapping[str, Any] | Sequence[Any] = ()
    ) -> dict[str, Any] | None:
        self.raw.execute(sql, params)
        row = self.raw.fetchone()
        return self.dialect.load(dict(row)) if row is not None else None

    def raw_all(
        self, sql: str, params: Mapping[str, Any] | Sequence[Any] = ()
    ) -> list[dict[str, Any]]:
        """Rows as the driver returns them (no column conversions)."""
        self.raw.execute(sql, params)
        return [dict(r) for r in self.raw.fetchall()]

    def columns(self, table: str) -> list[str]:
        """The names of `table`'s columns, in its order."""
        self.raw.execute(f"SELECT * FROM {table} LIMIT 0")
        return [d[0] for d in self.raw.description]

    def later(self, work: Callable[[Cursor], Any]) -> None:
        """`work(self)`, in order with this cursor's statements (here: now; a rebuild's page
        writer runs it later, on its thread)."""
        work(self)

    def all(self, sql: str, params: Mapping[str, Any] | Sequence[Any] = ()) -> list[dict[str, Any]]:
        self.raw.execute(sql, params)
        return [self.dialect.load(dict(r)) for r in self.raw.fetchall()]
