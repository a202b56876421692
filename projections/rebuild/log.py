"""Reading the event log for a rebuild: pages of notifications after a position, streamed."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Final
from uuid import UUID

from eventsourcing.persistence import Notification

from jobnik.projections.rebuild import parallel
from jobnik.projections.store.base import SqlStore
from jobnik.projections.store.cursor import Cursor

PAGE: Final = 5000  # events per read and per shadow transaction


def read_log(
    store: SqlStore,
    after: int = 0,
    page: int = PAGE,
    *,
    stop: int | None = None,
    topics: Sequence[str] = (),
) -> Iterator[tuple[int, Any]]:
    """Every event after position `after` (up to `stop`), in log order, decoded; streamed."""
    for notes in read_pages(store, after, page, stop, topics):
        for n in notes:
            yield n.id, store.mapper.to_domain_event(n)


def read_pages(
    store: SqlStore,
    after: int,
    page: int,
    stop: int | None,
    topics: Sequence[str],
    cur: Cursor | None = None,
    route: parallel.Route | None = None,
) -> Iterator[Sequence[Notification]]:
    """Pages of notifications after `after`: through the library's recorder, or, inside a write
    transaction, through that transaction's cursor `cur`. (The library's SQLite pool queues
    every request behind a writer waiting for the writer lock, so a second connection asked for
    while holding the writer connection can wait for a writer that waits for us.) `route`: only
    the events of one part of the jobs (parallel.py)."""
    while True:
        notes: Sequence[Notification]
        if cur is not None:
            notes = select(cur, store, after, page, stop, topics)
        elif route is not None:
            with store.cursor(write=False) as read:
                notes = select(read, store, after, page, stop, topics, route)
        else:
            notes = store.recorder.select_notifications(
                after, page, stop=stop, topics=topics, inclusive_of_start=False
            )
        if not notes:
            return
        yield notes
        if len(notes) < page:
            return
        after = notes[-1].id


def select(
    cur: Cursor,
    store: SqlStore,
    after: int,
    limit: int,
    stop: int | None,
    topics: Sequence[str],
    route: parallel.Route | None = None,
) -> list[Notification]:
    p = cur.dialect.param
    position = "e.notification_id" if store.backend == "postgres" else "e.rowid"
    join, params = parallel.route_join("e", route, p)
    params.update(after=after, limit=limit)
    where = [f"{position} > {p('after')}"]
    if stop is not None:
        where.append(f"{position} <= {p('stop')}")
        params["stop"] = stop
    if topics:
        names = {f"t{i}": t for i, t in enumerate(topics)}
        where.append(f"e.topic IN ({', '.join(p(n) for n in names)})")
        params.update(names)
    cur.execute(
        f"SELECT {position} AS id, e.originator_id, e.originator_version, e.topic, e.state "
        f"FROM {store.events_table} e{join} WHERE {' AND '.join(where)} ORDER BY {position} "
        f"LIMIT {p('limit')}",
        params,
    )
    rows = cur.raw.fetchall()  # (the driver's rows as they are: no copy into dicts of our own)
    return [
        Notification(
            id=r["id"],
            originator_id=r["originator_id"]
            if isinstance(r["originator_id"], UUID)
            else UUID(r["originator_id"]),
            originator_version=r["originator_version"],
            topic=r["topic"],
            state=bytes(r["state"]),
        )
        for r in rows
    ]
