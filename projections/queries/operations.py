"""What operators watch, read from the read models: counts by status (Jobnik's service gauges),
each stage type's queue, the operations projection's counters, catch-up lag, and stuck work.

Every read costs what the jobs, stages and stage types cost, never what the tasks do: task
counts come from the stages' summaries, queue ages from one index probe per stage type, and
the rest from the small tables of the `operations` catch-up projection.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Final
from uuid import UUID

from jobnik.domain.statuses import TaskStatus
from jobnik.projections.catchup.operation_changes import COUNTERS
from jobnik.projections.catchup.registry import status
from jobnik.projections.store.base import SqlStore

# A summary's column for each task status.
TASK_COLUMNS: Final = {s: s.value.lower() for s in TaskStatus}
QUEUED: Final = ("pending", "retried")
STUCK_LIMIT: Final = 1000  # items of each kind one read returns at most


def _time(value: Any) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return value.astimezone(UTC) if isinstance(value, datetime) else None


@dataclass(frozen=True)
class StatusCounts:
    """Jobs by status; stages by (stage type, status); tasks by (stage type, job priority,
    task status), zero counts left out."""

    jobs: dict[str, int]
    stages: dict[tuple[str, str], int]
    tasks: dict[tuple[str, str, str], int]


@dataclass(frozen=True)
class Queue:
    """One stage type's tasks by state, its oldest dequeueable task, and its counters."""

    stage_type: str
    queued: int  # PENDING or RETRIED (also in paused jobs and stages not released yet)
    in_progress: int
    completed: int
    failed: int
    delegated: int
    oldest_queued_at: datetime | None  # of the tasks a dequeue could take now
    last_dequeue_at: datetime | None
    counters: dict[str, int] = field(default_factory=dict)  # operations_v1_types' COUNTERS
    total: int = 0  # tasks of the type, whatever their status
    delayed: int = 0  # of the queued, those whose not-before time has not come

    @classmethod
    def merged(cls, stage_type: str, queues: list[Queue]) -> Queue:
        """`queues` (of several stage types) as one queue named `stage_type`: counts and
        counters summed, the oldest queued task the oldest of all, the last dequeue the latest."""
        oldest = [q.oldest_queued_at for q in queues if q.oldest_queued_at is not None]
        dequeues = [q.last_dequeue_at for q in queues if q.last_dequeue_at is not None]
        return cls(
            stage_type,
            sum(q.queued for q in queues),
            sum(q.in_progress for q in queues),
            sum(q.completed for q in queues),
            sum(q.failed for q in queues),
            sum(q.delegated for q in queues),
            min(oldest, default=None),
            max(dequeues, default=None),
            {c: sum(q.counters.get(c, 0) for q in queues) for c in COUNTERS},
            sum(q.total for q in queues),
            sum(q.delayed for q in queues),
        )


@dataclass(frozen=True)
class Lag:
    """A catch-up projection behind the log's head: by events, and by the age of the oldest
    event it has not applied (0 when it has applied them all)."""

    projection: str
    events: int
    seconds: float


@dataclass(frozen=True)
class Stuck:
    kind: str
    reason: str
    since: datetime
    job_id: UUID | None = None
    stage_id: UUID | None = None
    task_id: UUID | None = None
    stage_type: str | None = None
    schedule_id: UUID | None = None


@dataclass(frozen=True)
class Thresholds:
    """When work counts as stuck."""

    lease_expiries: int  # a task whose lease expired more than this many times
    job_idle_seconds: float  # an unfinished job with no event for longer
    queue_idle_seconds: float  # queued tasks waiting, and no dequeue, for longer
    schedule_failures: int = 3  # a schedule whose latest ended runs failed this many in a row


