"""The event log: the one module that touches the eventsourcing library's internals.

What jobnik relies on beyond the library's public API, so that an upgrade of it is a change here
(the version is pinned in pyproject.toml):
- the events table's columns (originator_id, originator_version, topic, state, and the position:
  `notification_id` on PostgreSQL, `rowid` on SQLite), which jobnik reads and, on PostgreSQL,
  inserts into directly, in the write session's own transaction;
- SQLite's recorder's `_insert_events(cursor, stored_events)`, which appends within a transaction
  the caller holds;
- SQLite's connection pool's `_create_connection`, which opens each connection with a cache of
  one prepared statement (`cached_statements=True`): `open_log` has it open them keeping
  `STATEMENTS_KEPT`, so that a statement a command sends again is not compiled again;
- the stored JSON form of an event's state (`{"job_id": {"_type_": "uuid_hex", "_data_": "<hex>"}}`
  for a UUID), which a parallel rebuild reads on the server to route creation events to their
  job, and which `EventTranscoder`, the library's transcoder made faster, decodes.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from json import JSONDecoder
from json.scanner import make_scanner
from typing import Any, Final, cast
from uuid import UUID

from eventsourcing.application import Application
from eventsourcing.persistence import InterfaceError, JSONTranscoder, Notification, StoredEvent
from eventsourcing.sqlite import (
    SQLITE3_DEFAULT_LOCK_TIMEOUT,
    SQLiteApplicationRecorder,
    SQLiteConnection,
    SQLiteConnectionPool,
    SQLiteCursor,
)

from jobnik.projections.store.cursor import Cursor

COLUMNS: Final = "e.originator_id, e.originator_version, e.topic, e.state"


STATEMENTS_KEPT: Final = 256  # prepared statements an SQLite connection keeps
KEPT_UUIDS: Final = 10_000  # UUIDs a transcoder keeps to hand out again


class EventTranscoder(JSONTranscoder):
    """The library's JSON transcoder, with the library's transcodings, that decodes a stored
    event's state with less Python per event and keeps what it cannot decode.

    The JSON decoder's hook turns the stored form of a UUID or a datetime into the object
    itself and hands any other `{"_type_": ..., "_data_": ...}` to the transcoding registered
    under its name. A UUID is made once for the events that name it (a stage's id in each of
    its tasks' events; UUIDs are immutable), which also makes a fold's lookups by that id find
    the very object.

    Where the library would fail on one value, it keeps the value as the object it is: a
    `{"_type_": ..., "_data_": ...}` naming a type nobody registered, or data that is not that
    type's text. Only user data can hold such an object (the API refuses it since), and one such
    event must not stop a catch-up projection for good, nor a job's history."""

    def __init__(self) -> None:
        super().__init__()
        self._uuids: dict[str, UUID] = {}  # by their stored text, the latest ones
        # (the scanner behind `JSONDecoder.decode`, called without its Python wrappers)
        self._scan: Callable[[str, int], tuple[Any, int]] = make_scanner(
            cast(Any, JSONDecoder(object_hook=self._hook))
        )

    def decode(self, data: bytes) -> Any:
        text = data.decode("utf8")
        value, end = self._scan(text, 0)
        if text[end:].strip() or type(value) is not dict:
            raise ValueError("an event's state is one JSON object")
        return value

    def _hook(self, d: dict[str, Any]) -> Any:
        if len(d) != 2:
            return d
        kind, data = d.get("_type_"), d.get("_data_")
        if kind is None or "_data_" not in d:
            return d
        try:
            if type(data) is str:
                if kind == "uuid_hex":
                    uuid = self._uuids.get(data)
                    if uuid is None:
                        if len(self._uuids) >= KEPT_UUIDS:
                            self._uuids.clear()
                        uuid = self._uuids[data] = UUID(data)
                    return uuid
                if kind == "datetime_iso":
                    return datetime.fromisoformat(data)
            return self.names[kind].decode(data)
        # (the library's transcodings check their data with `assert`)
        except (KeyError, TypeError, ValueError, AssertionError):
            return d  # user data shaped like an encoding it is not (the class docstring)


class EventLog(Application[UUID]):
    """The library application: mapper (transcoding), recorder and repository of jobnik's events."""

    name = "jobnik"

    def construct_transcoder(self) -> JSONTranscoder:
        transcoder = EventTranscoder()
        self.register_transcodings(transcoder)
        return transcoder


def open_log(env: Mapping[str, str]) -> EventLog:
    """The library application over the persistence settings `env`; it creates no table (the
    migrations do, once: several processes creating them at once fail)."""
    log = EventLog(env={**env, "CREATE_TABLE": "n"})
    if isinstance(log.recorder, SQLiteApplicationRecorder):
        pool = log.recorder.datastore.pool
        setattr(pool, "_create_connection", lambda: _sqlite_connection(pool))  # noqa: B010
    return log


def _sqlite_connection(pool: SQLiteConnectionPool) -> SQLiteConnection:
    """A connection as the library's pool opens one, keeping `STATEMENTS_KEPT` prepared
    statements (the store switches a file to WAL before any is opened: `use_wal`)."""
    try:
        conn = sqlite3.connect(
            database=pool.db_name,
            uri=True,
            check_same_thread=False,
            isolation_level=None,
            cached_statements=STATEMENTS_KEPT,
            timeout=pool.lock_timeout or SQLITE3_DEFAULT_LOCK_TIMEOUT,
        )
    except (sqlite3.Error, TypeError) as e:
        raise InterfaceError(e) from e
    conn.row_factory = sqlite3.Row
    return SQLiteConnection(sqlite_conn=conn, max_age=pool.max_age)


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


def insert_postgres(cur: Any, table: str, stored: Sequence[StoredEvent]) -> None:
    """PostgreSQL, under the writer lock: insert the events, in order, through `cur` (a psycopg
    cursor, in pipeline mode: nothing waits); its one row, once sent, is the last event's log
    position (`last`)."""
    cur.execute(
        f"WITH inserted AS (INSERT INTO {table} (originator_id, originator_version, topic, state) "
        "SELECT * FROM unnest(%(o)s::uuid[], %(v)s::int[], %(t)s::text[], %(s)s::bytea[]) "
        "RETURNING notification_id) SELECT max(notification_id) AS last FROM inserted",
        {
            "o": [e.originator_id for e in stored],
            "v": [e.originator_version for e in stored],
            "t": [e.topic for e in stored],
            "s": [e.state for e in stored],
        },
    )


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
        condition, names = cur.dialect.one_of("e.topic", "topics", topics)
        where.append(condition)
        params.update(names)
    cur.execute(
        f"SELECT e.{position} AS id, {COLUMNS} FROM {table} e{sql_join} "
        f"WHERE {' AND '.join(where)} ORDER BY e.{position} LIMIT {p('limit')}",
        params,
    )
    rows = cur.raw.fetchall()  # (the driver's rows as they are: no copy into dicts of our own)
    return [notification(r) for r in rows]


def delete_positions(cur: Cursor, table: str, position: str, positions: Sequence[int]) -> None:
    """Remove from the events table (`position`: its position column) the events at
    `positions`, in `cur`'s transaction. Readers of the log by position (catch-up projections,
    feeds) never look back past what they have read, so events they have read may go.

    Each event is found by its position, through the table's primary key, whatever the table's
    statistics: on PostgreSQL in one statement for them all (its plan probes the key even when a
    VACUUM of a nearly empty log left the statistics counting a dozen rows); on SQLite, whose
    statements run in the process, one statement per event."""
    if not positions:
        return
    p = cur.dialect.param
    if cur.dialect.arrays:
        cur.execute(f"DELETE FROM {table} WHERE {position} = ANY({p('p')})", {"p": list(positions)})
    else:
        removed = [{"p": n} for n in positions]
        cur.executemany(f"DELETE FROM {table} WHERE {position} = {p('p')}", removed)


USER_DATA: Final[dict[str, Any]] = {"data": {}, "user_metadata": {}, "result": None, "lines": []}


def erase_user_data(cur: Cursor, log: EventLog, table: str, position: str, job_id: Any) -> int:
    """Rewrite, in `cur`'s transaction, every stored event of the job `job_id` (its history
    index's positions) whose state holds user data (USER_DATA's fields) with those fields
    emptied; every other field (type, time, status, actor, reason) stays. Returns how many
    events were rewritten."""
    p = cur.dialect.param
    rows = cur.raw_all(
        f"SELECT e.{position} AS position, e.state FROM {table} e "
        f"JOIN job_events_v1 j ON j.position = e.{position} WHERE j.job_id = {p('j')}",
        {"j": cur.dialect.dump("job_id", job_id)},
    )
    transcoder = log.mapper.transcoder
    changed = []
    for row in rows:
        state = transcoder.decode(bytes(row["state"]))
        if not any(field in state for field in USER_DATA):
            continue
        state.update({k: v for k, v in USER_DATA.items() if k in state})
        changed.append({"s": transcoder.encode(state), "p": row["position"]})
    if changed:
        cur.executemany(f"UPDATE {table} SET state = {p('s')} WHERE {position} = {p('p')}", changed)
    return len(changed)
