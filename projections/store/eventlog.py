"""The event log: the one module that touches the eventsourcing library's internals.

What jobnik relies on beyond the library's public API, so that an upgrade of it is a change here
(the version is pinned in pyproject.toml):
- the events table's columns (originator_id, originator_version, topic, state, and the position:
  `notification_id` on PostgreSQL, `rowid` on SQLite), which jobnik reads and, on PostgreSQL,
  inserts into directly, in the write session's own batched transaction;
- SQLite's recorder's `_insert_events(cursor, stored_events)`, which appends within a transaction
  the caller holds;
- the stored JSON form of an event's state (`{"job_id": {"_data_": "<hex>"}, ...}` for a UUID),
  which a parallel rebuild reads on the server to route creation events to their job.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final
from uuid import UUID

from eventsourcing.application import Application
from eventsourcing.persistence import Notification, StoredEvent
from eventsourcing.sqlite import SQLiteApplicationRecorder, SQLiteCursor

from jobnik.projections.store.batch import BatchCursor, Later, Sql
from jobnik.projections.store.cursor import Cursor

COLUMNS: Final = "e.originator_id, e.originator_version, e.topic, e.state"


class EventLog(Application[UUID]):
    """The library application: mapper (transcoding), recorder and repository of jobnik's events."""

    name = "jobnik"


def open_log(env: Mapping[str, str]) -> EventLog:
    """The library application over the persistence settings `env`; it creates no table (the
    migrations do, once: several processes creating them at once fail)."""
    return EventLog(env={**env, "CREATE_TABLE": "n"})


def stored_event(row: Mapping[str, Any]) -> StoredEvent:
    """An events table row (`COLUMNS`) as the library's StoredEvent, on either backend."""
    oid = row["originator_id"]
    return StoredEvent(
        originator_id=oid if isinstance(oid, UUID) else UUID(oid),
        originator_version=row["originator_version"],
        topic=row["topic"],
        state=bytes(row["state"]),
    )


def notification(row: Mapping[str, Any]) -> Notification:
    """An events table row (`COLUMNS` and its position as `id`) as the library's Notification."""
    oid = row["originator_id"]
    return Notification(
        id=row["id"],
        originator_id=oid if isinstance(oid, UUID) else UUID(oid),
        originator_version=row["originator_version"],
        topic=row["topic"],
        state=bytes(row["state"]),
    )


def insert_sqlite(
    recorder: SQLiteApplicationRecorder, cur: Cursor, stored: Sequence[StoredEvent]
) -> list[int]:
    """SQLite: append through the library's recorder, in `cur`'s transaction; the events'
    notification ids."""
    return list(recorder._insert_events(SQLiteCursor(cur.raw), stored) or [])


def queue_insert_postgres(
    cur: BatchCursor, table: str, sequence: str, stored: Sequence[StoredEvent]
) -> tuple[Later, list[Sql]]:
    """PostgreSQL, under the writer lock: queue the events' INSERT. Returns its ids (filled in
    when the string is sent) and each event's position as a SQL expression, for the read models'
    statements queued after it (the ids are consecutive: nothing else inserts meanwhile)."""
    values = ", ".join(f"(%(o{i})s, %(v{i})s, %(t{i})s, %(s{i})s)" for i in range(len(stored)))
    params: dict[str, Any] = {}
    for i, e in enumerate(stored):
        params[f"o{i}"], params[f"v{i}"] = e.originator_id, e.originator_version
        params[f"t{i}"], params[f"s{i}"] = e.topic, e.state
    ids = cur.queued_prepared(
        f"INSERT INTO {table} (originator_id, originator_version, topic, state) "
        f"VALUES {values} RETURNING notification_id",
        params,
        rows=len(stored),
    )
    last = len(stored) - 1
    return ids, [Sql(f"(currval('{sequence}') - {last - i})") for i in range(len(stored))]


def job_in_state(field: str, events: str) -> str:
    """PostgreSQL: the UUID in the stored state's `field` of the events table alias `events`, as
    32 hex digits (how the library's transcoder stores a UUID)."""
    return f"convert_from({events}.state, 'UTF8')::json -> '{field}' ->> '_data_'"


def select(
    cur: Cursor,
    table: str,
    position: str,
    after: int,
    limit: int,
    stop: int | None = None,
    topics: Sequence[str] = (),
    join: tuple[str, dict[str, Any]] = ("", {}),
) -> list[Notification]:
    """Up to `limit` notifications after position `after` (up to `stop`, of `topics`), read
    through `cur`'s transaction; `position`: the table's position column; `join`: SQL joined to
    the events (alias `e`) with its parameters, to keep some of them."""
    p = cur.dialect.param
    sql_join, params = join[0], {**join[1], "after": after, "limit": limit}
    where = [f"e.{position} > {p('after')}"]
    if stop is not None:
        where.append(f"e.{position} <= {p('stop')}")
        params["stop"] = stop
    if topics:
        names = {f"t{i}": t for i, t in enumerate(topics)}
        where.append(f"e.topic IN ({', '.join(p(n) for n in names)})")
        params.update(names)
    cur.execute(
        f"SELECT e.{position} AS id, {COLUMNS} FROM {table} e{sql_join} "
        f"WHERE {' AND '.join(where)} ORDER BY e.{position} LIMIT {p('limit')}",
        params,
    )
    rows = cur.raw.fetchall()  # (the driver's rows as they are: no copy into dicts of our own)
    return [notification(r) for r in rows]
