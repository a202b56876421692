"""Blue/green rebuilds of projections, from the event log alone.

`rebuild` builds every chosen projection into shadow tables (`<table>__next`, shadow.py) while
the API keeps serving and writing the live ones, in one streamed pass over the log (a page of
events per transaction; nothing holds the whole log). When the shadows are within a page of the
log's head it opens a write transaction, which blocks writers for the instant of the swap, applies
the last events, drops the live tables, renames the shadows into their place and records the
projection's version and position in `jobnik_projections`, all in that one transaction.

One rebuild or verify runs at a time per database (a lock beside the leader locks); a second one
gets `RebuildBusy`. A crash leaves only shadow tables, dropped when the next rebuild starts.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime

from jobnik.projections.catchup import tracking
from jobnik.projections.catchup.registry import Projection, by_name, outdated
from jobnik.projections.rebuild import parallel
from jobnik.projections.rebuild.passes import Pass, Progress, fewer_collections, shadows_of
from jobnik.projections.rebuild.shadow import swap
from jobnik.projections.store.base import SqlStore
from jobnik.projections.store.cursor import Cursor

log = logging.getLogger(__name__)


class RebuildBusy(RuntimeError):
    """Another rebuild or verify holds this database's rebuild lock."""


@contextmanager
def rebuild_lock(store: SqlStore, *, wait: float = 0.0) -> Iterator[None]:
    """Hold this database's rebuild lock; `wait` seconds for it, else RebuildBusy."""
    lock = store.leader_lock("rebuild")
    deadline = time.monotonic() + wait
    while not lock.acquire():
        if time.monotonic() >= deadline:
            raise RebuildBusy("another rebuild or verify is running on this database")
        time.sleep(0.2)
    try:
        yield
    finally:
        lock.release()


def rebuild(
    store: SqlStore,
    progress: Progress | None = None,
    *,
    names: Sequence[str] | None = None,
    wait: float = 0.0,
    only_outdated: bool = False,
    processes: int | None = None,
) -> int:
    """Rebuild projections `names` (all when None) blue/green; returns the events replayed.

    `only_outdated`: only those whose rows an older version built, judged once the rebuild lock
    is held (so processes starting together rebuild once). `wait`: seconds to wait for the lock.
    `processes`: how many replay the log, where the store replays in parallel (default: one per
    CPU, see `parallel.processes`).
    """
    projections = by_name(names)
    with rebuild_lock(store, wait=wait), fewer_collections():
        if only_outdated:
            projections = outdated(store, projections)
            if not projections:
                return 0
        work = Pass(store, shadows_of(store, projections), progress, keep=True)
        work.create()
        try:
            work.build(processes=parallel.processes(processes))
            with store.cursor(write=True, swap=True) as cur:  # writers wait until the commit
                _lock_entries(cur, projections)
                head = work.finish(cur)
                now = datetime.now(UTC)
                for s in work.shadows:
                    swap(store, cur, s.projection.tables)
                    tracking.record_rebuild(cur, s.projection.name, s.projection.version, head, now)
        except BaseException:
            work.drop()
            raise
    log.info(
        "projections rebuilt",
        extra={
            "action": "projections_rebuilt",
            "projections": [p.name for p in projections],
            "events": work.applied,
            "position": head,
        },
    )
    return work.applied


def _lock_entries(cur: Cursor, projections: Sequence[Projection]) -> None:
    """Wait for catch-up batches in flight (they hold their registry rows until they commit);
    rows locked in name order, as a catch-up round locks them."""
    tracking.locked(cur, [p.name for p in projections])


def rebuild_outdated(store: SqlStore, name: str, processes: int | None = None) -> None:
    """Rebuild projection `name` if an older version of its code built its rows, unless another
    process is rebuilding (its swap will show up in the registry)."""
    log.info(
        "rebuilding stale projection", extra={"action": "projection_rebuild", "projection": name}
    )
    try:
        rebuild(store, names=[name], only_outdated=True, processes=processes)
    except RebuildBusy:
        log.info("rebuild busy elsewhere", extra={"action": "projection_rebuild_busy"})
