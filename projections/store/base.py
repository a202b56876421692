"""The store: the library's event log and the inline read models, written in one transaction.

A write session serialises with every other writer. Inside it, a command reads rows, lets
aggregates decide, appends their events and applies the same events to the read models, then
commits: all of it or nothing. `SqlStore` is what every backend's store does and offers;
`PostgresStore` (postgres.py) and `SqliteStore` (sqlite.py) hold what differs. `open_store`
(backends.py) picks one from the settings.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar
from typing import Any, ClassVar, Final

from eventsourcing.domain import DomainEventProtocol
from eventsourcing.persistence import Notification
from eventsourcing.postgres import PostgresApplicationRecorder
from eventsourcing.sqlite import SQLiteApplicationRecorder

from jobnik.projections.inline.ops import Add
from jobnik.projections.inline.tables import SUMMARIES
from jobnik.projections.store import eventlog
from jobnik.projections.store.bulk import BulkWriter
from jobnik.projections.store.cursor import Cursor
from jobnik.projections.store.dialect import Dialect
from jobnik.projections.store.errors import wrapped
from jobnik.projections.store.executor import OpExecutor, batches
from jobnik.projections.store.leader import LeaderLock
from jobnik.projections.store.pagewriter import Writer
from jobnik.projections.store.session import SqlSession

# The write session open in this context: a nested `session(write=True)` joins it instead of
# opening a second transaction, so a caller can wrap a command and its own rows (an
# Idempotency-Key, api/idempotency.py) in one all-or-nothing transaction.
_AMBIENT: ContextVar[SqlSession | None] = ContextVar("jobnik_write_session", default=None)
Recorder = PostgresApplicationRecorder | SQLiteApplicationRecorder


class SqlStore(ABC):
    """Sessions over the event log and the inline read models, and what projections, queries
    and rebuilds need of the database; one subclass per backend."""

    dialect: ClassVar[Dialect]
    position_column: ClassVar[str]  # the events table's log position
    replays_in_parallel: ClassVar[bool] = False  # rebuild parts in processes of their own
    serves_many_processes: ClassVar[bool] = True  # API server processes side by side

    def __init__(self, env: Mapping[str, str], log: eventlog.EventLog, recorder: Recorder):
        self.env: Final = dict(env)  # the library's settings (a rebuild's parts open their own)
        self.log_app = log
        self.recorder = recorder
        self.mapper = log.mapper
        self.decode = log.mapper.to_domain_event  # stored events to domain events
        self.executor = OpExecutor(self.dialect)
        self.events_table = recorder.events_table_name
        # Called with the log position each write session committed, in the committing thread
        # (wakes catch-up runners; the API notes a request's X-Jobnik-Position).
        self.on_commit: list[Callable[[int], None]] = []
        # Called with the seconds each committed write session waited for the writer lock
        # (PostgreSQL: the round trip of the statements that take it, sent with the lock).
        self.on_lock_wait: list[Callable[[float], None]] = []

    @property
    def backend(self) -> str:
        return self.dialect.name

    def close(self) -> None:
        self.log_app.close()

    def claim_server(self) -> None:  # noqa: B027 - a hook: only a one-process backend has one
        """Make this process the only server of its database where the backend serves one
        process (StoreInUse if another does); elsewhere nothing. Held until `close`."""

    # -- the log -------------------------------------------------------------------------------

    def create_tables(self) -> None:
        """The library's own tables (the event log)."""
        with wrapped():
            self.recorder.create_table()

    def head(self) -> int:
        """The log position of the last event committed."""
        with wrapped():
            return int(self.recorder.max_notification_id() or 0)

    def log_head(self, cur: Cursor) -> int:
        """The log position of the last event, as `cur`'s transaction sees it."""
        row = cur.one(f"SELECT MAX({self.position_column}) AS head FROM {self.events_table}")
        return int(row["head"] or 0) if row else 0

    def notifications(
        self, after: int, limit: int, *, stop: int | None = None, topics: Sequence[str] = ()
    ) -> Sequence[Notification]:
        """Up to `limit` notifications after position `after` (up to `stop`, of `topics`)."""
        with wrapped():
            return self.recorder.select_notifications(
                after, limit, stop=stop, topics=list(topics), inclusive_of_start=False
            )

    def events_after(
        self,
        cur: Cursor,
        after: int,
        limit: int,
        stop: int | None = None,
        topics: Sequence[str] = (),
        part: tuple[int, int] | None = None,
    ) -> list[Notification]:
        """`notifications`, read through `cur`'s transaction; `part`: only the events of one
        part of the jobs (a parallel rebuild's routes, `PostgresStore.routes`)."""
        join = self.route_join("e", part) if part is not None else ("", {})
        return eventlog.select(
            cur, self.events_table, self.position_column, after, limit, stop, topics, join
        )

    def route_join(self, events: str, part: tuple[int, int]) -> tuple[str, dict[str, Any]]:
        """The JOIN keeping the events (alias `events`) of one part of a parallel rebuild."""
        raise NotImplementedError(f"{self.backend} replays in one process")

    # -- transactions and sessions -------------------------------------------------------------

    @abstractmethod
    def cursor(
        self, *, write: bool, lock: bool = True, swap: bool = False, snapshot: bool = False
    ) -> AbstractContextManager[Cursor]:
        """A transaction: committed on success when `write`, rolled back on an error (a read,
        which writes nothing, may end either way).

        A write transaction serialises with every other writer; `lock=False` leaves the event
        log's writers alone (catch-up projections and rebuilds append no events and write only
        their own tables), where a backend allows writers side by side. `swap`: first wait until
        no write session is under way and keep new ones from starting (a rebuild's swap drops
        and renames the live tables). `snapshot`: every read sees one moment.
        """

    @abstractmethod
    def migration_lock(self) -> AbstractContextManager[None]:
        """Held while a process creates or upgrades the schema: processes take turns."""

    @contextmanager
    def session(self, *, write: bool) -> Iterator[SqlSession]:
        """A transaction; a write session opened inside another one (same context) joins it,
        holding the writer lock from then on."""
        ambient = _AMBIENT.get()
        if write and ambient is not None and ambient.store is self:
            ambient.lock()
            yield ambient  # the outer session commits (or rolls back) and notes the position
            return
        with self._open(write) as session:
            token = _AMBIENT.set(session) if write else None
            try:
                yield session
                session.close()
            finally:
                if token is not None:
                    _AMBIENT.reset(token)
        if session.position is not None:
            for listener in self.on_commit:
                listener(session.position)
        waited = session.cur.lock_wait
        if waited is not None:
            for observe in self.on_lock_wait:
                observe(waited)

    @abstractmethod
    def _open(self, write: bool) -> AbstractContextManager[SqlSession]:
        """A session on a new transaction, committed when the block ends without error."""

    def apply(
        self,
        cur: Any,
        events: Sequence[DomainEventProtocol[Any]],
        ids: Sequence[Any],
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

    @abstractmethod
    def leader_lock(self, name: str) -> LeaderLock:
        """A lock named `name` at most one process of this database holds at a time."""

    @abstractmethod
    def reclaim_space(self) -> None:
        """Make the space of rows removed (an archive run's) reusable by the rows inserted next,
        outside any transaction and without the writer lock, so that the database's size holds
        while jobs come and go."""

    # -- what a rebuild needs ------------------------------------------------------------------

    @abstractmethod
    def columns_of(self, cur: Cursor, table: str) -> list[str]:
        """The columns of `table`, in order."""

    @abstractmethod
    def restore_index_names(self, cur: Cursor, table: str, marker: str) -> None:
        """After a shadow table took the name `table`: its indexes, named with `marker`, take
        their live names (without it), in the caller's transaction."""

    @abstractmethod
    def settled(self, settle: Callable[[Cursor], None]) -> AbstractContextManager[Cursor]:
        """A cursor that sees what `settle` wrote and nothing committed after it: `settle` runs
        in a write transaction while no writer commits."""

    @contextmanager
    def page_writers(self, count: int) -> Iterator[list[Writer] | None]:
        """`count` writers of a rebuild's pages, each on a connection and thread of its own,
        where the backend writes side by side (else None: pages are applied in turn)."""
        yield None

    @abstractmethod
    def bulk(self, rename: Callable[[str], str]) -> BulkWriter:
        """The writer of a rebuild's folded pages into the tables `rename` names."""

    @contextmanager
    def routes(self, parts: int, head: int) -> Iterator[bool]:
        """The events up to `head` routed to `parts` parts by job; True when every one is."""
        yield False
