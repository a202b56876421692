"""Catch-up projections: derived views that follow the event log behind a tracking position.

Each one (`last_status.py`, `run_stats.py`) is a pure fold of events into row changes plus the SQL
that applies them. `catch_up` applies the next batch of events after the projection's tracking
position and moves the position, both in one transaction: a crash before the commit leaves
neither, so after a restart every event is applied exactly once. `CatchUpRunner` calls it from a
background thread of the API process that holds the leader lock (one process per database runs
the catch-up projections however many serve the API).

Driver: a small runner of ours over the library's notification log, not the library's own
projection runner, which cannot follow every backend's log, opens an application (and a
connection pool) of its own, and commits once per event; a round here applies hundreds of events
per transaction. Taken from the library: the notification log (gapless, commit-ordered ids), its
stored form of events and their upcasting (decoded by its mapper, with a faster transcoder of
ours: eventlog.py), and its discipline: view rows and tracking position in one
transaction. The tracking position lives in `jobnik_projections` (tracking.py) beside the
projection's version.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from functools import cache
from typing import Final

from eventsourcing.persistence import Notification

from jobnik.projections.catchup import tracking
from jobnik.projections.catchup.projection import CatchUpProjection, Sql, pipelined
from jobnik.projections.store.base import SqlStore
from jobnik.projections.store.cursor import Cursor
from jobnik.projections.store.dialect import Dialect
from jobnik.projections.store.leader import LeaderLock

log = logging.getLogger(__name__)

BATCH: Final = 500  # events per catch-up transaction


def catch_up(
    store: SqlStore,
    projection: CatchUpProjection,
    limit: int = BATCH,
    *,
    seen: tuple[tracking.Entry, int] | None = None,
) -> int:
    """Apply the next events after the projection's tracking position, exactly once.

    Returns how far the position moved (0: it was caught up, or another runner got there
    first). `seen`: the registry entry and log head the caller has just read (saves reading
    them again). `catch_up_together` says how.
    """
    if seen is None:
        with store.cursor(write=False) as cur:
            found = tracking.get(cur, projection.name)
        if found is None:
            return 0
        seen = found, store.head()
    entry, head = seen
    return catch_up_together(store, [(projection, entry)], head, limit)


def catch_up_together(
    store: SqlStore,
    due: Sequence[tuple[CatchUpProjection, tracking.Entry]],
    head: int,
    limit: int = BATCH,
) -> int:
    """Apply the next events after each projection's tracking position (its `entry`, just read),
    up to `head`, exactly once; returns how far their positions moved in all.

    Projections at the same position go through one read of the log (their topics together;
    each is given the events of its own topics), decoded before the write transaction and once
    for all, and applied in one transaction that moves each position to the same end. Inside
    it the positions are read again under row locks, and a projection whose position someone
    else moved meanwhile is left out.
    """
    with store.cursor(write=False) as cur:
        pages = read_pages(store, cur, due, head, limit)
    return apply_pages(store, pages, head, limit)


Page = tuple[Sequence[tuple[CatchUpProjection, tracking.Entry]], Sequence[Notification]]


def read_pages(
    store: SqlStore,
    cur: Cursor,
    due: Sequence[tuple[CatchUpProjection, tracking.Entry]],
    head: int,
    limit: int,
) -> list[Page]:
    """`catch_up_together`'s reads, through `cur`: per position the projections at it and the
    next events of their topics (up to `limit`, up to `head`)."""
    at: dict[int, list[tuple[CatchUpProjection, tracking.Entry]]] = {}
    for p, e in due:
        if e.position < head:
            at.setdefault(e.position, []).append((p, e))
    # Projections at the same position (the usual case) share a read; one behind the others
    # (just registered, or after its rebuild) catches up on its own, so that a page that
    # ends short of the others' positions never moves them back.
    return [
        (group, store.events_after(cur, start, limit, head, _topics(group)))
        for start, group in at.items()
    ]


def apply_pages(store: SqlStore, pages: Sequence[Page], head: int, limit: int) -> int:
    """`catch_up_together`'s writes: each page decoded, then applied in a transaction of its
    own; returns how far the positions moved in all."""
    return sum(_apply(store, group, notes, head, limit) for group, notes in pages)


def _topics(due: Sequence[tuple[CatchUpProjection, tracking.Entry]]) -> tuple[str, ...]:
    return tuple(sorted({t for p, _ in due for t in p.topics}))


def _apply(
    store: SqlStore,
    due: Sequence[tuple[CatchUpProjection, tracking.Entry]],
    notes: Sequence[Notification],
    head: int,
    limit: int,
) -> int:
    """One page's events, applied to the projections `due` (all at the page's start)."""
    end = notes[-1].id if len(notes) == limit else head  # the filter may skip the rest to head
    decode = store.decode
    events = [(n.id, n.topic, decode(n)) for n in notes]
    moved = 0
    with store.cursor(write=True, lock=False) as cur:
        now = tracking.locked(cur, [p.name for p, _ in due])
        current = [(p, e) for p, e in due if now.get(p.name) == e.position]
        with pipelined(cur):  # (every projection's writes and the positions')
            for projection, entry in current:
                topics = projection.topic_set
                batch = [(i, e) for i, t, e in events if t in topics]
                if batch:
                    projection.apply(cur, batch, _live_sql(store.dialect))
                moved += end - entry.position
            if current:
                tracking.advance(cur, [p.name for p, _ in current], end)
    return moved


@cache
def _live_sql(dialect: Dialect) -> Sql:
    """The live tables' SQL in `dialect`, its texts converted once for every round."""
    return Sql(dialect)


