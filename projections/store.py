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
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import closing, contextmanager
from contextvars import ContextVar
from datetime import datetime
from functools import cached_property
from typing import IO, Any, Final, cast
from uuid import UUID

import psycopg_pool

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no guard
    fcntl = None  # type: ignore[assignment]
from eventsourcing.application import Application
from eventsourcing.domain import DomainEventProtocol
from eventsourcing.persistence import PersistenceError, StoredEvent
from eventsourcing.postgres import PostgresApplicationRecorder, PostgresDatastore
from eventsourcing.sqlite import SQLiteApplicationRecorder, SQLiteDatastore

from jobnik.domain.base import Entity
from jobnik.domain.errors import (
    DatabaseError,
    JobNotFound,
    StageNotFound,
    StoreInUse,
    TaskNotFound,
)
from jobnik.domain.jobs import Job
from jobnik.domain.ports import Summary
from jobnik.domain.stages import Stage
from jobnik.domain.tasks import Task
from jobnik.projections.batch import BatchCursor, Later, Sql, batch_transaction
from jobnik.projections.dialect import POSTGRES, SQLITE, Dialect
from jobnik.projections.entities import Add, Op, project
from jobnik.projections.executor import OpExecutor
from jobnik.projections.migrations import migrate
from jobnik.projections.positions import note_written
from jobnik.projections.rows import job_from_row, stage_from_row, summary_from_row, task_from_row
from jobnik.projections.schema import JOBS, QUEUE, STAGES, SUMMARIES, TASKS
from jobnik.projections.written import RecentWrites, Snapshot

log = logging.getLogger(__name__)

FINAL_JOB_SQL = "('COMPLETED', 'FAILED', 'ABORTED')"
# The next eligible task of a stage type: priority, then enqueue order (one index probe).
CLAIM = (
    "SELECT task_id FROM queue_v1 WHERE stage_type = {type} AND stage_open AND job_open "
    "ORDER BY priority_rank, seq LIMIT 1{lock}"
)

# Lock order on PostgreSQL. A write session reads optimistically (the read-model tables' ACCESS
# SHARE locks) before it waits for the event table's lock, while a rebuild's swap holds that lock
# and needs ACCESS EXCLUSIVE on the same tables to drop and rename them: a deadlock, which
# PostgreSQL broke after a second by failing one of the two. So both first take one advisory
# lock, write sessions shared (they never wait for each other) and the swap exclusive: a swap
# waits for the sessions under way, and new ones wait for the swap before they read anything.
_SWAP_KEY: Final = 0x6A6F626E  # "jobn"
WRITING: Final = f"SELECT pg_advisory_xact_lock_shared({_SWAP_KEY})"
SWAPPING: Final = f"SELECT pg_advisory_xact_lock({_SWAP_KEY})"

# The write session open in this context: a nested `session(write=True)` joins it instead of
# opening a second transaction, so a caller can wrap a command and its own rows (an
# Idempotency-Key, projections/idempotency.py) in one all-or-nothing transaction.
_AMBIENT: ContextVar[SqlSession | None] = ContextVar("jobnik_write_session", default=None)


class EventLog(Application[UUID]):
    """The library application: mapper (transcoding), recorder and repository of jobnik's events."""

    name = "jobnik"


