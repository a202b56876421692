"""The SQL store: the library's event table and the inline read models, in one transaction.

A write session serialises with every other writer (PostgreSQL: the event table's EXCLUSIVE lock,
taken first, which the library's recorder needs anyway to keep notification ids in commit order;
SQLite: BEGIN IMMEDIATE). Inside it, a command reads rows, lets aggregates decide, appends their
events through the library's recorder and applies the same events to the read models, then commits:
all of it or nothing.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
import time
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import closing, contextmanager
from contextvars import ContextVar
from functools import cached_property
from typing import Any, Final, cast
from uuid import UUID

import psycopg_pool
from eventsourcing.domain import DomainEventProtocol
from eventsourcing.persistence import PersistenceError, StoredEvent
from eventsourcing.postgres import PostgresApplicationRecorder, PostgresDatastore
from eventsourcing.sqlite import SQLiteApplicationRecorder, SQLiteDatastore

from jobnik.domain.errors import DatabaseError
from jobnik.projections.inline.ops import Add
from jobnik.projections.inline.project import batches
from jobnik.projections.inline.tables import SUMMARIES
from jobnik.projections.store.batch import BatchCursor, Later, Sql, batch_transaction
from jobnik.projections.store.cursor import Cursor
from jobnik.projections.store.dialect import POSTGRES, SQLITE, Dialect
from jobnik.projections.store.eventlog import EventLog
from jobnik.projections.store.executor import OpExecutor
from jobnik.projections.store.session import SqlSession
from jobnik.projections.store.written import RecentWrites

log = logging.getLogger(__name__)

# Lock order on PostgreSQL. A write session reads optimistically (the read-model tables' ACCESS
# SHARE locks) before it waits for the event table's lock, while a rebuild's swap holds that lock
# and needs ACCESS EXCLUSIVE on the same tables to drop and rename them: a deadlock, which
# PostgreSQL broke after a second by failing one of the two. So both first take one advisory
# lock, write sessions shared (they never wait for each other) and the swap exclusive: a swap
# waits for the sessions under way, and new ones wait for the swap before they read anything.
_SWAP_KEY: Final = 0x6A6F626E  # "jobn"
MIGRATION_KEY: Final = zlib.crc32(b"jobnik-migrations")
WRITING: Final = f"SELECT pg_advisory_xact_lock_shared({_SWAP_KEY})"
SWAPPING: Final = f"SELECT pg_advisory_xact_lock({_SWAP_KEY})"

# The write session open in this context: a nested `session(write=True)` joins it instead of
# opening a second transaction, so a caller can wrap a command and its own rows (an
# Idempotency-Key, api/idempotency.py) in one all-or-nothing transaction.
_AMBIENT: ContextVar[SqlSession | None] = ContextVar("jobnik_write_session", default=None)


def _use_wal(path: str, timeout: float = 60.0) -> None:
    """Switch an SQLite file to WAL before the library's connections open it.

    Each of them checks the journal mode and switches a new file to WAL. When processes open a
    new file at once, SQLite answers a switch that would wait on another connection's lock with
    "database is locked" at once (it does not wait there: that could deadlock), so one of them
    failed its start-up. Here the switch is retried until the file is in WAL mode; the mode is
    persistent, so the library then only reads it."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with closing(sqlite3.connect(path, uri=True, timeout=timeout)) as conn:
                mode = str(conn.execute("PRAGMA journal_mode=WAL").fetchone()[0])
            if mode.lower() == "wal":
                return
            problem = f"journal mode is {mode}"
        except sqlite3.OperationalError as e:
            if "locked" not in str(e):
                raise DatabaseError(f"could not switch {path} to WAL mode: {e}") from e
            problem = str(e)
        if time.monotonic() > deadline:
            raise DatabaseError(f"could not switch {path} to WAL mode: {problem}")
        time.sleep(0.02)


