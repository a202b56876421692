"""Reading the event log for a rebuild: pages of notifications after a position, streamed."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Final

from eventsourcing.persistence import Notification

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
            yield n.id, store.decode(n)


def read_pages(
    store: SqlStore,
    after: int,
    page: int,
    stop: int | None,
    topics: Sequence[str],
    cur: Cursor | None = None,
    part: tuple[int, int] | None = None,
) -> Iterator[Sequence[Notification]]:
    """Pages of notifications after `after`: through the library's recorder, or, inside a write
    transaction, through that transaction's cursor `cur` (a second connection, asked for while
    holding the writer's, could wait for a writer that waits for us). `part`: only
    the events of one part of the jobs (parallel.py)."""
    while True:
        notes: Sequence[Notification]
        if cur is not None:
            notes = store.events_after(cur, after, page, stop, topics)
        elif part is not None:
            with store.cursor(write=False) as read:
                notes = store.events_after(read, after, page, stop, topics, part)
        else:
            notes = store.notifications(after, page, stop=stop, topics=topics)
        if not notes:
            return
        yield notes
        if len(notes) < page:
            return
        after = notes[-1].id
