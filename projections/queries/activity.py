"""The charts' series, read from the `activity` catch-up projection (catchup/activity.py): each
stage type's tasks minute by minute with its queued tasks at the end of each minute, and a job's
completed tasks minute by minute. A read costs the minute rows it shows, never the tasks."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final
from uuid import UUID

from jobnik.projections.catchup.activity import COUNTERS, WINDOW_MINUTES
from jobnik.projections.store.base import SqlStore
from jobnik.projections.store.cursor import Cursor

# The stage types a window shows: those with queued tasks or with a minute in it.
SHOWN: Final = (
    "FROM activity_v1_types t WHERE (t.queued <> 0 OR EXISTS (SELECT 1 FROM activity_v1_minutes m "
    "WHERE m.stage_type = t.stage_type AND m.epoch_minute >= {start})){one}"
)


def minute_of(t: datetime) -> int:
    return int(t.timestamp() // 60)


def start_of(minute: int) -> datetime:
    return datetime.fromtimestamp(minute * 60, UTC)


@dataclass(frozen=True)
class Minute:
    """One minute of a stage type: what its tasks did, and its queued tasks at its end."""

    start: datetime
    enqueued: int
    dequeued: int
    completed: int
    retried: int
    failed: int
    queued: int


@dataclass(frozen=True)
class TypeActivity:
    """A stage type's queued tasks now and every minute of a window, oldest first."""

    stage_type: str
    queued: int
    minutes: list[Minute]


@dataclass(frozen=True)
class JobMinute:
    start: datetime
    completed: int


def series(
    stage_type: str, queued: int, rows: Sequence[dict[str, Any]], first: int, last: int
) -> TypeActivity:
    """Minutes `first`..`last` of `stage_type` from its minute rows from `first` on (later ones
    too: they tell the queued count back from now), with its queued count now. Pure.

    The queued count at the end of a minute is the count now minus the net change of every
    later minute."""
    by_minute = {int(r["epoch_minute"]): r for r in rows}
    at_end = queued - sum(int(r["queued_change"]) for m, r in by_minute.items() if m > last)
    out: list[Minute] = []
    for minute in range(last, first - 1, -1):
        row = by_minute.get(minute)
        counts = {c: int(row[c]) if row else 0 for c in COUNTERS if c != "queued_change"}
        out.append(Minute(start_of(minute), queued=at_end, **counts))
        at_end -= int(row["queued_change"]) if row else 0
    out.reverse()
    return TypeActivity(stage_type, queued, out)


class ActivityViews:
    """Read-only queries of the activity projection; each one short transaction."""

    def __init__(self, store: SqlStore) -> None:
        self.store = store
        self.d = store.dialect

    def stage_types(
        self,
        now: datetime,
        minutes: int,
        *,
        stage_type: str | None = None,
        offset: int = 0,
        limit: int = 10,
    ) -> tuple[int, list[TypeActivity]]:
        """The stage types with queued tasks or activity in the `minutes` up to `now` (by name,
        `limit` after `offset`; or `stage_type` alone), each with those minutes; and how many
        such types there are."""
        last = minute_of(now)
        first = last - min(minutes, WINDOW_MINUTES) + 1
        p = self.d.param
        one = "" if stage_type is None else f" AND t.stage_type = {p('type')}"
        shown = SHOWN.format(start=p("start"), one=one)
        params: dict[str, Any] = {"start": first}
        if stage_type is not None:
            params["type"] = stage_type
        with self.store.cursor(write=False, snapshot=True) as cur:
            total = cur.one(f"SELECT COUNT(*) AS n {shown}", params)
            types = cur.all(
                f"SELECT t.stage_type, t.queued {shown} ORDER BY t.stage_type "
                f"LIMIT {int(limit)} OFFSET {int(offset)}",
                params,
            )
            rows = self._minutes(cur, [t["stage_type"] for t in types], first)
        return int(total["n"]) if total else 0, [
            series(t["stage_type"], int(t["queued"]), rows.get(t["stage_type"], []), first, last)
            for t in types
        ]

    def _minutes(
        self, cur: Cursor, stage_types: list[str], first: int
    ) -> dict[str, list[dict[str, Any]]]:
        if not stage_types:
            return {}
        listed, params = self.d.one_of("stage_type", "t", stage_types)
        found: dict[str, list[dict[str, Any]]] = {}
        for r in cur.all(
            f"SELECT * FROM activity_v1_minutes WHERE {listed} "
            f"AND epoch_minute >= {self.d.param('start')}",
            {**params, "start": first},
        ):
            found.setdefault(r["stage_type"], []).append(r)
        return found

    def job(self, job_id: UUID) -> list[JobMinute]:
        """The job's completed tasks per minute, from its first minute with a completion to its
        last (zeros between), within the day the projection keeps."""
        p = self.d.param
        with self.store.cursor(write=False) as cur:
            rows = cur.all(
                "SELECT epoch_minute, completed FROM activity_v1_job_minutes "
                f"WHERE job_id = {p('j')} ORDER BY epoch_minute",
                {"j": self.d.dump("job_id", job_id)},
            )
        if not rows:
            return []
        done = {int(r["epoch_minute"]): int(r["completed"]) for r in rows}
        first, last = min(done), max(done)
        return [JobMinute(start_of(m), done.get(m, 0)) for m in range(first, last + 1)]
