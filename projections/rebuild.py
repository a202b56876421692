"""Rebuild every inline read model from the event log alone."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from eventsourcing.domain import DomainEventProtocol

from jobnik.projections.schema import TABLES
from jobnik.projections.store import SqlStore, batches

PAGE = 2000


def read_log(
    store: SqlStore, after: int = 0, page: int = PAGE
) -> Iterator[tuple[int, DomainEventProtocol[Any]]]:
    """Every event after position `after`, in log order, decoded; streamed page by page."""
    while True:
        notes = store.recorder.select_notifications(after, page, inclusive_of_start=False)
        if not notes:
            return
        for n in notes:
            yield n.id, store.mapper.to_domain_event(n)
        after = notes[-1].id


def rebuild(store: SqlStore, progress: Callable[[int], None] | None = None) -> int:
    """Empty the read models and replay the whole log into them, in one transaction.

    Writers wait meanwhile (the write lock), readers keep seeing the old rows until commit.
    Returns the number of events replayed.
    """
    count = 0
    with store.cursor(write=True) as cur:
        for table in TABLES:
            cur.execute(f"DELETE FROM {table}")
        chunk: list[tuple[int, DomainEventProtocol[Any]]] = []
        for item in read_log(store):
            chunk.append(item)
            if len(chunk) == PAGE:
                count += _apply(store, cur, chunk)
                chunk = []
                if progress:
                    progress(count)
        count += _apply(store, cur, chunk)
        if progress:
            progress(count)
    return count


def _apply(store: SqlStore, cur: Any, chunk: list[tuple[int, DomainEventProtocol[Any]]]) -> int:
    if chunk:
        ids = [i for i, _ in chunk]
        store.executor.run(cur, batches([e for _, e in chunk], ids))
    return len(chunk)
