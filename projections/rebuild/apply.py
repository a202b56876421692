"""How a rebuild applies a page of events to each projection's shadow tables.

The inline read models' shadows, which only the rebuild writes, take a page at a time folded in
memory (fold.py); the catch-up projections' shadows take the pages through their `replay` (as
their runner applies a batch, or keeping totals over the pass); live tables take them as their
live paths write them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from jobnik.projections.catchup.projection import (
    Batch,
    CatchUpProjection,
    Sql,
    batch_by_batch,
    pipelined,
)
from jobnik.projections.catchup.registry import InlineProjection, Projection
from jobnik.projections.inline.ops import Op
from jobnik.projections.inline.project import project_rows
from jobnik.projections.rebuild.fold import Fold
from jobnik.projections.store.base import SqlStore
from jobnik.projections.store.cursor import Cursor
from jobnik.projections.store.executor import OpExecutor, batches
from jobnik.projections.store.names import identity

FOLD = True  # rebuilds fold pages (fold.py); tests switch it off to compare with the slow path


def fold_ops(batch: Batch) -> tuple[list[list[Op]], list[tuple[Any, int]]]:
    """Each event's row operations (`inline.project.project_rows`), in log order, and the
    (aggregate, position) of each event, which the fold files in the history index for the
    page as a whole (fold.py)."""
    return [project_rows(e, p) for p, e in batch], [(e.originator_id, p) for p, e in batch]


class Applier(Protocol):
    """Applies a batch of events to a projection's tables; `prepared`: what the projection's
    `preparer` made of the batch beforehand, if it has one (else it is worked out here)."""

    def __call__(self, cur: Cursor, batch: Batch, prepared: Any = None, /) -> None: ...


Prepare = Callable[[Batch], Any]  # pure (no database): a rebuild runs it on its read-ahead thread


def _inline_applier(store: SqlStore, rename: Callable[[str], str]) -> Applier:
    """Into the live tables event by event (`OpExecutor`, as commands write them); into
    shadow tables, which only the rebuild writes, a page at a time folded (fold.py)."""
    executor = OpExecutor(store.dialect, None if rename is identity else rename)
    if _inline_preparer(rename) is not None:
        folder = Fold(executor, store.bulk(rename))

        def fold(cur: Cursor, batch: Batch, prepared: Any = None) -> None:
            ops, index = prepared if prepared is not None else fold_ops(batch)
            folder.apply(cur, ops, index)
            if not batch:  # the pass's end: the gates it skipped, worked out once
                cur.later(executor.regate_all)

        return fold

    def apply(cur: Cursor, batch: Batch, prepared: Any = None) -> None:
        with pipelined(cur):
            executor.run(cur, batches([e for _, e in batch], [p for p, _ in batch]))

    return apply


def _inline_preparer(rename: Callable[[str], str]) -> Prepare | None:
    """The folded path's pure part: a batch's row operations and its history index
    (`fold_ops`)."""
    return fold_ops if rename is not identity and FOLD else None


def applier(
    store: SqlStore, projection: Projection, rename: Callable[[str], str], after: int = 0
) -> Applier:
    """A function applying a batch of events to `projection`'s tables as `rename` names them;
    a catch-up projection's only those after position `after` (its seed's: seeds.py)."""
    if isinstance(projection, InlineProjection):
        return _inline_applier(store, rename)
    prepare = _catch_up_preparer(projection, after)
    sql = Sql(store.dialect, rename)
    replay = batch_by_batch(projection, sql) if rename is identity else projection.replay(sql)

    def apply(cur: Cursor, batch: Batch, prepared: Any = None) -> None:
        mine, made = prepared if prepared is not None else prepare(batch)
        if mine or not batch:  # (an empty batch ends the pass: the replay writes what it kept)
            with pipelined(cur):  # a projection's reads wait for its own writes
                replay(cur, mine, made)

    return apply


def _catch_up_preparer(projection: CatchUpProjection, after: int = 0) -> Prepare:
    """A catch-up projection's pure part: its events of the batch (those after `after`), and its
    `prepare` of them."""
    events = frozenset(projection.events)

    def prepare(batch: Batch) -> tuple[Batch, Any]:
        mine = [(p, e) for p, e in batch if type(e) in events and p > after]
        return mine, projection.prepare(mine) if mine else None

    return prepare


def preparer(
    projection: Projection, rename: Callable[[str], str], after: int = 0
) -> Prepare | None:
    """The pure part of `applier(..., projection, rename, after)`, if it has one (see
    `Applier`)."""
    if isinstance(projection, InlineProjection):
        return _inline_preparer(rename)
    return _catch_up_preparer(projection, after)
