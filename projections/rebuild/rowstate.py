"""What a rebuild's fold knows of each row (fold.py): its state, values and primary key.

Memory keys a row by its primary key: a one-column key (always a uuid) by the UUID's integer,
which is hashed and compared in C (`memo`); several columns by a tuple of their values.

Between pages memory keeps the stage and job rows it knows whole (`KEPT`, a bounded number), so
Enqueues rarely read them back: where the store has page writers the page's statements run on
a thread (store/pagewriter.py) while the next page folds, and a read there waits for every write
queued before it. What the writes send is taken from memory when they are queued (COPY rows as
tuples, arrays), so later folding cannot change a write still in the queue.

The rows a page inserts into tasks and queue (`CARRIED`) are written with the page after it
instead: a task's next events usually come within a page, and folded into its new row there
(its queue row deleted before it was ever written) the row is written once, not inserted and then
updated or deleted. Nothing reads those tables' rows between the two pages (a barrier writes
them first; a Delete by another column judges them in memory), a row is carried once (memory
stays within two pages), and the pass ends with an empty page, which writes the last carry.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final
from uuid import UUID

from jobnik.projections.inline.tables import JOBS, KEYS, QUEUE, STAGES, TASKS

NEW, LOADED, PATCH, GONE = "new", "loaded", "patch", "gone"
PK: Final[Mapping[str, tuple[str, ...]]] = KEYS

KEPT: Final = (STAGES, JOBS)  # rows kept from page to page (Enqueue reads them), up to
KEEP: Final = 1000  # rows per table
CARRIED: Final = (TASKS, QUEUE)  # tables whose new rows wait for the next page (`Fold._carry`)
PK1: Final = {t: cols[0] for t, cols in PK.items() if len(cols) == 1}
MISSING: Final = object()


class Row:
    """What the page did to one row.

    NEW: `values` is the whole row, to insert (after deleting the stored one when `replaces`).
    LOADED: `values` is the whole stored row; `dirty` the columns to write back.
    PATCH: the stored row, if any, gets `values` set and `adds` added.
    GONE: there is no row (any more); `replaces`: a stored one, if any, must be deleted.
    """

    # (millions are made: no dataclass)
    __slots__ = ("adds", "carried", "dirty", "replaces", "state", "values")

    def __init__(
        self, state: str, values: dict[str, Any] | None = None, replaces: bool = False
    ) -> None:
        self.state = state
        self.values: dict[str, Any] = {} if values is None else values
        self.adds: dict[str, int] = {}
        self.dirty: set[str] = set()
        self.replaces = replaces
        self.carried = False  # a NEW row held back from the page before (`Fold.flush`)


class Barrier(Exception):
    """The operation cannot be folded: write what is folded, then run it as SQL."""


def memo(value: Any) -> Any:
    """How memory keys a row by a one-column primary key: a UUID by its integer, which Python
    hashes and compares in C (a UUID's own are Python calls), anything else as it is."""
    return value.int if type(value) is UUID else value


def stored_key(table: str, key: Any) -> tuple[Any, ...]:
    """The primary key's values as the database holds them, from memory's key (`memo`): every
    one-column primary key of the read models is a uuid or a text (never an integer)."""
    if table in PK1:
        return (UUID(int=key) if type(key) is int else key,)
    return tuple(key)