class Cursor:
    """A DB cursor that speaks one dialect and returns plain dict rows."""

    def __init__(self, raw: Any, dialect: Dialect) -> None:
        self.raw = raw
        self.dialect = dialect

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

    def all(self, sql: str, params: Mapping[str, Any] | Sequence[Any] = ()) -> list[dict[str, Any]]:
        self.raw.execute(sql, params)
        return [self.dialect.load(dict(r)) for r in self.raw.fetchall()]


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
        # Called with the log position each write session committed (wakes catch-up runners).
        self.on_commit: list[Callable[[int], None]] = []
        self._server_lock: IO[bytes] | None = None

    @property
    def backend(self) -> str:
        return self.dialect.name

    @property
    def sqlite_path(self) -> str:
        assert self.lite is not None
        return self.lite.pool.db_name

    def migrate(self) -> list[int]:
        """Create or upgrade every table; safe when several processes start at once.

        Returns the migrations this call applied."""
        return migrate(self)

    def close(self) -> None:
        if self._writer_pool is not None:  # opened by the first PostgreSQL write session
            self._writer_pool.close()
        if self._server_lock is not None:
            self._server_lock.close()  # releases the lock
            self._server_lock = None
        self.log_app.close()

    def claim_server(self) -> None:
        """Make this process the only server of an SQLite file (StoreInUse if another is).

        SQLite serves one process: the sweeper's and catch-up runner's leader locks, the
        leases and blue/green rebuilds assume a PostgreSQL server where several share a
        database. An exclusive lock on `<file>.server.lock`, held until `close` (or the
        process ends, however it ends), keeps a second server off the file; command-line
        tools do not take it. PostgreSQL: no-op."""
        if self.lite is None or self.lite.pool.is_sqlite_memory_mode or fcntl is None:
            return
        path = self.sqlite_path.removeprefix("file:").split("?", 1)[0] + ".server.lock"
        handle = open(path, "ab")  # noqa: SIM115 - held open until close()
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            raise StoreInUse(
                f"another jobnik server already serves {self.sqlite_path}: SQLite is for one "
                "server process (use PostgreSQL for several, or stop the other one)"
            ) from None
        self._server_lock = handle

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
        if session.position is not None:  # committed: the response's X-Jobnik-Position
            note_written(session.position)
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


def batches(
    events: Sequence[DomainEventProtocol[Any]], ids: Sequence[Any]
) -> Iterator[list[list[Op]]]:
    """Group consecutive events of one type and distinct aggregates: their ops commute."""
    run: list[list[Op]] = []
    kind: type | None = None
    seen: set[Any] = set()
    for event, position in zip(events, ids, strict=True):
        if run and (type(event) is not kind or event.originator_id in seen):
            yield run
            run, seen = [], set()
        kind = type(event)
        seen.add(event.originator_id)
        run.append(project(event, position))
    if run:
        yield run