def wait_for(
    store: SqlStore, name: str, position: int, timeout: float, *, sleep: float = 0.01
) -> int:
    """Wait up to `timeout` seconds until projection `name` has reached `position`.

    Returns the tracking position last seen (the caller compares: it may still be lower). Polls
    the registry, so it works in every API process, not only the one running the projection.
    """
    deadline = time.monotonic() + timeout
    delay = sleep
    while True:
        seen = tracking.position_of(store, name)
        if seen >= position or time.monotonic() >= deadline:
            return seen
        time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
        delay = min(delay * 2, 0.1)


class CatchUpRunner:
    """Keeps catch-up projections up with the log from a background thread, while leader.

    Wakes on every write this process commits (the store's `on_commit`) and otherwise every
    `interval` seconds (writes from other processes), but starts rounds at most every `min_gap`
    seconds, so that under load one round applies the events of many commits; while commits keep
    arriving within that gap, the gap doubles up to `max_gap` (a round's statements are paid
    fewer times, and the lag stays within what other processes' writes have), and it is back to
    `min_gap` once a gap passes without a commit. With `rebuild`
    (`rebuild.bluegreen.rebuild_outdated`), a projection whose rows an older version of its code
    built is rebuilt blue/green first (the old rows keep serving meanwhile); without, it is caught
    up with the new code as it is. Rows built by a newer version (a rolling deploy's newer
    processes) are left alone.
    """

    def __init__(
        self,
        store: SqlStore,
        projections: Sequence[CatchUpProjection],
        lock: LeaderLock,
        *,
        interval: float = 0.2,
        batch: int = BATCH,
        rebuild: Callable[[CatchUpProjection], None] | None = None,
        follower_interval: float = 2.0,
        min_gap: float = 0.05,
        max_gap: float = 0.2,
    ) -> None:
        self.store, self.projections, self.lock = store, list(projections), lock
        self.interval, self.batch, self.rebuild = interval, batch, rebuild
        self.min_gap = min(min_gap, interval)  # shortest time between two rounds' starts
        self.max_gap = max(self.min_gap, min(max_gap, interval))  # ... under steady commits
        self.follower_interval = max(interval, follower_interval)  # how often to try the lock
        self.leading = False
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._run, name="jobnik-catchup", daemon=True)
        self.applied = 0

    def _on_commit(self, _: int) -> None:
        if not self._wake.is_set():  # (set() takes a lock: commits come hundreds per second)
            self._wake.set()

    def start(self) -> None:
        self.store.on_commit.append(self._on_commit)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout=30)
        if self._on_commit in self.store.on_commit:
            self.store.on_commit.remove(self._on_commit)
        self.lock.release()

    def run_once(self) -> int:
        """One round over the projections (if leader); returns how far their positions moved.

        The registry, the log head and the next events are read in one transaction per round (a
        projection to rebuild first: the events after the rebuild), the events applied in another;
        a projection already at the head costs nothing more."""
        self.leading = self.lock.acquire()
        if not self.leading:
            return 0
        with self.store.cursor(write=False) as cur:
            registry = tracking.entries(cur)
            head = self.store.log_head(cur)
            due, outdated = self._due(registry)
            pages = [] if outdated else read_pages(self.store, cur, due, head, self.batch)
        if outdated and self.rebuild is not None:
            for projection in outdated:
                if self._stop.is_set():
                    return 0
                self.rebuild(projection)
            # (the rebuilds took their time: the others' events are read after them)
            moved = catch_up_together(self.store, due, head, self.batch)
        else:
            moved = apply_pages(self.store, pages, head, self.batch)
        self.applied += moved
        return moved

    def _due(
        self, registry: dict[str, tracking.Entry]
    ) -> tuple[list[tuple[CatchUpProjection, tracking.Entry]], list[CatchUpProjection]]:
        """The projections to catch up (with their registry entries), and those to rebuild."""
        due, outdated = [], []
        for projection in self.projections:
            entry = registry.get(projection.name)
            if entry is None or entry.version > projection.version:
                continue  # not registered yet, or built by a newer version (rolling deploy)
            if entry.version < projection.version and self.rebuild is not None:
                outdated.append(projection)
            else:
                due.append((projection, entry))
        return due, outdated

    def _run(self) -> None:
        failures = 0
        gap = self.min_gap
        while not self._stop.is_set():
            self._wake.clear()
            started = time.monotonic()
            try:
                moved = self.run_once()
                failures = 0
            except Exception:  # retried next round; never kills the thread
                log.exception("catch-up failed", extra={"action": "catchup_failed"})
                moved, failures = 0, failures + 1
            if not self.leading:
                self._stop.wait(self.follower_interval)
                continue
            # Commits arrive hundreds per second under load: rounds at most every `gap` seconds
            # let each one carry many events instead of one (a round costs about ten statements
            # whatever it carries).
            self._stop.wait(max(0.0, started + gap - time.monotonic()))
            if moved >= self.batch:  # a backlog: its next page at once
                gap = self.min_gap
            elif self._wake.is_set():  # committed to during the gap: a steady load
                gap = min(gap * 2, self.max_gap)
            else:  # wait for a commit or the interval
                gap = self.min_gap
                self._wake.wait(self.interval * (2 ** min(failures, 5)))