class OperationsViews:
    """Read-only queries for metrics and the operators' API; each one short transaction."""

    def __init__(self, store: SqlStore) -> None:
        self.store = store
        self.d = store.dialect

    def status_counts(self) -> StatusCounts:
        with self.store.cursor(write=False, snapshot=True) as cur:
            jobs = cur.raw_all(self.d.sql("jobs_by_status"))
            stages = cur.raw_all(self.d.sql("stages_by_status"))
            tasks = cur.raw_all(self.d.sql("tasks_by_type_and_priority"))
        by_task: dict[tuple[str, str, str], int] = {}
        for r in tasks:
            for s, column in TASK_COLUMNS.items():
                n = int(r[column] or 0)
                if n:
                    by_task[r["stage_type"], r["priority"], s.value] = n
        return StatusCounts(
            {r["status"]: int(r["n"]) for r in jobs},
            {(r["stage_type"], r["status"]): int(r["n"]) for r in stages},
            by_task,
        )

    def queues(self, now: datetime, every_type: bool = False) -> list[Queue]:
        """Every stage type that has tasks (`every_type`: that has a stage), by name; its
        delayed tasks are those whose not-before time is after `now`."""
        with self.store.cursor(write=False, snapshot=True) as cur:
            sums = cur.raw_all(self.d.sql("tasks_by_type_and_priority"))
            oldest = cur.raw_all(self.d.sql("oldest_queued"))
            ops = cur.raw_all(self.d.sql("operations_by_type"))
            waiting = cur.all(
                self.d.sql("delayed_by_type"), {"now": self.d.dump("not_before", now)}
            )
        delayed = {r["stage_type"]: int(r["delayed"]) for r in waiting}
        totals: dict[str, dict[str, int]] = {}
        for r in sums:
            into = totals.setdefault(r["stage_type"], {})
            for column in (*TASK_COLUMNS.values(), "total"):
                into[column] = into.get(column, 0) + int(r[column] or 0)
        first = {r["stage_type"]: _time(r["update_time"]) for r in oldest}
        by_type = {r["stage_type"]: r for r in ops}
        out = []
        for stage_type in sorted(t for t, n in totals.items() if every_type or n["total"] > 0):
            n, o = totals[stage_type], by_type.get(stage_type, {})
            out.append(
                Queue(
                    stage_type,
                    sum(n[c] for c in QUEUED),
                    n["in_progress"],
                    n["completed"],
                    n["failed"],
                    n["delegated"],
                    first.get(stage_type),
                    _time(o.get("last_dequeue_at")),
                    {c: int(o.get(c) or 0) for c in COUNTERS},
                    n["total"],
                    delayed.get(stage_type, 0),
                )
            )
        return out

    def events_appended(self) -> dict[str, int]:
        """Events in the log by class name, as far as the operations projection has read."""
        with self.store.cursor(write=False) as cur:
            rows = cur.raw_all(self.d.sql("events_by_type"))
        return {r["event_type"]: int(r["appended"]) for r in rows}

    def failures(self) -> dict[tuple[str, str], int]:
        """Jobs and stages FAILED by ("job" or "stage", cause), as far as the operations
        projection has read."""
        with self.store.cursor(write=False) as cur:
            rows = cur.raw_all(self.d.sql("failures_by_cause"))
        return {(r["subject"], r["cause"]): int(r["n"]) for r in rows}

    def lags(self, now: datetime) -> list[Lag]:
        """Each catch-up projection's lag behind the log's head."""
        out = []
        for s in status(self.store):
            if s.inline:
                continue
            seconds = 0.0
            if s.lag:
                unapplied = self.store.notifications(s.position, 1)
                if unapplied:
                    event: Any = self.store.decode(unapplied[0])
                    seconds = max(0.0, (now - event.timestamp).total_seconds())
            out.append(Lag(s.name, s.lag, seconds))
        return out

    def stuck(
        self, thresholds: Thresholds, now: datetime, queues: list[Queue] | None = None
    ) -> list[Stuck]:
        """Work that is not moving, oldest first within each kind (`queues`: as `queues()`
        just read them, if at hand)."""
        d = self.d
        idle_before = now - timedelta(seconds=thresholds.job_idle_seconds)
        with self.store.cursor(write=False, snapshot=True) as cur:
            leases = cur.all(
                d.sql("stuck_leases"), {"n": thresholds.lease_expiries, "limit": STUCK_LIMIT}
            )
            delegations = cur.all(d.sql("stuck_delegations"), {"limit": STUCK_LIMIT})
            jobs = cur.all(
                d.sql("idle_jobs"),
                {
                    "before": d.dump("since", idle_before),
                    "now": d.dump("not_before", now),
                    "limit": STUCK_LIMIT,
                },
            )
            failing = cur.all(
                d.sql("failing_schedules"),
                {"k": thresholds.schedule_failures, "limit": STUCK_LIMIT},
            )
        items = [
            _task_stuck(
                "LEASE_EXPIRED_REPEATEDLY",
                f"its lease expired {r['expiries']} times (more than "
                f"{thresholds.lease_expiries}); the latest expiry is `since`",
                r["since"],
                r,
            )
            for r in leases
        ]
        items += [
            _task_stuck(
                "DELEGATION_NOT_REDISPATCHED",
                f"all {r['children']} of its child jobs ended and it was not dispatched again",
                r["since"] or r["delegated_at"],
                r,
            )
            for r in delegations
        ]
        items += [
            Stuck(
                "JOB_IDLE",
                f"{r['status']} job with no event and no task in progress for more than "
                f"{thresholds.job_idle_seconds:g} s",
                r["since"],
                r["job_id"],
            )
            for r in jobs
        ]
        items += [
            Stuck(
                "SCHEDULE_RUNS_FAILING",
                f"schedule '{r['name']}': its latest {r['failing']} ended runs failed in a row",
                r["failing_since"],
                r["last_failed_job_id"],
                schedule_id=r["id"],
            )
            for r in failing
        ]
        idle_after = now - timedelta(seconds=thresholds.queue_idle_seconds)
        for q in self.queues(now) if queues is None else queues:
            waiting = q.oldest_queued_at
            last = q.last_dequeue_at
            if waiting is None or waiting >= idle_after:
                continue  # nothing dequeueable waits, or not for long
            if last is not None and last >= idle_after:
                continue  # dequeued lately
            items.append(
                Stuck(
                    "QUEUE_NOT_DEQUEUED",
                    f"{q.queued} tasks queued and none dequeued for more than "
                    f"{thresholds.queue_idle_seconds:g} s",
                    max(waiting, last) if last is not None else waiting,
                    stage_type=q.stage_type,
                )
            )
        return items


def _task_stuck(kind: str, reason: str, since: datetime, row: Mapping[str, Any]) -> Stuck:
    """A stuck task, located by its row's job, stage, task and stage type."""
    return Stuck(
        kind, reason, since, row["job_id"], row["stage_id"], row["task_id"], row["stage_type"]
    )
