"""SQLite: the embedded store, a file and zero set-up. One writer at a time.

A write session begins IMMEDIATE: it holds the database's write lock from its first statement,
so it reads the latest committed state and nothing it read can change before it commits.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import closing, contextmanager
from typing import IO, Any

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no guard
    fcntl = None  # type: ignore[assignment]
from eventsourcing.domain import DomainEventProtocol
from eventsourcing.persistence import StoredEvent
from eventsourcing.sqlite import SQLiteApplicationRecorder

from jobnik.domain.errors import DatabaseError, StoreInUse
from jobnik.projections.store import eventlog
from jobnik.projections.store.base import SqlStore
from jobnik.projections.store.bulk import BulkWriter, SqliteBulk
from jobnik.projections.store.cursor import Cursor
from jobnik.projections.store.dialect import SQLITE
from jobnik.projections.store.errors import wrapped
from jobnik.projections.store.executor import OpExecutor
from jobnik.projections.store.leader import FileLock, LeaderLock, ProcessLock
from jobnik.projections.store.names import checked
from jobnik.projections.store.session import SqlSession


def use_wal(path: str, timeout: float = 60.0) -> None:
    """Switch an SQLite file to WAL before the library's connections open it.

    Each of them checks the journal mode and switches a new file to WAL. When processes open a
    new file at once, SQLite answers a switch that would wait on another connection's lock with
    "database is locked" at once (it does not wait there: that could deadlock), so one of them
    would fail its start-up. Here the switch is retried until the file is in WAL mode; the mode
    is persistent, so the library then only reads it."""
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


class SqliteSession(SqlSession):
    """A session holding the write lock, if it writes, from BEGIN IMMEDIATE."""

    store: SqliteStore

    def _append(
        self, stored: Sequence[StoredEvent], events: Sequence[DomainEventProtocol[Any]]
    ) -> None:
        written = eventlog.insert_sqlite(self.store.recorder, self.cur, stored)
        self.store.apply(self.cur, events, written)
        self._position = written[-1]


class SqliteStore(SqlStore):
    dialect = SQLITE
    position_column = "rowid"
    serves_many_processes = False  # see claim_server
    recorder: SQLiteApplicationRecorder

    def __init__(
        self, env: Mapping[str, str], log: eventlog.EventLog, recorder: SQLiteApplicationRecorder
    ) -> None:
        super().__init__(env, log, recorder)
        self.lite = recorder.datastore
        self._server_lock: IO[bytes] | None = None
        if not self.lite.pool.is_sqlite_memory_mode:
            use_wal(self.lite.pool.db_name)

    def close(self) -> None:
        if self._server_lock is not None:
            self._server_lock.close()  # releases the lock
            self._server_lock = None
        super().close()

    def claim_server(self) -> None:
        """SQLite serves one process: the sweeper's and catch-up runner's leader locks, the
        leases and blue/green rebuilds assume a server where several share a database. An
        exclusive lock on `<file>.server.lock`, held until `close` (or the process ends, however
        it ends), keeps a second server off the file; command-line tools do not take it."""
        if self.lite.pool.is_sqlite_memory_mode or fcntl is None:
            return
        path = self.path.removeprefix("file:").split("?", 1)[0] + ".server.lock"
        handle = open(path, "ab")  # noqa: SIM115 - held open until close()
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            raise StoreInUse(
                f"another jobnik server already serves {self.path}: SQLite is for one "
                "server process (use PostgreSQL for several, or stop the other one)"
            ) from None
        self._server_lock = handle

    @property
    def path(self) -> str:
        """The database file."""
        return self.lite.pool.db_name

    @contextmanager
    def cursor(
        self, *, write: bool, lock: bool = True, swap: bool = False, snapshot: bool = False
    ) -> Iterator[Cursor]:
        """A write transaction begins IMMEDIATE: one writer at a time, whatever `lock` and
        `swap` say; a read transaction in WAL mode reads one snapshot, whatever `snapshot`
        says."""
        with wrapped(), self.lite.get_connection(commit=write) as conn:
            raw = conn.cursor().sqlite_cursor
            began = time.perf_counter()
            raw.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            cur = Cursor(raw, self.dialect)
            if write:  # BEGIN IMMEDIATE waits for the one writer's lock
                cur.lock_wait = time.perf_counter() - began
            try:
                yield cur
            except BaseException:
                conn.rollback()
                raise
            if write:
                conn.commit()
            else:
                conn.rollback()

    @contextmanager
    def migration_lock(self) -> Iterator[None]:
        yield  # the migrations' transaction begins IMMEDIATE: processes take turns

    @contextmanager
    def _open(self, write: bool) -> Iterator[SqlSession]:
        with self.cursor(write=write) as cur:
            yield SqliteSession(self, cur, write=write)

    def reclaim_space(self) -> None:
        """Nothing: SQLite puts a page its deletions empty on the file's free list, and the
        next insert that needs a page takes it from there."""

    def leader_lock(self, name: str) -> LeaderLock:
        if self.lite.pool.is_sqlite_memory_mode:
            return ProcessLock(name, self.path)
        return FileLock(name, self.path)

    # -- what a rebuild needs ------------------------------------------------------------------

    def columns_of(self, cur: Cursor, table: str) -> list[str]:
        return [r["name"] for r in cur.raw_all(f"PRAGMA table_info({checked(table)})")]

    def restore_index_names(self, cur: Cursor, table: str, marker: str) -> None:
        """SQLite cannot rename an index: the shadow-named ones are built again under their
        live names, in the caller's transaction (the swap takes as long as those builds)."""
        rows = cur.raw_all(
            "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND tbl_name = :t "
            "AND sql IS NOT NULL",
            {"t": table},
        )
        for r in rows:
            if marker in r["name"]:
                cur.execute(f"DROP INDEX {checked(r['name'])}")
                cur.execute(r["sql"].replace(marker, ""))

    @contextmanager
    def settled(self, settle: Callable[[Cursor], None]) -> Iterator[Cursor]:
        """One write transaction: writers wait until the caller is done reading."""
        with self.cursor(write=True) as cur:
            settle(cur)
            yield cur

    def bulk(self, rename: Callable[[str], str]) -> BulkWriter:
        return SqliteBulk(OpExecutor(self.dialect, rename), rename)
