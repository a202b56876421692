"""Blue/green rebuilds and verification of projections, from the event log alone.

`rebuild` builds every chosen projection into shadow tables (`<table>__next`, shadow.py) while
the API keeps serving and writing the live ones, in one streamed pass over the log (a page of
events per transaction; nothing holds the whole log). When the shadows are within a page of the
log's head it opens a write transaction, which blocks writers for the instant of the swap, applies
the last events, drops the live tables, renames the shadows into their place and records the
projection's version and position in `jobnik_projections`, all in that one transaction.

The pass keeps three kinds of thread busy: a read-ahead thread reads, decodes and prepares the
next page (readahead.py), the caller's thread folds the current one in memory, and on PostgreSQL
a writer thread per projection writes the page before on a connection of its own (writer.py).

`verify` builds the same shadows, brings shadows and live tables to one log position and reports
every row that differs (then drops the shadows). On PostgreSQL the comparison reads a
REPEATABLE READ snapshot taken while writers were held back, so writers wait only for the final
catch-up; on SQLite it runs inside the write transaction (writers wait for the comparison).

One rebuild or verify runs at a time per database (a lock beside the leader locks); a second one
gets `RebuildBusy`. A crash leaves only shadow tables, dropped when the next rebuild starts.
"""

from __future__ import annotations

import gc
import itertools
import logging
import re
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, ExitStack, contextmanager, nullcontext
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final
from uuid import UUID

from eventsourcing.persistence import Notification

from jobnik.projections import parallel, tracking
from jobnik.projections.catchup import Batch, CatchUpProjection, catch_up
from jobnik.projections.leader import LeaderLock
from jobnik.projections.readahead import read_ahead
from jobnik.projections.registry import (
    Applier,
    Prepare,
    Projection,
    applier,
    by_name,
    outdated,
    preparer,
)
from jobnik.projections.shadow import (
    Difference,
    Renamer,
    compare,
    drop_shadows,
    identity,
    swap,
)
from jobnik.projections.store import Cursor, SqlStore
from jobnik.projections.writer import Writer

log = logging.getLogger(__name__)

PAGE: Final = 5000  # events per read and per shadow transaction (2,000: 10-15 % slower)
_INDEX: Final = re.compile(r"\s*CREATE (?:UNIQUE )?INDEX (?:IF NOT EXISTS )?(\w+)")
Progress = Callable[[int, int], None]  # (events applied so far, events to apply in all)


class RebuildBusy(RuntimeError):
    """Another rebuild or verify holds this database's rebuild lock."""


def read_log(
    store: SqlStore,
    after: int = 0,
    page: int = PAGE,
    *,
    stop: int | None = None,
    topics: Sequence[str] = (),
) -> Iterator[tuple[int, Any]]:
    """Every event after position `after` (up to `stop`), in log order, decoded; streamed."""
    for notes in _pages(store, after, page, stop, topics):
        for n in notes:
            yield n.id, store.mapper.to_domain_event(n)


