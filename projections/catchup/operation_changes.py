"""What a batch of events changes in the operations counters (projections/catchup/operations.py):
the fold, pure, of the events into per-stage counters, new stages and jobs, the jobs' latest
events and open flags, lease expiries and failures by cause.

Times are event times and the later of two wins, so a batch's changes commute.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final
from uuid import UUID

from eventsourcing.domain import DomainEvent

from jobnik.domain.archives import ARCHIVED
from jobnik.domain.jobs import Job
from jobnik.domain.stages import Stage
from jobnik.domain.statuses import EXPIRED, FATAL, TIMEOUT
from jobnik.domain.tasks import Task
from jobnik.domain.tokens import Token
from jobnik.projections.catchup.projection import Batch

COUNTERS: Final = (
    "dequeues",
    "leases_expired",
    "retried_error",
    "retried_timeout",
    "failed_error",
    "failed_timeout",
    "failed_fatal",
    "failed_expired",
)
FAILED_BY_CAUSE: Final = {
    TIMEOUT: "failed_timeout",
    FATAL: "failed_fatal",
    EXPIRED: "failed_expired",
}
CLOSING: Final = (Job.JobCompleted, Job.JobFailed, Job.JobAborted, Job.JobDeleted)


def event_classes(*aggregates: type) -> tuple[type, ...]:
    """Every event class the aggregates define."""
    return tuple(
        v
        for a in aggregates
        for v in vars(a).values()
        if isinstance(v, type) and issubclass(v, DomainEvent)
    )


ALL_EVENTS: Final = event_classes(Job, Stage, Task, Token)
JOB_EVENTS: Final = frozenset(event_classes(Job))
STAGE_EVENTS: Final = frozenset(event_classes(Stage))


def later(a: datetime | None, b: datetime) -> datetime:
    """The later of two times (None: none yet)."""
    return b if a is None or b > a else a


@dataclass
class Changes:
    """What a batch of events does to the rows (pure: `fold`)."""

    events: Counter[str] = field(default_factory=Counter)
    new_stages: dict[UUID, dict[str, Any]] = field(default_factory=dict)
    counters: dict[UUID, Counter[str]] = field(default_factory=dict)  # by stage id
    dequeued_at: dict[UUID, datetime] = field(default_factory=dict)  # by stage id
    new_jobs: dict[UUID, dict[str, Any]] = field(default_factory=dict)
    job_seen: dict[UUID, datetime] = field(default_factory=dict)
    job_open: dict[UUID, bool] = field(default_factory=dict)
    stage_seen: dict[UUID, datetime] = field(default_factory=dict)
    leases: dict[UUID, dict[str, Any]] = field(default_factory=dict)  # by task id
    # Jobs and stages FAILED, by ("job" or "stage", cause: "task" for a failed task, else the
    # event's, "deadline" or "expired"; a job failed by its stage's failure: "stage").
    failures: Counter[tuple[str, str]] = field(default_factory=Counter)
    archived: set[UUID] = field(default_factory=set)  # jobs whose rows go (after the rest)

    def count(self, stage_id: UUID, counter: str) -> None:
        self.counters.setdefault(stage_id, Counter())[counter] += 1

    def expired(self, e: Any) -> None:
        """A lease ran out: counted for the stage type and the task."""
        self.count(e.stage_id, "leases_expired")
        row = self.leases.setdefault(
            e.originator_id, {"task_id": e.originator_id, "stage_id": e.stage_id, "expiries": 0}
        )
        row["expiries"] += 1
        row["last_expired_at"] = e.timestamp


def _seen(c: Changes, e: Any) -> None:
    """The event's time as its job's latest: by the job it names, else by its stage."""
    job_id = e.originator_id if type(e) in JOB_EVENTS else getattr(e, "job_id", None)
    if job_id is not None:
        c.job_seen[job_id] = later(c.job_seen.get(job_id), e.timestamp)
        return
    stage_id = e.originator_id if type(e) in STAGE_EVENTS else getattr(e, "stage_id", None)
    if stage_id is not None:
        c.stage_seen[stage_id] = later(c.stage_seen.get(stage_id), e.timestamp)


def _dequeued(c: Changes, e: Any) -> None:
    c.count(e.stage_id, "dequeues")
    c.dequeued_at[e.stage_id] = later(c.dequeued_at.get(e.stage_id), e.timestamp)


def _retried(c: Changes, e: Any) -> None:
    if e.cause == TIMEOUT:
        c.expired(e)
        c.count(e.stage_id, "retried_timeout")
    else:
        c.count(e.stage_id, "retried_error")


def _failed(c: Changes, e: Any) -> None:
    if e.cause == TIMEOUT:
        c.expired(e)
    c.count(e.stage_id, FAILED_BY_CAUSE.get(e.cause, "failed_error"))


def _job_created(c: Changes, e: Any) -> None:
    c.new_jobs[e.originator_id] = {"job_id": e.originator_id, "open": True}


def _stage_added(c: Changes, e: Any) -> None:
    c.new_stages[e.originator_id] = {
        "stage_id": e.originator_id,
        "job_id": e.job_id,
        "stage_type": e.type,
    }


def _job_failed(c: Changes, e: Any) -> None:
    c.job_open[e.originator_id] = False
    c.failures["job", e.cause or "stage"] += 1


STEP: Final[dict[type, Callable[[Changes, Any], None]]] = {
    Job.JobCreated: _job_created,
    Job.JobReopened: lambda c, e: c.job_open.__setitem__(e.originator_id, True),
    **{t: (lambda c, e: c.job_open.__setitem__(e.originator_id, False)) for t in CLOSING},
    Job.JobFailed: _job_failed,
    Stage.StageFailed: lambda c, e: c.failures.update([("stage", e.cause or "task")]),
    Stage.StageAdded: _stage_added,
    Task.TaskDequeued: _dequeued,
    Task.TaskRetried: _retried,
    Task.TaskFailed: _failed,
}


def fold(batch: Batch) -> Changes:
    """The changes `batch` (in log order) makes to the rows. Pure."""
    c = Changes()
    for _, e in batch:
        if type(e) in ARCHIVED:
            c.archived.update(f.job_id for f in e.files)
            continue
        c.events[type(e).__name__] += 1
        _seen(c, e)
        handler = STEP.get(type(e))
        if handler is not None:
            handler(c, e)
    return c
