"""PostgreSQL: the production store. Many API processes and workers share one database.

Write sessions take turns on the event table's EXCLUSIVE lock, which the library's recorder needs
anyway to keep notification ids in commit order. To hold it briefly a write session starts
optimistic (`PostgresSession`): it loads its rows beside other writers and takes the lock at its
first write, checking then that nothing it loaded has changed. Its statements are pipelined
(pgsession.py).

Lock order. A write session reads optimistically (the read-model tables' ACCESS SHARE locks)
before it waits for the event table's lock, while a rebuild's swap holds that lock and needs
ACCESS EXCLUSIVE on the same tables to drop and rename them: a deadlock, which PostgreSQL breaks
by failing one of the two. So both first take one advisory lock, write sessions shared (they never
wait for each other) and the swap exclusive: a swap waits for the sessions under way, and new ones
wait for the swap before they read anything (`writing`, `swapping` in sql/queries.postgres.sql).
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager, suppress
from typing import Any, Final

import psycopg
from eventsourcing.postgres import PostgresApplicationRecorder
from psycopg import sql as psql

from jobnik.projections.store import pgsession, routes
from jobnik.projections.store.base import SqlStore
from jobnik.projections.store.bulk import BulkWriter, PostgresBulk
from jobnik.projections.store.cursor import Cursor
from jobnik.projections.store.dialect import POSTGRES
from jobnik.projections.store.errors import wrapped
from jobnik.projections.store.eventlog import EventLog
from jobnik.projections.store.executor import OpExecutor
from jobnik.projections.store.leader import AdvisoryLock, LeaderLock
from jobnik.projections.store.names import checked
from jobnik.projections.store.pagewriter import Writer
from jobnik.projections.store.pgsession import PostgresSession
from jobnik.projections.store.session import SqlSession

MIGRATION_KEY: Final = zlib.crc32(b"jobnik-migrations")
RECLAIM_WAIT: Final = 10.0  # seconds `reclaim_space` waits for older transactions to end


class PostgresStore(SqlStore):
    dialect = POSTGRES
    position_column = "notification_id"
    replays_in_parallel = True

    def __init__(
        self, env: Mapping[str, str], log: EventLog, recorder: PostgresApplicationRecorder
    ) -> None:
        super().__init__(env, log, recorder)
        self.pg = recorder.datastore

    @contextmanager
    def cursor(
        self, *, write: bool, lock: bool = True, swap: bool = False, snapshot: bool = False
    ) -> Iterator[Cursor]:
        # A read ends with a commit too, as a write session that wrote nothing does (`_open`):
        # it has nothing to undo, and a rollback would make psycopg forget the statements
        # prepared on the pooled connection, which every later command would parse again.
        with (
            wrapped(),
            self.pg.get_connection() as conn,
            conn.transaction(),
            conn.cursor() as raw,
        ):
            if snapshot:
                raw.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            if write and swap:
                raw.execute(self.dialect.sql("swapping"))
            if write and lock:
                raw.execute(self.dialect.sql("lock_writers", events=self.events_table))
            yield Cursor(raw, self.dialect)

    @contextmanager
    def migration_lock(self) -> Iterator[None]:
        # A session lock, on a connection held across the library's DDL and the migrations.
        with wrapped(), self.pg.get_connection() as conn:
            conn.execute(self.dialect.sql("migrating"), {"key": MIGRATION_KEY})
            try:
                yield
            finally:
                conn.execute(self.dialect.sql("migrated"), {"key": MIGRATION_KEY})

    @contextmanager
    def _open(self, write: bool) -> Iterator[SqlSession]:
        """Reads: a plain transaction. Writes: a pipelined one that takes the writer lock when
        it first needs it (`PostgresSession`); a session that wrote nothing ends with a commit,
        one that failed after writing rolls back."""
        if not write:
            with self.cursor(write=False) as cur:
                yield SqlSession(self, cur, write=False)
            return
        with wrapped(), self.pg.get_connection() as conn:
            try:
                with conn.pipeline():
                    session = PostgresSession(self, conn)
                    session.begin()
                    try:
                        yield session  # (the store's `session` closes it: its last checks)
                    except BaseException:
                        if session.wrote:
                            session.abandon()
                        else:
                            session.commit()
                        raise
                    session.commit()
                    began = time.perf_counter()
                if session.locked:  # the commit's round trips: the lock's wait and hold
                    session.cur.lock_wait = time.perf_counter() - began
                session.position  # noqa: B018 - read while the connection is the session's
            except psycopg.Error as e:
                raise pgsession.error(e) from e
            finally:
                if conn.info.transaction_status.name != "IDLE":
                    conn.rollback()

    def connection_kwargs(self) -> dict[str, Any]:
        """The library pool's connection arguments (a copy), for the connections jobnik opens
        beside it (leader locks, a rebuild's writers)."""
        given = self.pg.pool.kwargs
        return dict((given() if callable(given) else given) or {})

    def leader_lock(self, name: str) -> LeaderLock:
        return AdvisoryLock(name, self.connection_kwargs)

    def reclaim_space(self) -> None:
        """A plain VACUUM of each of jobnik's tables, twice, on a connection of its own. The
        first pass frees the removed rows' space and empties index pages; an emptied page is
        free for reuse once every transaction that could still reach it has ended, which the
        first pass sees only where another transaction ended meanwhile. So a transaction
        takes an id and ends, and once every transaction older than it has ended (waited for
        at most RECLAIM_WAIT seconds) the second pass puts those pages in each index's free
        space map (an index whose pages the first pass freed is not read again). A table whose
        lock another holds is passed over, and one dropped meanwhile (a rebuild's swap) is left
        alone."""
        kwargs = self.connection_kwargs()
        kwargs.pop("row_factory", None)
        with wrapped(), psycopg.connect(autocommit=True, **kwargs) as conn:
            tables = [name for (name,) in conn.execute(self.dialect.sql("own_tables"))]
            self._vacuum(conn, tables)
            row = conn.execute(self.dialect.sql("end_a_transaction")).fetchone()
            xid = row[0] if row else None
            waited = time.monotonic() + RECLAIM_WAIT
            while time.monotonic() < waited:
                free = conn.execute(self.dialect.sql("emptied_pages_free"), {"xid": xid})
                if (free.fetchone() or (False,))[0]:
                    break
                time.sleep(0.1)
            self._vacuum(conn, tables)

    def _vacuum(self, conn: psycopg.Connection[Any], tables: list[str]) -> None:
        vacuum = psql.SQL(self.dialect.sql("vacuum"))
        for table in tables:
            with suppress(psycopg.errors.UndefinedTable):  # (dropped since it was listed)
                conn.execute(vacuum.format(table=psql.Identifier(table)))

    # -- what a rebuild needs ------------------------------------------------------------------

    def columns_of(self, cur: Cursor, table: str) -> list[str]:
        rows = cur.raw_all(
            "SELECT column_name FROM information_schema.columns WHERE "
            "table_schema = current_schema() AND table_name = %(t)s ORDER BY ordinal_position",
            {"t": table},
        )
        return [r["column_name"] for r in rows]

    def restore_index_names(self, cur: Cursor, table: str, marker: str) -> None:
        rows = cur.raw_all(
            "SELECT indexname FROM pg_indexes WHERE schemaname = current_schema() "
            "AND tablename = %(t)s",
            {"t": table},
        )
        for r in rows:
            name = r["indexname"]
            if marker in name:
                live = name.replace(marker, "", 1)
                cur.execute(f"ALTER INDEX {checked(name)} RENAME TO {checked(live)}")

    @contextmanager
    def settled(self, settle: Callable[[Cursor], None]) -> Iterator[Cursor]:
        """The snapshot is a REPEATABLE READ transaction that takes it once `settle` committed,
        while another connection holds the event table's lock: writers wait for `settle`,
        not for what the caller then reads."""
        with self.cursor(write=False, snapshot=True) as snapshot:
            with wrapped(), self.pg.get_connection() as held, held.transaction(force_rollback=True):
                held.execute(self.dialect.sql("lock_writers", events=self.events_table))
                with self.cursor(write=True, lock=False) as cur:
                    settle(cur)
                snapshot.execute("SELECT 1")  # the snapshot: taken while no writer can commit
            yield snapshot

    @contextmanager
    def page_writers(self, count: int) -> Iterator[list[Writer] | None]:
        with ExitStack() as stack:
            kwargs = self.connection_kwargs()
            yield [stack.enter_context(Writer(kwargs, self.dialect)) for _ in range(count)]

    def bulk(self, rename: Callable[[str], str]) -> BulkWriter:
        return PostgresBulk(OpExecutor(self.dialect, rename), rename, self.events_table)

    @contextmanager
    def routes(self, parts: int, head: int) -> Iterator[bool]:
        with routes.routes(self, parts, head) as complete:
            yield complete

    def route_join(self, events: str, part: tuple[int, int]) -> tuple[str, dict[str, Any]]:
        return routes.join(events, part[0])
