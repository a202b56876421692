"""The SQL store: the library's event table and the inline read models, in one transaction.

A write session serialises with every other writer (PostgreSQL: the event table's EXCLUSIVE lock,
taken first, which the library's recorder needs anyway to keep notification ids in commit order;
SQLite: BEGIN IMMEDIATE). Inside it, a command reads rows, lets aggregates decide, appends their
events through the library's recorder and applies the same events to the read models, then commits:
all of it or nothing.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import datetime
from typing import Any, cast
from uuid import UUID

from eventsourcing.application import Application
from eventsourcing.domain import DomainEventProtocol
from eventsourcing.persistence import PersistenceError, StoredEvent
from eventsourcing.postgres import PostgresApplicationRecorder, PostgresDatastore
from eventsourcing.sqlite import SQLiteApplicationRecorder, SQLiteDatastore

from jobnik.domain.base import Entity
from jobnik.domain.errors import DatabaseError, JobNotFound, StageNotFound, TaskNotFound
from jobnik.domain.jobs import Job
from jobnik.domain.ports import Summary
from jobnik.domain.stages import Stage
from jobnik.domain.tasks import Task
from jobnik.projections.dialect import POSTGRES, SQLITE, Dialect
from jobnik.projections.entities import Op, project
from jobnik.projections.executor import OpExecutor
from jobnik.projections.migrations import migrate
from jobnik.projections.positions import note_written
from jobnik.projections.rows import job_from_row, stage_from_row, summary_from_row, task_from_row
from jobnik.projections.schema import JOBS, STAGES, SUMMARIES, TASKS

log = logging.getLogger(__name__)

FINAL_JOB_SQL = "('COMPLETED', 'FAILED', 'ABORTED')"

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


class SqlStore:
    """Sessions over the event log and the inline read models, on PostgreSQL or SQLite."""

    def __init__(self, env: Mapping[str, str]) -> None:
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
        else:  # pragma: no cover - configuration error
            raise TypeError(f"unsupported recorder {type(recorder).__name__}")
        self.mapper = self.log_app.mapper
        self.executor = OpExecutor(self.dialect)
        self.events_table = recorder.events_table_name
        # Called with the log position each write session committed (wakes catch-up runners).
        self.on_commit: list[Callable[[int], None]] = []

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
        self.log_app.close()

    def create_tables(self) -> None:
        """The library's own tables (the event log)."""
        cast(PostgresApplicationRecorder | SQLiteApplicationRecorder, self.recorder).create_table()

    @contextmanager
    def cursor(self, *, write: bool, lock: bool = True) -> Iterator[Cursor]:
        """A transaction: committed on success when `write`, rolled back otherwise.

        A write transaction serialises with every other writer. `lock=False` (PostgreSQL) leaves
        the event table unlocked: for catch-up projections and rebuilds, which append no events
        and write only their own tables (SQLite has one writer at a time whatever `lock` says).
        """
        try:
            if self.pg is not None:
                with (
                    self.pg.get_connection() as conn,
                    conn.transaction(force_rollback=not write),
                    conn.cursor() as raw,
                ):
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
        """A transaction; a write session opened inside another one (same context) joins it."""
        ambient = _AMBIENT.get()
        if write and ambient is not None and ambient.store is self:
            yield ambient  # the outer session commits (or rolls back) and notes the position
            return
        with self.cursor(write=write) as cur:
            session = SqlSession(self, cur)
            token = _AMBIENT.set(session) if write else None
            try:
                yield session
            finally:
                if token is not None:
                    _AMBIENT.reset(token)
        if session.position is not None:  # committed: the response's X-Jobnik-Position
            note_written(session.position)
            for listener in self.on_commit:
                listener(session.position)

    def insert_events(self, cur: Cursor, stored: Sequence[StoredEvent]) -> list[int]:
        """Append through the library's recorder (same transaction); returns notification ids."""
        if self.pg is not None:
            pg = cast(PostgresApplicationRecorder, self.recorder)
            pg._insert_stored_events(cur.raw, stored)
            return list(pg._fetch_ids_after_insert_events(cur.raw, stored) or [])
        lite = cast(SQLiteApplicationRecorder, self.recorder)
        from eventsourcing.sqlite import SQLiteCursor

        return list(lite._insert_events(SQLiteCursor(cur.raw), stored) or [])

    def apply(
        self, cur: Cursor, events: Sequence[DomainEventProtocol[Any]], ids: Sequence[int]
    ) -> None:
        """Apply events (stored at `ids`) to the inline read models."""
        self.executor.run(cur, batches(events, ids))