class ParentRows:
    """The stage and job rows write sessions read ahead with each task, decoded, by id and
    version: every worker command reads the same few, and they change far less often than
    their tasks. A row is its aggregate's snapshot at that version (only the aggregate's own
    events write it), so a cached row is the row; the server still sends it (as text, which
    costs the client nothing to receive), and only a new version is decoded. The rows are
    shared, read-only: aggregates restored from them replace attributes, never mutate them.
    Bounded by rows and by the size of their text (a job's data may be large): when either
    is reached, everything kept is dropped and the hot rows come back with the next commands."""

    ROWS: Final = 1024
    CHARS: Final = 16 * 1024 * 1024

    def __init__(self, dialect: Dialect) -> None:
        self.dialect = dialect
        self._rows: dict[UUID, tuple[int, dict[str, Any]]] = {}
        self._chars = 0

    def row(self, key: UUID, version: int, text: str) -> dict[str, Any]:
        cached = self._rows.get(key)
        if cached is not None and cached[0] == version:
            return cached[1]
        row = self.dialect.load_jsonb(json.loads(text))
        if len(self._rows) >= self.ROWS or self._chars + len(text) > self.CHARS:
            self._rows, self._chars = {}, 0
        self._rows[key] = (version, row)
        self._chars += len(text)
        return row