def _pages(
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
            notes = _select(cur, store, after, page, stop, topics)
        elif route is not None:
            with store.cursor(write=False) as read:
                notes = _select(read, store, after, page, stop, topics, route)
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


def _select(
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


def _head(cur: Cursor, store: SqlStore) -> int:
    position = "notification_id" if store.backend == "postgres" else "rowid"
    row = cur.one(f"SELECT MAX({position}) AS head FROM {store.events_table}")
    return int(row["head"] or 0) if row else 0


@contextmanager
def rebuild_lock(store: SqlStore, *, wait: float = 0.0) -> Iterator[None]:
    """Hold this database's rebuild lock; `wait` seconds for it, else RebuildBusy."""
    lock = LeaderLock(store, "rebuild")
    deadline = time.monotonic() + wait
    while not lock.acquire():
        if time.monotonic() >= deadline:
            raise RebuildBusy("another rebuild or verify is running on this database")
        time.sleep(0.2)
    try:
        yield
    finally:
        lock.release()


@contextmanager
def fewer_collections() -> Iterator[None]:
    """Run the cyclic garbage collector rarely while replaying.

    A replay allocates millions of short-lived objects (decoded events, op lists, row dicts)
    that reference counting frees; none of them form cycles. With the default thresholds the
    collector still ran every 700 allocations, and every few pages a full collection walked every
    object of the process: measured, about a third of a rebuild's time. Objects alive before the
    replay are frozen out of the collector's walks and the young generation's threshold goes up;
    both are restored afterwards (process-wide settings: other threads collect less meanwhile).
    """
    before = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(max(before[0], 100_000), before[1], before[2])
    try:
        yield
    finally:
        gc.set_threshold(*before)
        gc.unfreeze()


@dataclass
class _Shadow:
    projection: Projection
    rename: Renamer
    apply: Applier
    prepare: Prepare | None


def _shadows(store: SqlStore, projections: Sequence[Projection]) -> list[_Shadow]:
    """A shadow of each projection, with its applier (and its state) for a pass."""
    out = []
    for p in projections:
        rename = Renamer(p.tables)
        out.append(_Shadow(p, rename, applier(store, p, rename), preparer(p, rename)))
    return out


Page = tuple[Batch, list[Any]]  # decoded events, and what each shadow's `prepare` made of them


class _Pass:
    """Shadows of some projections, fed from one pass over the log.

    The bulk of the log is replayed into shadows without the projections' `late_indexes`, which
    no replay statement reads through; for shadows that are to replace the live tables (`keep`),
    `settle` then builds each of them in one go, before the rest of the log and the swap.
    (Measured on a 300,000-event log, two parts: building them takes 0.1 s; deferring them
    made the rebuild about 5 % faster. UNLOGGED shadows, set LOGGED before the swap, saved the
    server 3-4 µs of CPU per event during the replay, then took 0.7-0.9 s to rewrite into the
    WAL: slower in all.)"""

    def __init__(
        self,
        store: SqlStore,
        shadows: Sequence[_Shadow],
        progress: Progress | None,
        *,
        keep: bool = False,
    ):
        self.store = store
        self.keep = keep
        self.late: list[str] = []  # the late indexes' statements, until `settle` runs them
        self.shadows = list(shadows)
        everything = any(not s.projection.topics for s in self.shadows)
        self.topics: tuple[str, ...] = (
            ()
            if everything
            else tuple(sorted({t for s in self.shadows for t in s.projection.topics}))
        )
        self.progress = progress
        self.position = 0
        self.applied = 0

    def create(self) -> None:
        """Empty shadows without their late indexes, which are kept for `settle`."""
        self.late = []
        with self.store.cursor(write=True, lock=False) as cur:
            for s in self.shadows:
                drop_shadows(cur, s.projection.tables)
                for statement in s.projection.create(self.store.backend):
                    index = _INDEX.match(statement)
                    if index and index.group(1) in s.projection.late_indexes:
                        self.late.append(s.rename(statement))
                        continue
                    cur.execute(s.rename(statement))

    def settle(self) -> None:
        """Shadows fit to be swapped in: every index built. (A verify's shadows are compared
        and dropped: they need none of them.)"""
        if not self.keep or not self.late:
            return
        with self.store.cursor(write=True, lock=False) as cur:
            for statement in self.late:
                cur.execute(statement)
        self.late = []

    def drop(self) -> None:
        with self.store.cursor(write=True, lock=False) as cur:
            for s in self.shadows:
                drop_shadows(cur, s.projection.tables)

    def head(self) -> int:
        return int(self.store.recorder.max_notification_id() or 0)

    def build(self, near: int | None = None, processes: int = 1) -> None:
        """Feed the shadows until they are within `near` (a page) of the head (no lock held),
        or until a round no longer shrinks the distance (writers outpace the replay: the rest
        is then applied under the write lock, a longer pause but a finite one). The first
        round runs in `processes` processes where that pays (parallel.py); the shadows settle
        after it."""
        self._parallel(processes)
        self._rounds(near, most=1)  # (none if the parts replayed the log)
        self.settle()
        self._rounds(near)

    def _rounds(self, near: int | None, most: int | None = None) -> None:
        lag = None
        with self._writers() as writers:
            for _ in itertools.count() if most is None else range(most):
                head = self.head()
                if head - self.position <= (near or PAGE) or (
                    lag is not None and head - self.position >= lag
                ):
                    return
                lag = head - self.position
                pages = _pages(self.store, self.position, PAGE, head, self.topics)
                self._feed(pages, head, writers)

    def _feed(
        self, pages: Iterable[Sequence[Notification]], head: int, writers: list[Writer] | None
    ) -> None:
        for page in read_ahead(self._decoded(pages)):
            with self._page(writers) as cursors:
                self._apply(page, head, cursors)
        with self._page(writers) as cursors:
            self._drain(cursors)

    @contextmanager
    def _page(self, writers: list[Writer] | None) -> Iterator[list[AbstractContextManager[Cursor]]]:
        """The cursors a page goes through: a writer's page each (PostgreSQL), else one
        transaction shared by every shadow."""
        if writers is None:
            with self.store.cursor(write=True, lock=False) as cur:
                yield self._sharing(cur)
        else:
            yield [w.page() for w in writers]

    def replay(self, pages: Iterable[Sequence[Notification]], head: int) -> None:
        """Feed `pages` (up to `head`) through writers of their own: one round."""
        with self._writers() as writers:
            self._feed(pages, head, writers)

    def _parallel(self, processes: int) -> None:
        """Replay the log up to its head with the per-job shadows fed by `processes` processes,
        the others by this one meanwhile, when the log is long enough to pay for starting them
        (PostgreSQL only: SQLite has one writer)."""
        head = self.head()
        per_job = [s for s in self.shadows if s.projection.per_job]
        if (
            processes < 2
            or self.store.pg is None
            or not per_job
            or head - self.position < parallel.MIN_EVENTS
        ):
            return
        rest = _Pass(self.store, [s for s in self.shadows if s not in per_job], None)
        start, total = self.applied, self.applied + head - self.position

        def meanwhile() -> None:
            if rest.shadows:
                rest.replay(_pages(self.store, self.position, PAGE, head, rest.topics), head)

        def progress(applied: int) -> None:
            if self.progress is not None:
                self.progress(start + applied, max(total, start + applied))

        applied = parallel.run_parts(
            self.store,
            _feed_part,
            [s.projection.name for s in per_job],
            processes,
            self.position,
            head,
            meanwhile,
            progress,
        )
        if applied is None:  # not routed: the one-process rounds do it all
            return
        self.applied += applied
        self.position = head

    @contextmanager
    def _writers(self) -> Iterator[list[Writer] | None]:
        """On PostgreSQL a writer per shadow (writer.py): a page is written while the next one
        is folded. SQLite has one writer connection: pages are applied in turn."""
        if self.store.pg is None:
            yield None
            return
        with ExitStack() as stack:
            yield [stack.enter_context(Writer(self.store)) for _ in self.shadows]

    def finish(self, cur: Cursor) -> int:
        """Feed the shadows the rest of the log, in the caller's transaction; returns the head.

        The caller holds the write lock, so the head cannot move meanwhile."""
        head = _head(cur, self.store)
        pages = _pages(self.store, self.position, PAGE, head, self.topics, cur)
        for page in self._decoded(pages):
            self._apply(page, head, self._sharing(cur))
        self._drain(self._sharing(cur))
        self.position = head
        return head

    def _decoded(self, pages: Iterable[Sequence[Notification]]) -> Iterator[Page]:
        """Each page decoded, and prepared for each shadow (pure work: on the read-ahead thread
        it runs while the applier works on the page before)."""
        decode = self.store.mapper.to_domain_event
        for notes in pages:
            batch = [(n.id, decode(n)) for n in notes]
            yield batch, [s.prepare(batch) if s.prepare else None for s in self.shadows]

    def _sharing(self, cur: Cursor) -> list[AbstractContextManager[Cursor]]:
        """Every shadow's cursor is `cur` (one transaction for the page)."""
        return [nullcontext(cur)] * len(self.shadows)

    def _apply(
        self, page: Page, head: int, cursors: Sequence[AbstractContextManager[Cursor]]
    ) -> None:
        """Apply a decoded page to each shadow through its cursor (a writer's page, or one
        shared transaction), then move the pass's position."""
        batch, prepared = page
        for s, cursor, ready in zip(self.shadows, cursors, prepared, strict=True):
            with cursor as cur:
                s.apply(cur, batch, ready)
        self.applied += len(batch)
        self.position = batch[-1][0] if len(batch) == PAGE else head
        if self.progress is not None:
            self.progress(self.applied, self.applied + self._left(head))

    def _drain(self, cursors: Sequence[AbstractContextManager[Cursor]]) -> None:
        """An empty page for each shadow: it writes the rows its applier carried over from
        the last page for the page after it (fold.py), before anything reads the shadows."""
        for s, cursor in zip(self.shadows, cursors, strict=True):
            with cursor as cur:
                s.apply(cur, [], None)

    def _left(self, head: int) -> int:
        return max(0, head - self.position) if not self.topics else 0


def _feed_part(
    store: SqlStore,
    names: Sequence[str],
    route: parallel.Route,
    after: int,
    head: int,
    applied: Callable[[int], None],
) -> None:
    """What a part's process runs (parallel.run_parts): its jobs' events into the shadows."""
    with fewer_collections():
        work = _Pass(store, _shadows(store, by_name(names)), lambda n, _: applied(n))
        work.replay(_pages(store, after, PAGE, head, (), route=route), head)


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
    `processes`: how many replay the log on PostgreSQL (default `parallel.processes()`).
    """
    projections = by_name(names)
    with rebuild_lock(store, wait=wait), fewer_collections():
        if only_outdated:
            projections = outdated(store, projections)
            if not projections:
                return 0
        work = _Pass(store, _shadows(store, projections), progress, keep=True)
        work.create()
        try:
            work.build(processes=processes or parallel.processes())
            with store.cursor(write=True, swap=True) as cur:  # writers wait until the commit
                _lock_entries(cur, projections)
                head = work.finish(cur)
                now = datetime.now(UTC)
                for s in work.shadows:
                    swap(cur, s.projection.tables)
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


# -- verify ---------------------------------------------------------------------------------------


def verify(
    store: SqlStore,
    progress: Progress | None = None,
    *,
    names: Sequence[str] | None = None,
    wait: float = 0.0,
    processes: int | None = None,
) -> list[Difference]:
    """Replay projections `names` (all when None) into shadows and list every row that differs
    from the live tables at the same log position. The live tables are not changed, except that
    catch-up projections are first brought up to the head (as their runner would)."""
    projections = by_name(names)
    with rebuild_lock(store, wait=wait), fewer_collections():
        work = _Pass(store, _shadows(store, projections), progress)
        work.create()
        try:
            work.build(processes=processes or parallel.processes())
            with _frozen(store, work, projections) as cur:
                return [
                    d
                    for s in work.shadows
                    for table in s.projection.tables
                    for d in compare(cur, table, s.projection.keys[table])
                ]
        finally:
            work.drop()


@contextmanager
def _frozen(store: SqlStore, work: _Pass, projections: Sequence[Projection]) -> Iterator[Cursor]:
    """A cursor in which every live table and every shadow reflect the same log position."""
    catch_ups = [p for p in projections if isinstance(p, CatchUpProjection)]
    if store.pg is None:
        with store.cursor(write=True) as cur:  # SQLite: one writer, so this holds everyone
            head = work.finish(cur)
            for p in catch_ups:
                _catch_up_in(store, cur, p, head)
            yield cur
        return
    with store.cursor(write=False) as snapshot:
        snapshot.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        with store.pg.get_connection() as held, held.transaction(force_rollback=True):
            held.execute(f"LOCK TABLE {store.events_table} IN EXCLUSIVE MODE")  # writers wait
            with store.cursor(write=True, lock=False) as cur:
                head = work.finish(cur)
            for p in catch_ups:
                _catch_up_live(store, p, head)
            snapshot.execute("SELECT 1")  # the snapshot: taken while no writer can commit
        yield snapshot


def _catch_up_live(store: SqlStore, p: CatchUpProjection, head: int) -> None:
    """Bring a live catch-up projection to `head` (the runner may be doing it too)."""
    while tracking.position_of(store, p.name) < head:
        if not catch_up(store, p, PAGE):
            time.sleep(0.01)  # the runner holds the row: its batch moves the position


def _catch_up_in(store: SqlStore, cur: Cursor, p: CatchUpProjection, head: int) -> None:
    """Bring a live catch-up projection to `head` inside `cur`'s (write) transaction."""
    entry = tracking.get(cur, p.name)
    if entry is None or entry.position >= head:
        return
    live = applier(store, p, identity)
    for notes in _pages(store, entry.position, PAGE, head, p.topics, cur):
        live(cur, [(n.id, store.mapper.to_domain_event(n)) for n in notes])
    tracking.advance(cur, p.name, head)