def batches(
    events: Sequence[DomainEventProtocol[Any]], ids: Sequence[int]
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
    """One transaction; an identity map so a command sees one object per aggregate."""

    def __init__(self, store: SqlStore, cur: Cursor) -> None:
        self.store = store
        self.cur = cur
        self.p = store.dialect.param
        self.d = store.dialect
        self.loaded: dict[UUID, Entity] = {}
        self.position: int | None = None

    def _load(self, table: str, key: UUID, convert: Any, missing: type[Exception]) -> Any:
        if key in self.loaded:
            return self.loaded[key]
        row = self.cur.one(
            f"SELECT * FROM {table} WHERE id = {self.p('id')}", {"id": self.d.dump("id", key)}
        )
        if row is None:
            raise missing
        aggregate = convert(row)
        self.loaded[key] = aggregate
        return aggregate

    def _remember(self, aggregate: Entity) -> Entity:
        return self.loaded.setdefault(aggregate.id, aggregate)

    def job(self, job_id: UUID) -> Job:
        return cast(Job, self._load(JOBS, job_id, job_from_row, JobNotFound))

    def stage(self, stage_id: UUID) -> Stage:
        return cast(Stage, self._load(STAGES, stage_id, stage_from_row, StageNotFound))

    def task(self, task_id: UUID) -> Task:
        return cast(Task, self._load(TASKS, task_id, task_from_row, TaskNotFound))

    def stage_at(self, job_id: UUID, order: int) -> Stage | None:
        row = self.cur.one(
            f"SELECT * FROM {STAGES} WHERE job_id = {self.p('job_id')} "
            f"AND stage_order = {self.p('o')}",
            {"job_id": self.d.dump("job_id", job_id), "o": order},
        )
        return cast(Stage, self._remember(stage_from_row(row))) if row else None

    def stages_of(self, job_id: UUID) -> list[Stage]:
        rows = self.cur.all(
            f"SELECT * FROM {STAGES} WHERE job_id = {self.p('job_id')} ORDER BY stage_order",
            {"job_id": self.d.dump("job_id", job_id)},
        )
        return [cast(Stage, self._remember(stage_from_row(r))) for r in rows]

    def queued_tasks(self, job_id: UUID) -> list[Task]:
        rows = self.cur.all(
            f"SELECT * FROM {TASKS} WHERE job_id = {self.p('job_id')} "
            "AND status IN ('PENDING', 'RETRIED', 'DELEGATED') ORDER BY creation_time, id",
            {"job_id": self.d.dump("job_id", job_id)},
        )
        return [cast(Task, self._remember(task_from_row(r))) for r in rows]

    def _jobs(self, where: str, params: dict[str, Any]) -> list[Job]:
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
        rows = self.cur.all(
            f"SELECT * FROM {TASKS} t WHERE status = 'DELEGATED' AND delegated_at < "
            f"{self.p('before')} AND NOT EXISTS (SELECT 1 FROM {JOBS} j WHERE "
            f"j.parent_task_id = t.id AND j.status NOT IN {FINAL_JOB_SQL}) "
            f"ORDER BY delegated_at LIMIT {int(limit)}",
            {"before": self.d.dump("delegated_at", before)},
        )
        return [cast(Task, self._remember(task_from_row(r))) for r in rows]

    def claim(self, stage_type: str) -> Task | None:
        lock = " FOR UPDATE SKIP LOCKED" if self.d.name == "postgres" else ""
        row = self.cur.one(
            "SELECT task_id FROM queue_v1 WHERE stage_type = "
            f"{self.p('t')} AND stage_open AND job_open ORDER BY priority_rank, seq LIMIT 1{lock}",
            {"t": stage_type},
        )
        return self.task(row["task_id"]) if row else None

    def summary(self, stage_id: UUID) -> Summary:
        row = self.cur.one(
            f"SELECT * FROM {SUMMARIES} WHERE stage_id = {self.p('s')}",
            {"s": self.d.dump("stage_id", stage_id)},
        )
        return summary_from_row(row) if row else Summary()

    def expired_leases(self, now: datetime, limit: int) -> list[Task]:
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
        stored = [self.store.mapper.to_stored_event(e) for e in events]
        ids = self.store.insert_events(self.cur, stored)
        self.store.apply(self.cur, events, ids)
        self.position = ids[-1]
        for a in aggregates:
            self._remember(a)