class SqlStore:
    """Sessions over the event log and the inline read models, on PostgreSQL or SQLite."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.env: Final = dict(env)  # the library's settings (a rebuild's parts open their own)
        self.log_app = EventLog(env={**env, "CREATE_TABLE": "n"})
        recorder = self.log_app.recorder
        self.recorder = recorder
        if isinstance(recorder, PostgresApplicationRecorder):
            self.dialect: Dialect = POSTGRES
            self.pg: PostgresDatastore | None = recorder.datastore
            self.lite: SQLiteDatastore | None = None
        elif isinstance(recorder, SQLiteApplicationRecorder):
            self.dialect = SQLITE
            self.pg, self.lite = None, recorder.datastore
            if not recorder.datastore.pool.is_sqlite_memory_mode:
                _use_wal(recorder.datastore.pool.db_name)
        else:  # pragma: no cover - configuration error
            raise TypeError(f"unsupported recorder {type(recorder).__name__}")
        self.mapper = self.log_app.mapper
        self.executor = OpExecutor(self.dialect)
        self.events_table = recorder.events_table_name
        self._writer_pool: psycopg_pool.ConnectionPool[Any] | None = None
        self._writers_lock = threading.Lock()
        self.parents = ParentRows(self.dialect)
        self.written = RecentWrites()
        # Called with the log position each write session committed, in the committing thread
        # (wakes catch-up runners; the API notes a request's X-Jobnik-Position).
        self.on_commit: list[Callable[[int], None]] = []

    @property
    def backend(self) -> str:
        return self.dialect.name

    @property
    def sqlite_path(self) -> str:
        assert self.lite is not None
        return self.lite.pool.db_name

    @contextmanager
    def migration_lock(self) -> Iterator[None]:
        """Held while a process creates or upgrades the schema, so that processes starting at
        once take turns (PostgreSQL: a session advisory lock; SQLite: writers take turns)."""
        if self.pg is None:
            yield
            return
        with self.pg.get_connection() as conn:  # a session lock, held across the library's DDL
            conn.execute("SELECT pg_advisory_lock(%s)", (MIGRATION_KEY,))
            try:
                yield
            finally:
                conn.execute("SELECT pg_advisory_unlock(%s)", (MIGRATION_KEY,))

    def close(self) -> None:
        if self._writer_pool is not None:  # opened by the first PostgreSQL write session
            self._writer_pool.close()
        self.log_app.close()

    def log_head(self, cur: Cursor) -> int:
        """The log position of the last event, as `cur`'s transaction sees it."""
        position = "notification_id" if self.backend == "postgres" else "rowid"
        row = cur.one(f"SELECT MAX({position}) AS head FROM {self.events_table}")
        return int(row["head"] or 0) if row else 0

    def create_tables(self) -> None:
        """The library's own tables (the event log)."""
        cast(PostgresApplicationRecorder | SQLiteApplicationRecorder, self.recorder).create_table()

    @contextmanager
    def cursor(self, *, write: bool, lock: bool = True, swap: bool = False) -> Iterator[Cursor]:
        """A transaction: committed on success when `write`, rolled back otherwise.

        A write transaction serialises with every other writer. `lock=False` (PostgreSQL) leaves
        the event table unlocked: for catch-up projections and rebuilds, which append no events
        and write only their own tables (SQLite has one writer at a time whatever `lock` says).
        `swap` (PostgreSQL): first wait until no write session is under way and keep new ones
        from starting (`SWAPPING`): a rebuild's swap drops and renames the live tables.
        """
        try:
            if self.pg is not None:
                with (
                    self.pg.get_connection() as conn,
                    conn.transaction(force_rollback=not write),
                    conn.cursor() as raw,
                ):
                    if write and swap:
                        raw.execute(SWAPPING)
                    if write and lock:
                        raw.execute(f"LOCK TABLE {self.events_table} IN EXCLUSIVE MODE")
                    yield Cursor(raw, self.dialect)
            else:
                assert self.lite is not None
                with self.lite.get_connection(commit=write) as lite_conn:
                    lite = lite_conn.cursor().sqlite_cursor
                    lite.execute("BEGIN IMMEDIATE" if write else "BEGIN")
                    try:
                        yield Cursor(lite, self.dialect)
                    except BaseException:
                        lite_conn.rollback()
                        raise
                    if write:
                        lite_conn.commit()
                    else:
                        lite_conn.rollback()
        except (sqlite3.Error, PersistenceError) as e:
            raise DatabaseError(f"database error: {e}") from e

    @contextmanager
    def session(self, *, write: bool) -> Iterator[SqlSession]:
        """A transaction; a write session opened inside another one (same context) joins it,
        holding the writer lock from then on."""
        ambient = _AMBIENT.get()
        if write and ambient is not None and ambient.store is self:
            ambient.lock()
            yield ambient  # the outer session commits (or rolls back) and notes the position
            return
        with self._transaction(write) as (cur, locked):
            session = SqlSession(self, cur, write=write, locked=locked)
            token = _AMBIENT.set(session) if write else None
            try:
                yield session
                session.close()
            finally:
                if token is not None:
                    _AMBIENT.reset(token)
        if isinstance(session.cur, BatchCursor):  # committed
            self.written.note(session.loaded, session.summaries())
        if session.position is not None:  # committed
            for listener in self.on_commit:
                listener(session.position)

    @contextmanager
    def _transaction(self, write: bool) -> Iterator[tuple[Cursor | BatchCursor, bool]]:
        """PostgreSQL writes: a batched transaction that takes the writer lock when it first
        needs it. Otherwise a plain one (SQLite's writes begin IMMEDIATE: locked at once)."""
        if not (write and self.pg is not None):
            with self.cursor(write=write) as cur:
                yield cur, write
            return
        try:
            with (
                self._writers.connection() as conn,
                batch_transaction(conn, self.dialect, [WRITING]) as bc,
            ):
                yield bc, False
        except psycopg_pool.PoolTimeout as e:
            raise DatabaseError(f"database error: {e}") from e

    @property
    def _writers(self) -> psycopg_pool.ConnectionPool[Any]:
        with self._writers_lock:
            if self._writer_pool is None:
                self._writer_pool = self._open_writers()
            return self._writer_pool

    def connection_kwargs(self) -> dict[str, Any]:
        """PostgreSQL: the library pool's connection arguments (a copy), for the connections
        jobnik opens beside it (the write pool, the leader lock, a rebuild's writers)."""
        assert self.pg is not None
        given = self.pg.pool.kwargs
        return dict((given() if callable(given) else given) or {})

    def _open_writers(self) -> psycopg_pool.ConnectionPool[Any]:
        """PostgreSQL write sessions' own pool, sized like the library's: autocommit (BEGIN and
        COMMIT travel in the strings), and psycopg never prepares on them, so nothing sends
        the `DEALLOCATE ALL` that would drop the statements the write path prepares (psycopg
        does after a ROLLBACK on a connection where it prepared statements itself)."""
        assert self.pg is not None
        library = self.pg.pool
        pool: psycopg_pool.ConnectionPool[Any] = psycopg_pool.ConnectionPool(
            library.conninfo,
            kwargs={**self.connection_kwargs(), "autocommit": True, "prepare_threshold": None},
            min_size=1,
            max_size=library.max_size,
            timeout=library.timeout,
            name="jobnik-writers",
            open=False,
        )
        pool.open(wait=True, timeout=library.timeout)
        return pool

    @cached_property
    def _sequence(self) -> str:
        """The event table's notification id sequence (PostgreSQL)."""
        assert self.pg is not None
        with self.pg.get_connection() as conn:
            row = conn.execute(
                "SELECT pg_get_serial_sequence(%s, 'notification_id') AS seq", (self.events_table,)
            ).fetchone()
        assert row is not None
        assert row["seq"], f"no sequence on {self.events_table}"
        return str(row["seq"])

    def queue_events(
        self, cur: BatchCursor, stored: Sequence[StoredEvent]
    ) -> tuple[Later, list[Sql]]:
        """PostgreSQL, under the writer lock: queue the events' INSERT; returns its ids (filled
        in when the string is sent) and, for the read models' ops queued after it, each event's
        position as a SQL expression (the ids are consecutive: nothing else inserts meanwhile)."""
        values = ", ".join(f"(%(o{i})s, %(v{i})s, %(t{i})s, %(s{i})s)" for i in range(len(stored)))
        params: dict[str, Any] = {}
        for i, e in enumerate(stored):
            params[f"o{i}"], params[f"v{i}"] = e.originator_id, e.originator_version
            params[f"t{i}"], params[f"s{i}"] = e.topic, e.state
        ids = cur.later_prepared(
            f"INSERT INTO {self.events_table} (originator_id, originator_version, topic, state) "
            f"VALUES {values} RETURNING notification_id",
            params,
            rows=len(stored),
        )
        last = len(stored) - 1
        seq = self._sequence
        return ids, [Sql(f"(currval('{seq}') - {last - i})") for i in range(len(stored))]

    def insert_events(self, cur: Cursor, stored: Sequence[StoredEvent]) -> list[int]:
        """SQLite: append through the library's recorder (same transaction); returns the
        notification ids. (PostgreSQL write sessions queue their INSERT: `queue_events`.)"""
        lite = cast(SQLiteApplicationRecorder, self.recorder)
        from eventsourcing.sqlite import SQLiteCursor

        return list(lite._insert_events(SQLiteCursor(cur.raw), stored) or [])

    def apply(
        self,
        cur: Cursor | BatchCursor,
        events: Sequence[DomainEventProtocol[Any]],
        ids: Sequence[int] | Sequence[Sql],
        summary_deltas: dict[Any, dict[str, int]] | None = None,
    ) -> None:
        """Apply events (stored at `ids`) to the inline read models; add the changes they make
        to stage summaries' counters to `summary_deltas`, by stage id."""
        runs = list(batches(events, ids))
        if summary_deltas is not None:
            for ops in (ops for run in runs for ops in run):
                for op in ops:
                    if isinstance(op, Add) and op.table == SUMMARIES:
                        counts = summary_deltas.setdefault(op.key["stage_id"], {})
                        for column, n in op.deltas.items():
                            counts[column] = counts.get(column, 0) + n
        self.executor.run(cur, runs)
