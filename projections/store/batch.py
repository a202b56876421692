"""PostgreSQL write sessions in few round trips: statements queue up and travel as one string.

A write command is a handful of reads and a dozen small writes. Sent one by one, each costs a
round trip and more client CPU in the driver than the domain work itself (docs/performance.md).
Here writes are rendered client-side and queued; a
read, or the commit, sends everything queued as one multi-statement string, and the results come
back as that many result sets, in order. `BEGIN` rides with the first string and
`COMMIT` with the last, on a connection in autocommit mode, so a write command that reads once is
two round trips.

A statement that fails stops the string (PostgreSQL runs none after it) and aborts the
transaction; the session then rolls back. Serialisation failures and deadlocks surface as the
domain's `ConcurrencyConflict`, which the command layer retries.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from datetime import UTC, datetime
from typing import Any, Final
from uuid import UUID
from weakref import WeakKeyDictionary

import psycopg
from psycopg import generators, pq
from psycopg.adapt import Transformer

from jobnik.domain.errors import ConcurrencyConflict, DatabaseError
from jobnik.projections.store import merge
from jobnik.projections.store.cursor import Cursor
from jobnik.projections.store.dialect import Dialect
from jobnik.projections.store.shapes import HOT_ROWS, prepared_form, rows_of, values_row

try:  # a span per round trip when the process traces (the psycopg instrumentation sees
    # cursors only, and these strings go to libpq directly); without OpenTelemetry, nothing
    from opentelemetry import trace as _trace
except ImportError:
    _trace = None  # type: ignore[assignment]

# SQLSTATEs that mean "run the command again": serialization_failure (our stale-read check
# raises it), deadlock_detected, unique_violation (an aggregate version taken meanwhile).
RETRYABLE: Final = frozenset({"40001", "40P01", "23505"})


def _error(res: pq.abc.PGresult, encoding: str) -> Exception:
    """The domain's error for a failed statement: ConcurrencyConflict when running the command
    again can succeed, else DatabaseError."""
    state = (res.error_field(pq.DiagnosticField.SQLSTATE) or b"").decode()
    message = (res.error_message or b"").decode(encoding, "replace").strip()
    if state in RETRYABLE:
        return ConcurrencyConflict(f"concurrent update, run again: {message}")
    return DatabaseError(f"database error: {message}")


class _Server:
    """What write sessions keep of their connection's server session, looked up once per
    session instead of per statement: the statements prepared on it and the adapters'
    transformer."""

    __slots__ = ("pid", "prepared", "tx")

    def __init__(self, conn: psycopg.Connection[Any], pid: int) -> None:
        self.pid = pid
        self.prepared: set[str] = set()
        self.tx = Transformer(conn)


# Per pooled connection; keyed also by its backend's pid: a new server session has prepared
# nothing.
_SERVERS: WeakKeyDictionary[psycopg.Connection[Any], _Server] = WeakKeyDictionary()


def _server(conn: psycopg.Connection[Any]) -> _Server:
    pid = conn.pgconn.backend_pid
    server = _SERVERS.get(conn)
    if server is None or server.pid != pid:
        server = _SERVERS[conn] = _Server(conn, pid)
    return server


def _text(value: str) -> str | None:
    if "\x00" in value:  # PostgreSQL text holds no NUL: psycopg's adapter refuses it
        return None
    return "'" + value.replace("'", "''") + "'"


def _time(value: datetime) -> str | None:
    # UTC only (jobnik's own times): an offset in seconds or microseconds is not PostgreSQL input
    return f"'{value.isoformat()}'::timestamptz" if value.tzinfo is UTC else None


def _uuids(values: list[Any]) -> str | None:
    """An array of uuids (a batch's keys, `= ANY(...)`); anything else goes through psycopg."""
    if values and all(type(v) is UUID for v in values):
        return "'{" + ",".join(v.hex for v in values) + "}'::uuid[]"
    return None


# The literals of the types every command sends, rendered directly: several times cheaper than
# psycopg's adapters, a measured gain on the engine's lifecycle figure (docs/performance.md).
# Valid only under standard_conforming_strings (a backslash is itself inside '...'), which each
# cursor checks; any other type, or a value these decline (None), goes through psycopg.
# tests/integration/test_batch_literals.py reads every kind back through PostgreSQL.
_FAST: Final[dict[type, Callable[[Any], str | None]]] = {
    UUID: lambda v: f"'{v.hex}'::uuid",  # (valid uuid input, cheaper than str())
    str: _text,
    int: lambda v: str(v) if v >= 0 else f" {v}",  # (a space: `x -%s` must not become `x --1`)
    bool: lambda v: "true" if v else "false",
    datetime: _time,
    bytes: lambda v: f"'\\x{v.hex()}'::bytea",
    list: _uuids,
}


FLUSH: Final = "SELECT pg_logical_emit_message(true, 'jobnik.flush', '')"


class Sql(str):
    """A SQL expression passed where a value goes: rendered verbatim, not quoted.

    The write path passes each event's log position as `(currval(...) - k)`: the ids are
    assigned by the same string that uses them, so no round trip waits for them."""


class Later:
    """A query's rows, filled in when its string has been sent."""

    __slots__ = ("rows",)

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] | None = None