class SqlSession:
    """One transaction; an identity map so a command sees one object per aggregate.

    A PostgreSQL write session starts optimistic: loads by id and the queue claim run beside
    other writers. Its first save or query of any other kind takes the writer lock, and with it
    checks that nothing it loaded has changed since (else ConcurrencyConflict: the command runs
    again); from then on it sees the latest committed state, as writers take turns."""

    def __init__(
        self, store: SqlStore, cur: Cursor | BatchCursor, *, write: bool, locked: bool
    ) -> None:
        self.store = store
        self.cur = cur
        self.p = store.dialect.param
        self.d = store.dialect
        self.write = write
        self.locked = locked
        self.loaded: dict[UUID, Entity] = {}
        self._seen: dict[UUID, tuple[str, int]] = {}  # loaded before the lock: table, version
        # rows read ahead, or snapshots of this process's own last writes, not used yet
        self._fetched: dict[UUID, dict[str, Any] | Snapshot] = {}
        self._ids: list[Later] = []  # the events' ids, as the batches that insert them return
        self._position: int | None = None
        # Stage summaries read ahead before this session sent any write, the deltas its saves
        # make to them, and the stage completions it predicted from the two (checked at commit).
        self._summary_seen: dict[UUID, dict[str, Any]] = {}
        self._deltas: dict[Any, dict[str, int]] = {}
        self._predicted: list[tuple[UUID, bool]] = []

    @property
    def position(self) -> int | None:
        """The log position of the last event this session appended."""
        if self._ids:
            if self._ids[-1].rows is None:
                cast(BatchCursor, self.cur).flush()
            rows = self._ids[-1].rows
            assert rows
            return int(rows[-1]["notification_id"])
        return self._position

    def lock(self) -> None:
        """Take the writer lock, checking that what was loaded before it is still current."""
        if self.locked or not self.write:
            return
        self.locked = True
        self.cur.execute(f"LOCK TABLE {self.store.events_table} IN EXCLUSIVE MODE")
        cast(BatchCursor, self.cur).locked = True
        if not self._seen:
            return
        by_table: dict[str, list[str]] = {}
        params: dict[str, Any] = {"n": len(self._seen)}
        for i, (key, (table, version)) in enumerate(self._seen.items()):
            by_table.setdefault(table, []).append(f"(%(i{i})s::uuid, %(v{i})s::bigint)")
            params[f"i{i}"], params[f"v{i}"] = key, version
        counts = " + ".join(
            f"(SELECT count(*) FROM {table} WHERE (id, version) IN ({', '.join(rows)}))"
            for table, rows in by_table.items()
        )
        cast(BatchCursor, self.cur).execute_prepared(
            f"SELECT jobnik_assert_fresh({counts}, %(n)s::bigint)", params, rows=len(self._seen)
        )

    def hold_queue(self, job_id: UUID) -> None:
        """Lock the queue rows of `job_id` and of its child jobs, at any depth (an abort
        cascades to them), before the writer lock (PostgreSQL).

        A dequeue holds the queue row it claimed (FOR UPDATE SKIP LOCKED) while it waits for
        the event table's lock. A command that changes the job's queue rows under that lock
        would wait for the row in turn: a deadlock, broken by PostgreSQL after
        `deadlock_timeout` by failing one side. Locking the rows first keeps one order, rows
        then table: the command waits for the claims under way (which can take the table lock
        meanwhile), and dequeues skip the rows it holds. Queued, not sent: it travels at the
        head of the command's write string."""
        if self.locked or not isinstance(self.cur, BatchCursor):
            return
        self.cur.execute_prepared(
            f"WITH RECURSIVE tree(id) AS (SELECT %(j)s::uuid UNION ALL SELECT c.id FROM {JOBS} c "
            "JOIN tree ON c.parent_job_id = tree.id) SELECT count(*) FROM (SELECT 1 FROM "
            f"{QUEUE} WHERE job_id IN (SELECT id FROM tree) ORDER BY task_id FOR UPDATE) held",
            {"j": job_id},
        )

    def _sent_events(self) -> bool:
        return any(ids.rows is not None for ids in self._ids)

    def all_completed(self, stage_id: UUID) -> bool:
        """Whether every task of the stage is COMPLETED, counting this session's saves.

        A PostgreSQL session that read the summary ahead (with its task) and has sent no
        write yet predicts it from that row and its own deltas, and checks at commit, under the
        writer lock, that the prediction still holds: no round trip while holding the lock,
        and a conflict only when a concurrent command changed the answer."""
        seen = self._summary_seen.get(stage_id)
        if seen is None or not self.write or self._sent_events():
            summary = self.summary(stage_id)
            return summary.completed == summary.total
        delta = self._deltas.get(stage_id, {})
        done = bool(
            seen["completed"] + delta.get("completed", 0) == seen["total"] + delta.get("total", 0)
        )
        self._predicted.append((stage_id, done))
        return done

    def close(self) -> None:
        """Before the commit: check the predictions made, under the writer lock.

        No NOTIFY: jobnik's followers poll and are woken in-process (`on_commit`), and a NOTIFY
        would serialise every commit of the cluster on the notification queue's lock."""
        if self._predicted:
            self.lock()
        for stage_id, done in self._predicted:
            cast(BatchCursor, self.cur).execute_prepared(
                f"SELECT jobnik_assert_fresh((SELECT count(*) FROM {SUMMARIES} WHERE stage_id = "
                "%(s)s::uuid AND (completed = total) = %(d)s::boolean), 1)",
                {"s": stage_id, "d": done},
            )

    def _load(self, table: str, key: UUID, convert: Any, missing: type[Exception]) -> Any:
        if key in self.loaded:
            return self.loaded[key]
        row = self._fetched.pop(key, None)
        if isinstance(row, Snapshot) and row.table == table:
            aggregate, version = row.restore(), row.version
        else:
            if not isinstance(row, dict):
                row = self.cur.one(
                    f"SELECT * FROM {table} WHERE id = {self.p('id')}",
                    {"id": self.d.dump("id", key)},
                )
            if row is None:
                raise missing
            aggregate, version = convert(row), row["version"]
        self.loaded[key] = aggregate
        if not self.locked and self.write:
            self._seen[key] = (table, version)
        return aggregate

    def _read_ahead(self, value: Any, *, claim: bool) -> dict[str, Any] | None:
        """The task row with id `value`, or (`claim`) the next queued of stage type `value`,
        locked. PostgreSQL write sessions read its stage's, job's and stage summary's rows in
        the same statement, prepared: every worker command uses them."""
        if not isinstance(self.cur, BatchCursor):
            p = self.p("v")
            which = f"({CLAIM.format(type=p, lock='')})" if claim else p
            params = {"v": value if claim else self.d.dump("id", value)}
            return self.cur.one(f"SELECT * FROM {TASKS} t WHERE t.id = {which}", params)
        where = (
            f"({CLAIM.format(type='%(v)s', lock=' FOR UPDATE SKIP LOCKED')})"
            if claim
            else "%(v)s::uuid"
        )
        sql = (
            "SELECT to_jsonb(t) AS task, s.id AS stage_id, s.version AS stage_version, "
            "to_jsonb(s)::text AS stage, j.id AS job_id, j.version AS job_version, "
            "to_jsonb(j)::text AS job, "
            f"to_jsonb(sm) AS summary FROM {TASKS} t JOIN {STAGES} s ON s.id = t.stage_id "
            f"JOIN {JOBS} j ON j.id = t.job_id LEFT JOIN {SUMMARIES} sm ON sm.stage_id = s.id "
            f"WHERE t.id = {where}"
        )
        later = self.cur.later_prepared(sql, {"v": value})
        self.cur.flush()
        rows = later.rows
        # (A prepared statement that waited for a rebuild's swap, DROP TABLE then RENAME, would
        # find nothing rather than re-resolve the names; it cannot wait for one: the session's
        # first statement, WRITING, waits for a swap under way and holds the next one off.)
        if not rows:
            return None
        row = rows[0]
        for kind in ("stage", "job"):
            key = row[f"{kind}_id"]
            if key not in self.loaded and key not in self._fetched:
                self._fetched[key] = self.store.parents.row(key, row[f"{kind}_version"], row[kind])
        if row["summary"] is not None and not self._sent_events():
            self._summary_seen.setdefault(row["stage_id"], row["summary"])
        return self.d.load_jsonb(row["task"])

    def _remember(self, aggregate: Entity) -> Entity:
        return self.loaded.setdefault(aggregate.id, aggregate)

    def job(self, job_id: UUID) -> Job:
        return cast(Job, self._load(JOBS, job_id, job_from_row, JobNotFound))

    def stage(self, stage_id: UUID) -> Stage:
        return cast(Stage, self._load(STAGES, stage_id, stage_from_row, StageNotFound))

    def task(self, task_id: UUID) -> Task:
        if (
            task_id not in self.loaded
            and task_id not in self._fetched
            and self.write
            and not self._recall(task_id)
        ):
            row = self._read_ahead(task_id, claim=False)
            if row is not None:
                self._fetched[task_id] = row
        return cast(Task, self._load(TASKS, task_id, task_from_row, TaskNotFound))

    def _recall(self, task_id: UUID) -> bool:
        """Start from this process's last write of the task, its stage and job (`written`), if
        any: only before the writer lock, whose freshness check then covers them."""
        if self.locked or not isinstance(self.cur, BatchCursor) or self._sent_events():
            return False
        entry = self.store.written.take(task_id)
        if entry is None:
            return False
        for snapshot in (entry.task, entry.stage, entry.job):
            if snapshot.id not in self.loaded:
                self._fetched.setdefault(snapshot.id, snapshot)
        if entry.summary is not None:
            self._summary_seen.setdefault(entry.task.state["stage_id"], dict(entry.summary))
        return True

    def summaries(self) -> dict[UUID, dict[str, int]]:
        """The stage summaries' counts this session saw, with its own changes: after its commit,
        what it knows of them (`written`)."""
        out = {}
        for stage_id, seen in self._summary_seen.items():
            delta = self._deltas.get(stage_id, {})
            out[stage_id] = {c: int(seen[c]) + delta.get(c, 0) for c in ("completed", "total")}
        return out

    def claim(self, stage_type: str) -> Task | None:
        row = self._read_ahead(stage_type, claim=True)
        if row is None:
            return None
        self._fetched.setdefault(row["id"], row)
        return self.task(row["id"])

    def stage_at(self, job_id: UUID, order: int) -> Stage | None:
        self.lock()
        row = self.cur.one(
            f"SELECT * FROM {STAGES} WHERE job_id = {self.p('job_id')} "
            f"AND stage_order = {self.p('o')}",
            {"job_id": self.d.dump("job_id", job_id), "o": order},
        )
        return cast(Stage, self._remember(stage_from_row(row))) if row else None

    def stages_of(self, job_id: UUID) -> list[Stage]:
        self.lock()
        rows = self.cur.all(
            f"SELECT * FROM {STAGES} WHERE job_id = {self.p('job_id')} ORDER BY stage_order",
            {"job_id": self.d.dump("job_id", job_id)},
        )
        return [cast(Stage, self._remember(stage_from_row(r))) for r in rows]

    def queued_tasks(self, job_id: UUID) -> list[Task]:
        self.lock()
        rows = self.cur.all(
            f"SELECT * FROM {TASKS} WHERE job_id = {self.p('job_id')} "
            "AND status IN ('PENDING', 'RETRIED', 'DELEGATED') ORDER BY creation_time, id",
            {"job_id": self.d.dump("job_id", job_id)},
        )
        return [cast(Task, self._remember(task_from_row(r))) for r in rows]

    def _jobs(self, where: str, params: dict[str, Any]) -> list[Job]:
        self.lock()
        rows = self.cur.all(
            f"SELECT * FROM {JOBS} WHERE {where} ORDER BY creation_time, id", params
        )
        return [cast(Job, self._remember(job_from_row(r))) for r in rows]

    def children_of(self, task_id: UUID) -> list[Job]:
        return self._jobs(
            f"parent_task_id = {self.p('t')}", {"t": self.d.dump("parent_task_id", task_id)}
        )

    def child_jobs(self, job_id: UUID) -> list[Job]:
        return self._jobs(
            f"parent_job_id = {self.p('j')} AND status NOT IN {FINAL_JOB_SQL}",
            {"j": self.d.dump("parent_job_id", job_id)},
        )

    def stale_delegations(self, before: datetime, limit: int) -> list[Task]:
        self.lock()
        rows = self.cur.all(
            f"SELECT * FROM {TASKS} t WHERE status = 'DELEGATED' AND delegated_at < "
            f"{self.p('before')} AND NOT EXISTS (SELECT 1 FROM {JOBS} j WHERE "
            f"j.parent_task_id = t.id AND j.status NOT IN {FINAL_JOB_SQL}) "
            f"ORDER BY delegated_at LIMIT {int(limit)}",
            {"before": self.d.dump("delegated_at", before)},
        )
        return [cast(Task, self._remember(task_from_row(r))) for r in rows]

    def summary(self, stage_id: UUID) -> Summary:
        self.lock()
        row = self.cur.one(
            f"SELECT * FROM {SUMMARIES} WHERE stage_id = {self.p('s')}",
            {"s": self.d.dump("stage_id", stage_id)},
        )
        return summary_from_row(row) if row else Summary()

    def expired_leases(self, now: datetime, limit: int) -> list[Task]:
        self.lock()
        rows = self.cur.all(
            f"SELECT * FROM {TASKS} WHERE status = 'IN_PROGRESS' AND lease_expires_at < "
            f"{self.p('now')} ORDER BY lease_expires_at LIMIT {int(limit)}",
            {"now": self.d.dump("lease_expires_at", now)},
        )
        return [cast(Task, self._remember(task_from_row(r))) for r in rows]

    def save(self, *aggregates: Entity) -> None:
        events = [e for a in aggregates for e in a.collect_events()]
        if not events:
            return
        self.lock()
        stored = [self.store.mapper.to_stored_event(e) for e in events]
        if isinstance(self.cur, BatchCursor):
            ids, positions = self.store.queue_events(self.cur, stored)
            self._ids.append(ids)
            self.store.apply(self.cur, events, positions, self._deltas)
        else:
            written = self.store.insert_events(self.cur, stored)
            self.store.apply(self.cur, events, written)
            self._position = written[-1]
        for a in aggregates:
            self._remember(a)
