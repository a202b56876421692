"""The two backends' SQL: placeholders, named statements, column types, how values are stored."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from datetime import UTC, datetime
from functools import cached_property
from typing import Any, ClassVar, cast
from uuid import UUID

from psycopg.types.json import Jsonb

from jobnik.projections.inline.limits import FUNCTIONS
from jobnik.projections.store import queries
from jobnik.projections.store.schema import (
    BOOL_COLUMNS,
    JSON_COLUMNS,
    POSITION_COLUMNS,
    TIME_COLUMNS,
    UUID_COLUMNS,
)


class Dialect:
    """PostgreSQL: native uuid, jsonb, timestamptz and boolean columns."""

    name = "postgres"
    # Column types by kind, for the schema's placeholders ({uuid}, {json}, ...).
    types: ClassVar[Mapping[str, str]] = {
        "uuid": "uuid",
        "json": "jsonb",
        "time": "timestamptz",
        "bool": "boolean",
        "false": "false",
    }

    for_update: ClassVar[str] = " FOR UPDATE"  # row locks, where a backend has them
    joins_writes: ClassVar[bool] = True  # independent writes as one statement (executor.py)
    # Every gate of a command worked out in one statement, each gate's rows a LATERAL probe
    # (inline/gates.py); without LATERAL, a read of the gates and a statement per gate.
    laterals: ClassVar[bool] = True
    arrays: ClassVar[bool] = True  # a parameter may be an array (`one_of`'s one parameter)

    @cached_property
    def _named(self) -> dict[str, str]:
        return queries.load(self.name)

    def sql(self, name: str, **slots: str) -> str:
        """The named statement `name` (sql/queries*.sql), its `{slot}`s filled with `slots`."""
        text = self._named[name]
        return text.format(**slots) if slots else text

    def params(self, template: str) -> str:
        """A statement written with `%(name)s` parameters, in this backend's style."""
        return template

    def greatest(self, a: str, b: str) -> str:
        """The larger of two values (neither NULL)."""
        return f"{FUNCTIONS[self.name]['greatest']}({a}, {b})"

    def later_by(self, time: str, seconds: str) -> str:
        """The time `seconds` (a whole number) after `time`."""
        return f"({time}) + ({seconds}) * INTERVAL '1 second'"

    def pipeline(self, raw: Any) -> AbstractContextManager[Any]:
        """Statements on `raw` sent without waiting for each answer, where the driver can."""
        return cast(AbstractContextManager[Any], raw.connection.pipeline())

    def param(self, name: str) -> str:
        return f"%({name})s"

    def value(self, column: str, name: str) -> str:
        """The placeholder of parameter `name` as `column`'s value: a log position goes through
        `jobnik_position` (a write session names it relative to the last event it inserted)."""
        return (
            f"jobnik_position({self.param(name)})"
            if column in POSITION_COLUMNS
            else self.param(name)
        )

    def one_of(self, column: str, name: str, values: Sequence[Any]) -> tuple[str, dict[str, Any]]:
        """The condition `column` is one of `values`, and its parameters (named after `name`):
        one array parameter, so that the statement's text and its number of parameters are the
        same whatever the values (the driver converts such a statement once)."""
        return f"{column} = ANY({self.param(name)})", {name: list(values)}

    def dump(self, column: str, value: Any) -> Any:
        if value is not None and column in JSON_COLUMNS:
            return Jsonb(value)
        return value

    def dump_row(self, row: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
        return {prefix + k: self.dump(k, v) for k, v in row.items()}

    def load(self, row: Mapping[str, Any]) -> dict[str, Any]:
        out = dict(row)
        for k in TIME_COLUMNS.intersection(out):
            if out[k] is not None:
                out[k] = out[k].astimezone(UTC)
        return out

    def load_jsonb(self, row: Mapping[str, Any]) -> dict[str, Any]:
        """A row sent as `to_jsonb(t)` (several tables' rows in one result): uuids and times
        come as strings."""
        out = dict(row)
        for k in UUID_COLUMNS.intersection(out):
            if out[k] is not None:
                out[k] = UUID(out[k])
        for k in TIME_COLUMNS.intersection(out):
            if out[k] is not None:
                out[k] = datetime.fromisoformat(out[k]).astimezone(UTC)
        return out


class SQLiteDialect(Dialect):
    """SQLite: uuids, JSON and ISO-8601 UTC times as TEXT, booleans as 0/1."""

    name = "sqlite"
    types: ClassVar[Mapping[str, str]] = {
        "uuid": "TEXT",
        "json": "TEXT",
        "time": "TEXT",
        "bool": "INTEGER",
        "false": "0",
    }

    for_update: ClassVar[str] = ""  # one writer at a time: nothing to lock row by row
    joins_writes: ClassVar[bool] = False  # (SQLite runs one write per statement)
    laterals: ClassVar[bool] = False
    arrays: ClassVar[bool] = False

    def params(self, template: str) -> str:
        return queries.sqlite_params(template)

    def later_by(self, time: str, seconds: str) -> str:
        # Times are TEXT, 'YYYY-MM-DDTHH:MM:SS.ffffff+00:00' (`dump`): whole seconds are added
        # to the first 19 characters and the fraction and offset kept, so that the sum is exact
        # to the microsecond, as PostgreSQL's and Python's are (strftime keeps milliseconds).
        return (
            f"strftime('%%Y-%%m-%%dT%%H:%%M:%%S', substr({time}, 1, 19), "
            f"'+' || ({seconds}) || ' seconds') || substr({time}, 20)"
        )

    def pipeline(self, raw: Any) -> AbstractContextManager[Any]:
        return nullcontext()

    def param(self, name: str) -> str:
        return f":{name}"

    def value(self, column: str, name: str) -> str:
        return self.param(name)

    def one_of(self, column: str, name: str, values: Sequence[Any]) -> tuple[str, dict[str, Any]]:
        names = {f"{name}{i}": v for i, v in enumerate(values)}
        return f"{column} IN ({', '.join(self.param(n) for n in names)})", names

    def dump(self, column: str, value: Any) -> Any:
        if value is None:
            return None
        if column in JSON_COLUMNS:
            return json.dumps(value, separators=(",", ":"))
        if isinstance(value, UUID):
            return str(value)
        if isinstance(value, datetime):
            return value.astimezone(UTC).isoformat(timespec="microseconds")
        if isinstance(value, bool):
            return int(value)
        return value

    def load(self, row: Mapping[str, Any]) -> dict[str, Any]:
        out = dict(row)
        for k, v in out.items():
            if v is None:
                continue
            if k in JSON_COLUMNS:
                out[k] = json.loads(v)
            elif k in UUID_COLUMNS:
                out[k] = UUID(v)
            elif k in TIME_COLUMNS:
                out[k] = datetime.fromisoformat(v)
            elif k in BOOL_COLUMNS:
                out[k] = bool(v)
        return out


POSTGRES = Dialect()
SQLITE = SQLiteDialect()
