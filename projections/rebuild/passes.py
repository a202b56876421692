"""A pass over the log that feeds shadow tables: paged, read ahead, folded, written in bulk.

The pass keeps three kinds of thread busy: a read-ahead thread reads, decodes and prepares the
next page (readahead.py), the caller's thread folds the current one in memory, and, where the
store has page writers, a thread per projection writes the page before on a connection of its
own (store/pagewriter.py).
"""

from __future__ import annotations

import gc
import itertools
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any, Final
from uuid import UUID

from eventsourcing.persistence import Notification

from jobnik.projections.catchup.projection import Batch, CatchUpProjection
from jobnik.projections.catchup.registry import Projection, by_name
from jobnik.projections.rebuild import parallel, seeds
from jobnik.projections.rebuild.apply import Applier, Prepare, applier, preparer
from jobnik.projections.rebuild.log import PAGE, read_pages
from jobnik.projections.rebuild.readahead import read_ahead
from jobnik.projections.rebuild.shadow import Renamer, drop_shadows
from jobnik.projections.store.base import SqlStore
from jobnik.projections.store.cursor import Cursor
from jobnik.projections.store.pagewriter import Writer

_INDEX: Final = re.compile(r"\s*CREATE (?:UNIQUE )?INDEX (?:IF NOT EXISTS )?(\w+)")
Progress = Callable[[int, int], None]  # (events applied so far, events to apply in all)


@contextmanager
def fewer_collections() -> Iterator[None]:
    """Run the cyclic garbage collector rarely while replaying.

    A replay allocates millions of short-lived objects (decoded events, op lists, row dicts)
    that reference counting frees; none of them form cycles. With the default thresholds the
    collector runs every 700 allocations, and every few pages a full collection walks every
    object of the process, a large share of a rebuild's time. Objects alive before the
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
    seeded: int = 0  # the position of the seed it starts from (0: none, an empty start)


def shadows_of(store: SqlStore, projections: Sequence[Projection]) -> list[_Shadow]:
    """A shadow of each projection, with its applier (and its state) for a pass; a seeded
    catch-up projection's takes the events after its seed (seeds.py)."""
    with store.cursor(write=False) as cur:
        seeded = seeds.positions(cur)
    out = []
    for p in projections:
        rename = Renamer(p.tables)
        after = seeded.get(p.name, 0) if isinstance(p, CatchUpProjection) else 0
        out.append(
            _Shadow(p, rename, applier(store, p, rename, after), preparer(p, rename, after), after)
        )
    return out


Page = tuple[Batch, list[Any]]  # decoded events, and what each shadow's `prepare` made of them


class Pass:
    """Shadows of some projections, fed from one pass over the log.

    The bulk of the log is replayed into shadows without the projections' `late_indexes`, which
    no replay statement reads through; for shadows that are to replace the live tables (`keep`),
    `settle` then builds each of them in one go, before the rest of the log and the swap (one
    build costs less than keeping the index up to date row by row)."""

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
        """Shadows without their late indexes, which are kept for `settle`: empty, or a
        seeded catch-up projection's with its seed's rows (seeds.py)."""
        self.late = []
        replayed: dict[int, set[UUID]] = {}  # by seed position
        with self.store.cursor(write=True, lock=False) as cur:
            for s in self.shadows:
                drop_shadows(cur, s.projection.tables)
                for statement in s.projection.create(self.store.dialect):
                    index = _INDEX.match(statement)
                    if index and index.group(1) in s.projection.late_indexes:
                        self.late.append(s.rename(statement))
                        continue
                    cur.execute(s.rename(statement))
                if s.seeded and isinstance(s.projection, CatchUpProjection):
                    if s.seeded not in replayed:
                        replayed[s.seeded] = seeds.archived_after(self.store, s.seeded)
                    seeds.plant(cur, s.projection, s.rename, replayed[s.seeded])

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
        return self.store.head()

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
                pages = read_pages(self.store, self.position, PAGE, head, self.topics)
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
        """The cursors a page goes through: a writer's page each, or (no writers) one
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
        and the store replays in parallel (`SqlStore.replays_in_parallel`)."""
        head = self.head()
        per_job = [s for s in self.shadows if s.projection.per_job]
        if (
            processes < 2
            or not self.store.replays_in_parallel
            or not per_job
            or head - self.position < parallel.MIN_EVENTS
        ):
            return
        rest = Pass(self.store, [s for s in self.shadows if s not in per_job], None)
        start, total = self.applied, self.applied + head - self.position

        def meanwhile() -> None:
            if rest.shadows:
                rest.replay(read_pages(self.store, self.position, PAGE, head, rest.topics), head)

        def progress(applied: int) -> None:
            if self.progress is not None:
                self.progress(start + applied, max(total, start + applied))

        applied = parallel.run_parts(
            self.store,
            feed_part,
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

    def _writers(self) -> AbstractContextManager[list[Writer] | None]:
        """A page writer per shadow where the backend writes side by side (a page is written
        while the next one is folded), else None: pages are applied in turn."""
        return self.store.page_writers(len(self.shadows))

    def finish(self, cur: Cursor) -> int:
        """Feed the shadows the rest of the log, in the caller's transaction; returns the head.

        The caller holds the write lock, so the head cannot move meanwhile."""
        head = self.store.log_head(cur)
        pages = read_pages(self.store, self.position, PAGE, head, self.topics, cur)
        for page in self._decoded(pages):
            self._apply(page, head, self._sharing(cur))
        self._drain(self._sharing(cur))
        self.position = head
        return head

    def _decoded(self, pages: Iterable[Sequence[Notification]]) -> Iterator[Page]:
        """Each page decoded, and prepared for each shadow (pure work: on the read-ahead thread
        it runs while the applier works on the page before)."""
        decode = self.store.decode
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


def feed_part(
    store: SqlStore,
    names: Sequence[str],
    route: parallel.Route,
    after: int,
    head: int,
    applied: Callable[[int], None],
) -> None:
    """What a part's process runs (parallel.run_parts): its jobs' events into the shadows."""
    with fewer_collections():
        work = Pass(store, shadows_of(store, by_name(names)), lambda n, _: applied(n))
        work.replay(read_pages(store, after, PAGE, head, (), part=route), head)
