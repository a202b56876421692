"""PostgreSQL write sessions in few round trips: statements queue up and travel as one string.

A write command is a handful of reads and a dozen small writes. Sent one by one, each costs a
round trip and, on this machine, more client CPU in the driver than the domain work itself (see
README, Performance). Here writes are rendered client-side (psycopg's `ClientCursor.mogrify`) and
queued; a read, or the commit, sends everything queued as one multi-statement string, and the
results come back as that many result sets, in order. `BEGIN` rides with the first string and
`COMMIT` with the last, on a connection in autocommit mode, so a write command that reads once is
two round trips.

A statement that fails stops the string (PostgreSQL runs none after it) and aborts the
transaction; the session then rolls back. Serialisation failures and deadlocks surface as the
domain's `ConcurrencyConflict`, which the command layer retries.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from typing import Any

import psycopg
from psycopg import errors, pq
from psycopg.abc import Dumper as DumperABC
from psycopg.adapt import Dumper

from jobnik.domain.errors import ConcurrencyConflict, DatabaseError
from jobnik.projections.dialect import Dialect

# SQLSTATEs that mean "run the command again": serialization_failure (our stale-read check
# raises it), deadlock_detected, unique_violation (an aggregate version taken meanwhile).
RETRYABLE: tuple[type[psycopg.Error], ...] = (
    errors.SerializationFailure,
    errors.DeadlockDetected,
    errors.UniqueViolation,
)


class Sql(str):
    """A SQL expression passed where a value goes: rendered verbatim, not quoted.

    The write path passes each event's log position as `(currval(...) - k)`: the ids are
    assigned by the same string that uses them, so no round trip waits for them."""


class _SqlDumper(Dumper):
    def dump(self, obj: Any) -> bytes:  # pragma: no cover - only client-side rendering uses it
        raise TypeError("Sql expressions are rendered client-side only")

    def quote(self, obj: Any) -> bytes:
        return str(obj).encode()


class Later:
    """A query's rows, filled in when its string has been sent."""

    __slots__ = ("rows",)

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] | None = None


class BatchCursor:
    """The write session's cursor: the `Cursor` interface over queued statements."""

    def __init__(self, conn: psycopg.Connection[Any], dialect: Dialect) -> None:
        self.conn = conn
        self.raw = psycopg.ClientCursor(conn)
        dumper: type[DumperABC] = _SqlDumper
        self.raw.adapters.register_dumper(Sql, dumper)
        self.dialect = dialect
        self.began = False
        self.locked = False  # set by the session once it queued the writer lock
        self._queue: list[str] = []
        self._wanted: dict[int, Later] = {}

    def execute(self, sql: str, params: Mapping[str, Any] | Sequence[Any] = ()) -> None:
        self._queue.append(self.raw.mogrify(sql, params) if params else sql)

    def executemany(self, sql: str, params: Sequence[Mapping[str, Any]]) -> None:
        for p in params:
            self.execute(sql, p)

    def later(self, sql: str, params: Mapping[str, Any] | Sequence[Any] = ()) -> Later:
        """Queue a query; its rows arrive with the next `flush`."""
        self.execute(sql, params)
        result = self._wanted[len(self._queue) - 1] = Later()
        return result

    def raw_all(
        self, sql: str, params: Mapping[str, Any] | Sequence[Any] = ()
    ) -> list[dict[str, Any]]:
        result = self.later(sql, params)
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
        statements, wanted = self._queue, self._wanted
        self._queue, self._wanted = [], {}
        skip = 0
        if not self.began:
            statements.insert(0, "BEGIN")
            skip, self.began = 1, True
        try:
            self.raw.execute(";\n".join(statements))
            for i in range(len(statements)):
                result = wanted.get(i - skip)
                if result is not None:
                    result.rows = self.raw.fetchall()
                if i + 1 < len(statements) and not self.raw.nextset():
                    raise DatabaseError(f"expected {len(statements)} results, got {i + 1}")
        except RETRYABLE as e:
            raise ConcurrencyConflict(f"concurrent update, run again: {e}") from e
        except psycopg.Error as e:
            raise DatabaseError(f"database error: {e}") from e

    def commit(self) -> None:
        """Commit. A transaction holding the writer lock commits without waiting for its WAL
        flush, so the lock goes as soon as its commit record is written; a second, empty
        transaction in the same string then commits synchronously, which flushes the WAL
        through that record too. The string returns, and the command answers, only once both
        are durable: nothing acknowledged is lost, while concurrent commands' flushes share
        fsyncs (PostgreSQL's group commit) instead of queueing behind the lock one by one."""
        if not (self.began or self._queue):
            return
        if self.locked:
            self.execute("SET LOCAL synchronous_commit TO OFF")
            self.execute("COMMIT")
            self.execute("BEGIN")
            self.execute("SELECT pg_current_xact_id()")  # an xid: its commit has a WAL record
        self.execute("COMMIT")
        self.flush()

    def rollback(self) -> None:
        """Forget what is queued; roll back what was sent."""
        self._queue, self._wanted = [], {}
        if self.began and self.conn.info.transaction_status != pq.TransactionStatus.IDLE:
            with suppress(psycopg.Error):  # the connection is gone: the server rolled back
                self.raw.execute("ROLLBACK")


@contextmanager
def batch_transaction(conn: psycopg.Connection[Any], dialect: Dialect) -> Iterator[BatchCursor]:
    """A transaction on a pooled connection, switched to autocommit while it runs (BEGIN and
    COMMIT travel in the strings): committed when the block succeeds, else rolled back."""
    conn.autocommit = True
    cur = BatchCursor(conn, dialect)
    try:
        yield cur
        cur.commit()
    except BaseException:
        cur.rollback()
        raise
    finally:
        if not conn.closed and conn.info.transaction_status == pq.TransactionStatus.IDLE:
            conn.autocommit = False
