"""What the API reads of schedules: each with its clock, counters and how its runs went; its
recent runs; its next nominal times; the schedules whose runs keep failing.

The schedule, its counters and its runs are inline (they reflect every acknowledged write); the
runs' outcomes (ended runs by outcome, the failing streak) come from the `schedule_runs`
catch-up projection and may lag it by a moment. A run's status is its job's, read live, or its
last known one once the job is deleted.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final
from uuid import UUID

from jobnik.domain.errors import ScheduleNotFound
from jobnik.domain.schedules import JobTemplate
from jobnik.domain.timing import Timing
from jobnik.projections.store.base import SqlStore

MAX_NEXT: Final = 20  # next nominal times one read computes at most
OUTCOMES: Final = ("completed", "failed", "aborted")


@dataclass(frozen=True)
class ScheduleView:
    """A schedule as the read models have it."""

    id: UUID
    name: str
    cron: str | None
    timezone: str
    interval_seconds: int | None
    template: JobTemplate
    overlap: str
    catchup: str
    catchup_window: int
    paused: bool
    pause_reason: str | None
    next_fire_at: datetime | None
    buffered_time: datetime | None
    last_fire_time: datetime | None
    last_job_id: UUID | None
    last_status: str | None  # the last run's job's status (DELETED, ARCHIVED: the job left)
    counts: dict[str, int]  # fired, skipped, buffered, missed; completed, failed, aborted
    failing: int  # the latest ended runs that failed in a row
    created_by: str
    creation_time: datetime
    update_time: datetime
    version: int

    @property
    def timing(self) -> Timing:
        return Timing(self.cron, self.timezone, self.interval_seconds)

    def next_fires(self, count: int) -> list[datetime]:
        """The next `count` nominal times (none while paused)."""
        if self.paused or self.next_fire_at is None or count <= 0:
            return []
        return self.timing.following(self.next_fire_at, min(count, MAX_NEXT))


@dataclass(frozen=True)
class RunView:
    """One run: its nominal time, what started it, its job and the job's status."""

    nominal_time: datetime
    started_by: str
    fired_at: datetime
    job_id: UUID
    status: str


@dataclass(frozen=True)
class Failing:
    """A schedule whose latest `failing` ended runs failed, since `since`."""

    schedule_id: UUID
    name: str
    failing: int
    since: datetime
    last_failed_job_id: UUID | None


@dataclass(frozen=True)
class Counters:
    """A schedule's fire counters, for the metrics."""

    name: str
    fired: int
    skipped: int
    missed: int


def _gone(archived: UUID | None) -> str:
    """The status of a run whose job left the live read models: ARCHIVED (`archived`: its
    archive record's job) or DELETED."""
    return "ARCHIVED" if archived is not None else "DELETED"


def _view(row: Mapping[str, Any]) -> ScheduleView:
    counts = {c: int(row[c]) for c in ("fired", "skipped", "buffered", "missed")}
    counts.update({c: int(row[f"o_{c}"] or 0) for c in OUTCOMES})
    last_status = row["last_job_status"] or (
        _gone(row["archived_job"]) if row["last_job_id"] else None
    )
    return ScheduleView(
        id=row["id"],
        name=row["name"],
        cron=row["cron"],
        timezone=row["timezone"],
        interval_seconds=row["interval_seconds"],
        template=JobTemplate.from_json(row["template"]),
        overlap=row["overlap"],
        catchup=row["catchup"],
        catchup_window=row["catchup_window"],
        paused=bool(row["paused"]),
        pause_reason=row["pause_reason"],
        next_fire_at=row["next_fire_at"],
        buffered_time=row["buffered_time"],
        last_fire_time=row["last_fire_time"],
        last_job_id=row["last_job_id"],
        last_status=last_status,
        counts=counts,
        failing=int(row["o_failing"] or 0),
        created_by=row["created_by"],
        creation_time=row["creation_time"],
        update_time=row["update_time"],
        version=row["version"],
    )


class ScheduleViews:
    """Read-only queries over the schedules' read models; each one short transaction."""

    def __init__(self, store: SqlStore) -> None:
        self.store = store
        self.d = store.dialect

    def page(self, name: str | None, offset: int, limit: int) -> tuple[int, list[ScheduleView]]:
        """Schedules by name (only `name`'s, if given): how many, and those of the page."""
        where = f"s.name = {self.d.param('n')}" if name is not None else "1 = 1"
        params = {"n": name, "limit": int(limit), "offset": int(offset)}
        with self.store.cursor(write=False) as cur:
            total = cur.one(self.d.sql("count_schedules", where=where), params)
            rows = cur.all(self.d.sql("schedule_views", where=where), params)
        return int(total["n"]) if total else 0, [_view(r) for r in rows]

    def get(self, schedule_id: UUID) -> ScheduleView:
        where = f"s.id = {self.d.param('id')}"
        params = {"id": self.d.dump("id", schedule_id), "limit": 1, "offset": 0}
        with self.store.cursor(write=False) as cur:
            row = cur.one(self.d.sql("schedule_views", where=where), params)
        if row is None:
            raise ScheduleNotFound
        return _view(row)

    def runs(self, schedule_id: UUID, before: datetime | None, limit: int) -> list[RunView]:
        """The schedule's runs, latest nominal time first (before `before`, if given)."""
        d = self.d
        bound = f"f.nominal_time < {d.param('before')}" if before is not None else "1 = 1"
        params = {
            "s": d.dump("schedule_id", schedule_id),
            "before": d.dump("nominal_time", before),
            "limit": int(limit),
        }
        with self.store.cursor(write=False) as cur:
            rows = cur.all(d.sql("schedule_runs", before=bound), params)
        return [
            RunView(
                r["nominal_time"],
                r["started_by"],
                r["fired_at"],
                r["job_id"],
                r["job_status"] or r["run_status"] or _gone(r["archived_job"]),
            )
            for r in rows
        ]

    def failing(self, at_least: int, limit: int) -> list[Failing]:
        """Schedules whose latest `at_least` or more ended runs failed in a row."""
        with self.store.cursor(write=False) as cur:
            rows = cur.all(self.d.sql("failing_schedules"), {"k": at_least, "limit": limit})
        return [
            Failing(r["id"], r["name"], r["failing"], r["failing_since"], r["last_failed_job_id"])
            for r in rows
        ]

    def counters(self) -> list[Counters]:
        """Every schedule's fire counters, by name."""
        with self.store.cursor(write=False) as cur:
            rows = cur.all(self.d.sql("schedule_counters"))
        return [Counters(r["name"], r["fired"], r["skipped"], r["missed"]) for r in rows]