class BatchCursor(Cursor):
    """The write session's cursor: the `Cursor` interface over queued statements.

    Values are rendered as literals by psycopg's adapters (`Transformer.as_literal`, the same
    call `ClientCursor.mogrify` makes per value, without re-parsing each statement); the string
    goes out through libpq (`send_query`) and its results come back as libpq results, of which
    only the wanted ones are turned into rows: a cursor would step through every result."""

    def __init__(
        self, conn: psycopg.Connection[Any], dialect: Dialect, first: Sequence[str] = ()
    ) -> None:
        super().__init__(None, dialect)
        self.conn = conn
        self.first = list(first)  # statements the transaction begins with, after BEGIN
        self.began = False
        self.locked = False  # set by the session once it queued the writer lock
        self._queue: list[str] = []
        self._wanted: dict[int, Later] = {}
        self._preparing: dict[int, str] = {}  # queue index -> name of a PREPARE
        server = _server(conn)
        self._prepared = server.prepared
        self._tx = server.tx
        info = conn.info  # (settings a session may change: read per transaction)
        self._encoding = info.encoding
        self._fast = info.parameter_status("standard_conforming_strings") == "on"

    def _literal(self, value: Any) -> str:
        if value is None:
            return "NULL"
        render = _FAST.get(type(value)) if self._fast else None
        if render is not None and (text := render(value)) is not None:
            return text
        if type(value) is Sql:
            return value
        return self._tx.as_literal(value).decode(self._encoding)

    def execute(self, sql: str, params: Mapping[str, Any] | Sequence[Any] = ()) -> None:
        if not params:
            self._queue.append(sql)
        elif isinstance(params, Mapping):
            self._queue.append(sql % {k: self._literal(v) for k, v in params.items()})
        else:
            self._queue.append(sql % tuple(self._literal(v) for v in params))

    def execute_prepared(self, sql: str, params: Mapping[str, Any], *, rows: int = 1) -> None:
        """`execute` for the statements every command runs (`%(name)s` placeholders whose types
        the statement determines): prepared once per connection, then EXECUTEd, so the server
        parses and plans each shape once instead of on every command. `rows`: how many rows
        the statement's shape lists (a freshness check, an events INSERT); past HOT_ROWS the
        shapes are too many to keep, and the statement is sent as it is."""
        if rows > HOT_ROWS:
            self.execute(sql, params)
            return
        name, text, names = prepared_form(sql)
        self._prepare(name, text)
        literals = ", ".join(self._literal(params[n]) for n in names)
        self._queue.append(f"EXECUTE {name}({literals})" if names else f"EXECUTE {name}")

    def _prepare(self, name: str, text: str) -> None:
        if name not in self._prepared and name not in self._preparing.values():
            self._preparing[len(self._queue)] = name
            self._queue.append(f"PREPARE {name} AS {text}")

    def execute_writes(self, statements: Sequence[merge.Statement]) -> None:
        """One-row writes, in order, joined into as few statements as their order allows
        (merge.py), each prepared as `execute_prepared`."""
        for run in merge.chunks(statements):
            if len(run) == 1:
                self.execute_prepared(*run[0])
                continue
            name, text, names = prepared_form(merge.joined(tuple(sql for sql, _ in run)))
            self._prepare(name, text)
            values = (self._literal(run[i][1][key]) for i, key in merge.parts_of(names))
            self._queue.append(f"EXECUTE {name}({', '.join(values)})")

    def executemany(self, sql: str, params: Sequence[Mapping[str, Any]]) -> None:
        """One statement per set of parameters, prepared (as `execute_prepared`); a statement
        with a `VALUES (...)` list (an INSERT, or a join against VALUES) becomes one statement
        listing every row, itself prepared up to HOT_ROWS rows (a batch's)."""
        where = values_row(sql)
        if where is None or len(params) < 2:
            for p in params:
                self.execute_prepared(sql, p)
            return
        if len(params) <= HOT_ROWS:
            merged = {f"{k}_{i}": v for i, p in enumerate(params) for k, v in p.items()}
            self.execute_prepared(rows_of(sql, len(params)), merged, rows=len(params))
            return
        start, end = where
        row = sql[start:end]
        rows = [row % {k: self._literal(v) for k, v in p.items()} for p in params]
        self._queue.append(f"{sql[:start]}{', '.join(rows)}{sql[end:]}")

    def queued(self, sql: str, params: Mapping[str, Any] | Sequence[Any] = ()) -> Later:
        """Queue a query; its rows arrive with the next `flush`."""
        self.execute(sql, params)
        return self._want()

    def queued_prepared(self, sql: str, params: Mapping[str, Any], *, rows: int = 1) -> Later:
        """`queued` for a hot query, prepared as `execute_prepared` does."""
        self.execute_prepared(sql, params, rows=rows)
        return self._want()

    def _want(self) -> Later:
        """The rows of the statement queued last, once sent."""
        result = self._wanted[len(self._queue) - 1] = Later()
        return result

    def raw_all(
        self, sql: str, params: Mapping[str, Any] | Sequence[Any] = ()
    ) -> list[dict[str, Any]]:
        result = self.queued(sql, params)
        self.flush()
        assert result.rows is not None
        return result.rows

    def all(self, sql: str, params: Mapping[str, Any] | Sequence[Any] = ()) -> list[dict[str, Any]]:
        return [self.dialect.load(r) for r in self.raw_all(sql, params)]

    def one(
        self, sql: str, params: Mapping[str, Any] | Sequence[Any] = ()
    ) -> dict[str, Any] | None:
        rows = self.raw_all(sql, params)
        return self.dialect.load(rows[0]) if rows else None

    def flush(self) -> None:
        """Send everything queued as one string; fill in the wanted results."""
        if not self._queue:
            return
        statements, wanted, preparing = self._queue, self._wanted, self._preparing
        self._queue, self._wanted, self._preparing = [], {}, {}
        skip = 0
        if not self.began:
            statements[:0] = ["BEGIN", *self.first]
            skip, self.began = 1 + len(self.first), True
        timed = self.locked and self.lock_wait is None  # the string that takes the lock
        began = time.perf_counter()
        results = self._traced_send(";\n".join(statements), len(statements))
        if timed:
            self.lock_wait = time.perf_counter() - began
        # A failed statement stops the string: its result is the last one.
        error = results[-1] if results and results[-1].status == pq.ExecStatus.FATAL_ERROR else None
        ran = len(results) if error is None else len(results) - 1  # (the failed one did not)
        # (prepared statements outlive the transaction, even rolled back)
        self._prepared.update(name for i, name in preparing.items() if i + skip < ran)
        if error is not None:
            raise _error(error, self._encoding)
        if len(results) != len(statements):
            raise DatabaseError(f"expected {len(statements)} results, got {len(results)}")
        for i, later in wanted.items():
            later.rows = self._rows(results[i + skip])

    def _traced_send(self, query: str, statements: int) -> list[pq.abc.PGresult]:
        """`_send`, in a client span when a trace is being recorded (no statement text: it
        holds the literal values of payloads)."""
        if _trace is None or not _trace.get_current_span().is_recording():
            return self._send(query)
        with _trace.get_tracer("jobnik.projections").start_as_current_span(
            "BATCH",
            kind=_trace.SpanKind.CLIENT,
            attributes={
                "db.system": "postgresql",
                "db.system.name": "postgresql",
                "db.operation.name": "BATCH",
                "db.operation.batch.size": statements,
            },
        ):
            return self._send(query)

    def _send(self, query: str) -> list[pq.abc.PGresult]:
        pgconn = self.conn.pgconn
        try:
            pgconn.send_query(query.encode(self._encoding))
            return self.conn.wait(generators.execute(pgconn))
        except psycopg.Error as e:
            raise DatabaseError(f"database error: {e}") from e

    def _rows(self, res: pq.abc.PGresult) -> list[dict[str, Any]]:
        names = [(res.fname(i) or b"").decode(self._encoding) for i in range(res.nfields)]
        self._tx.set_pgresult(res)
        return self._tx.load_rows(
            0, res.ntuples, lambda values: dict(zip(names, values, strict=True))
        )

    def commit(self) -> None:
        """Commit. A transaction holding the writer lock commits without waiting for its WAL
        flush, so the lock goes as soon as its commit record is written; a second, one-row
        transaction in the same string then commits synchronously, which flushes the WAL
        through that record too. The string returns, and the command answers, only once both
        are durable: nothing acknowledged is lost, while concurrent commands' flushes share
        fsyncs (PostgreSQL's group commit) instead of queueing behind the lock one by one."""
        if not (self.began or self._queue):
            return
        if self.locked:
            self.execute("SET LOCAL synchronous_commit TO OFF")
            self.execute("COMMIT")
            # After the explicit COMMIT the rest of the string is one implicit transaction,
            # committed synchronously. PostgreSQL flushes a commit only for a transaction that
            # has an xid and wrote WAL: a transactional logical message does both, and no table
            # row (the upsert into jobnik_wal_flush that did it before cost the server about a
            # third more, and WAL for the row). Decoders of logical replication slots see an
            # empty message with the prefix "jobnik.flush", which they may ignore.
            self.execute_prepared(FLUSH, {})
        else:
            self.execute("COMMIT")
        self.flush()

    def rollback(self) -> None:
        """Forget what is queued; roll back what was sent."""
        self._queue, self._wanted, self._preparing = [], {}, {}
        if self.began and self.conn.info.transaction_status != pq.TransactionStatus.IDLE:
            with suppress(DatabaseError):  # the connection is gone: the server rolled back
                self._send("ROLLBACK")


@contextmanager
def batch_transaction(
    conn: psycopg.Connection[Any], dialect: Dialect, first: Sequence[str] = ()
) -> Iterator[BatchCursor]:
    """A transaction on a pooled connection, in autocommit mode while it runs (BEGIN and COMMIT
    travel in the strings; the library's pool hands out autocommit connections anyway):
    committed when the block succeeds, else rolled back."""
    was = conn.autocommit
    if not was:  # (setting it costs a lock and a check: the write pool's are autocommit)
        conn.autocommit = True
    cur = BatchCursor(conn, dialect, first)
    try:
        yield cur
        cur.commit()
    except BaseException:
        cur.rollback()
        raise
    finally:
        if (
            not was
            and not conn.closed
            and conn.info.transaction_status == pq.TransactionStatus.IDLE
        ):
            conn.autocommit = was
