"""What the API reads of the stage types' limits: each type's limits in force with their use (its
tasks IN_PROGRESS, the tokens in its rate's bucket), read from the inline read models, so it
reflects every acknowledged write."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from jobnik.domain.errors import LimitNotFound
from jobnik.projections.inline.limits import IN_FORCE
from jobnik.projections.store.base import SqlStore

INT32_MAX = 2**31 - 1


@dataclass(frozen=True)
class LimitView:
    """A stage type's limits and their use; a limit not set is None."""

    stage_type: str
    max_in_progress: int | None
    in_progress: int
    queued: int  # PENDING or RETRIED (also in paused jobs and stages not released yet)
    rate_starts: int | None
    rate_interval_seconds: int | None
    tokens: float | None  # in the rate's bucket now (None: full, no claim drew from it yet)
    queue_order: str  # fifo or fair (domain/turns.py)
    max_in_progress_per_key: int | None  # per concurrency key (domain/limits.py)
    key_rate_starts: int | None  # per concurrency key, a bucket each
    key_rate_interval_seconds: int | None
    held_by_key: int  # queued tasks that could be dequeued but for their key's limits
    updated_by: str
    reason: str | None
    creation_time: datetime
    update_time: datetime

    @property
    def keyed(self) -> bool:
        """Whether a limit per concurrency key holds the type's tasks (a gate per key)."""
        return self.max_in_progress_per_key is not None or self.key_rate_starts is not None

    @property
    def rate_tokens(self) -> float | None:
        """The tokens in the rate's bucket now (None: no rate limit)."""
        if self.rate_starts is None:
            return None
        return self.rate_starts if self.tokens is None else max(0.0, self.tokens)

    @property
    def room(self) -> int:
        """How many more tasks a claim may take now."""
        rooms = [] if self.max_in_progress is None else [self.max_in_progress - self.in_progress]
        if (tokens := self.rate_tokens) is not None:
            rooms.append(math.floor(tokens))
        return max(0, min(rooms, default=self.queued))

    @property
    def held_back(self) -> int:
        """Queued tasks of the type beyond the room of its concurrency limit and rate: those
        waiting on them."""
        return max(0, self.queued - self.held_by_key - self.room)


def _view(row: Mapping[str, Any]) -> LimitView:
    return LimitView(
        row["stage_type"],
        row["max_in_progress"],
        int(row["in_progress"]),
        int(row["queued"]),
        row["rate_starts"],
        row["rate_interval_seconds"],
        None if row["tokens"] is None else float(row["tokens"]),
        row["queue_order"],
        row["max_in_progress_per_key"],
        row["key_rate_starts"],
        row["key_rate_interval_seconds"],
        int(row["held_by_key"]),
        row["updated_by"],
        row["reason"],
        row["creation_time"],
        row["update_time"],
    )


class LimitViews:
    """Read-only queries over the limits' read model; each one short transaction."""

    def __init__(self, store: SqlStore) -> None:
        self.store = store
        self.d = store.dialect

    def all(self) -> list[LimitView]:
        """Every limit in force, by stage type."""
        return self.page(0, INT32_MAX)[1]

    def page(self, offset: int, limit: int) -> tuple[int, list[LimitView]]:
        """How many limits are in force, and those of the page, by stage type."""
        with self.store.cursor(write=False) as cur:
            total = cur.one(self.d.sql("count_limits"), {})
            rows = cur.all(
                self.d.sql("limit_views", where=IN_FORCE), {"limit": limit, "offset": offset}
            )
        return int(total["n"]) if total else 0, [_view(r) for r in rows]

    def get(self, stage_type: str, *, in_force: bool = True) -> LimitView:
        """`stage_type`'s limits; LimitNotFound when it has none in force (or, with `in_force`
        false, when none was ever set)."""
        where = f"l.stage_type = {self.d.param('t')}" + (f" AND {IN_FORCE}" if in_force else "")
        params = {"t": stage_type, "limit": 1, "offset": 0}
        with self.store.cursor(write=False) as cur:
            row = cur.one(self.d.sql("limit_views", where=where), params)
        if row is None:
            raise LimitNotFound(f"no limit is set for stage type '{stage_type}'")
        return _view(row)
