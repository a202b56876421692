"""The event log: the one module that touches the eventsourcing library's internals.

What jobnik relies on beyond the library's public API, so that an upgrade of it is a change here
(the version is pinned in pyproject.toml):
- the events table's columns (originator_id, originator_version, topic, state, and the position:
  `notification_id` on PostgreSQL, `rowid` on SQLite), which jobnik reads and, on PostgreSQL,
  inserts into directly, in the write session's own batched transaction;
- SQLite's recorder's `_insert_events(cursor, stored_events)`, which appends within a transaction
  the caller holds;
- the stored JSON form of an event's state (`{"job_id": {"_type_": "uuid_hex", "_data_": "<hex>"}}`
  for a UUID), which a parallel rebuild reads on the server to route creation events to their
  job, and which `Decoder` turns into domain events as the library's mapper does.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from datetime import datetime
from json import JSONDecoder
from json.scanner import make_scanner
from typing import Any, Final, cast
from uuid import UUID

from eventsourcing.application import Application
from eventsourcing.persistence import (
    DatetimeAsISO,
    DecimalAsStr,
    JSONTranscoder,
    Mapper,
    Notification,
    StoredEvent,
    TranscodingNotRegisteredError,
    UUIDAsHex,
    find_id_convertor,
)
from eventsourcing.sqlite import SQLiteApplicationRecorder, SQLiteCursor
from eventsourcing.utils import resolve_topic

from jobnik.projections.store.batch import BatchCursor, Later, Sql
from jobnik.projections.store.cursor import Cursor

COLUMNS: Final = "e.originator_id, e.originator_version, e.topic, e.state"


class EventLog(Application[UUID]):
    """The library application: mapper (transcoding), recorder and repository of jobnik's events."""

    name = "jobnik"


# The transcodings of the library's application (`Application.register_transcodings`).
LIBRARY_TRANSCODINGS: Final = {
    "uuid_hex": UUIDAsHex,
    "decimal_str": DecimalAsStr,
    "datetime_iso": DatetimeAsISO,
}


KEPT_UUIDS: Final = 10_000  # UUIDs a decoder keeps to hand out again


class Decoder:
    """Stored events to domain events, equal to what the library's mapper makes of them
    (`Mapper.to_domain_event`), for less Python per event.

    The JSON decoder's hook turns the stored form of a UUID or a datetime into the object
    itself and hands any other `{"_type_": ..., "_data_": ...}` to the library's transcoder, and
    an event class (its upcasts, its id's type) is looked up once per topic. A UUID is made once
    for the events that name it (a stage's id in each of its tasks' events; UUIDs are
    immutable), which also makes a fold's lookups by that id find the very object. A state the
    decoder does not read whole, and a mapper with a cipher, a compressor or transcodings other
    than the library's own, go through the library's mapper (so do its errors).

    Where the library would fail on one value, the decoder keeps it as the object it is: a
    `{"_type_": ..., "_data_": ...}` naming a type nobody registered, or data that is not that
    type's text. Only user data can hold such an object (the API refuses it since), and one such
    event must not stop a catch-up projection for good, nor a job's history."""

    def __init__(self, mapper: Mapper[UUID]) -> None:
        self.mapper = mapper
        t = mapper.transcoder
        self.own = (
            mapper.cipher is None
            and mapper.compressor is None
            and type(t) is JSONTranscoder
            and {n: type(c) for n, c in t.names.items()} == LIBRARY_TRANSCODINGS
        )
        self._decode_other: Callable[[dict[str, Any]], Any] = (
            t._decode_obj if isinstance(t, JSONTranscoder) else lambda d: d
        )
        # (the scanner behind `JSONDecoder.decode`, called without its Python wrappers)
        self._scan: Callable[[str, int], tuple[Any, int]] = make_scanner(
            cast(Any, JSONDecoder(object_hook=self._hook))
        )
        self._classes: dict[tuple[str, type], tuple[type, int, Callable[[Any], Any]]] = {}
        self._uuids: dict[str, UUID] = {}  # by their stored text, the latest ones

    def _hook(self, d: dict[str, Any]) -> Any:
        if len(d) != 2:
            return d
        kind, data = d.get("_type_"), d.get("_data_")
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
            return self._decode_other(d)
        # (the library's transcodings check their data with `assert`)
        except (TranscodingNotRegisteredError, TypeError, ValueError, AssertionError):
            return d  # user data shaped like an encoding it is not (the class docstring)

    def __call__(self, stored: StoredEvent) -> Any:
        if not self.own:
            return self.mapper.to_domain_event(stored)
        try:
            text = stored.state.decode("utf8")
            state, end = self._scan(text, 0)
        except Exception:  # noqa: BLE001 - the library's mapper raises its own error for it
            return self.mapper.to_domain_event(stored)
        if end != len(text) or type(state) is not dict:
            return self.mapper.to_domain_event(stored)
        oid = stored.originator_id
        key = (stored.topic, type(oid))
        found = self._classes.get(key)
        if found is None:
            cls = resolve_topic(stored.topic)
            found = self._classes[key] = (
                cls,
                getattr(cls, "class_version", 1),
                find_id_convertor(cls, cast(Hashable, type(oid))),
            )
        cls, version, convert = found
        state["originator_id"] = convert(oid)
        state["originator_version"] = stored.originator_version
        at = state.pop("class_version", 1)
        while at < version:
            getattr(cls, f"upcast_v{at}_v{at + 1}")(state)
            at += 1
        event: Any = object.__new__(cls)
        object.__setattr__(event, "__dict__", state)
        return event


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
