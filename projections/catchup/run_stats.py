"""Run statistics per job (job run counters), per stage and summed over the job.

Counters, per stage (a stage is one worker's step of the job):
- created: TaskCreated, plus every TaskRetried (a retry counts as a new task) and every
  TaskRerun (an operator's rerun: a new run of the task, beside the outcome of the last one);
- successful: TaskCompleted;
- retried_after_error / retried_after_timeout: TaskRetried with cause error / timeout (a handler
  failure, or a lease that ran out and was swept: a missing keep-alive);
- failed_after_retry: TaskFailed with cause error or timeout (attempts ran out);
  failed_without_retry: TaskFailed with cause fatal;
- expired: TaskFailed with cause expired (queued past its stage's schedule-to-start limit, never
  dequeued: it leaves the queue);
- canceled: TaskAborted (the job was aborted; also a late report or hand-back after the abort);
- obsolete: tasks still queued (PENDING or RETRIED) when their job ended. Only a FAILED job
  leaves such tasks (an abort aborts every queued task, a completion needs every task
  completed): nothing will dequeue them again, not by their own error nor by a cancel, their
  precondition (a live job) is gone. Derived when read from the `queued` gauge (TaskCreated,
  TaskRetried and TaskReturned add one, TaskDequeued and aborting a queued task take one).

Times: a stage's start_time is its StageStarted (its first dequeue), its end_time the time of its
latest task outcome (completed, retried, failed or aborted). The job's start_time is JobStarted,
its end_time its COMPLETED/FAILED/ABORTED. After the job ends:
created == successful + retried* + failed* + expired + canceled + obsolete (+ tasks still
IN_PROGRESS).
The rows stay when the job is deleted (`deleted` becomes true): they are history, until the job
is archived: its archive record removes them (the live database stays bounded by its live jobs;
the job's history is then its archive's, api/archives.py). A rerun
(JobReopened) takes the job back out of its end: status again, no end_time, no obsolete tasks
(they are queued for it again), and the invariant holds again once it ends again.

The fold is pure and its changes commute within their kind (counter deltas add up, times and
statuses are last-writer-wins in log order), so a batch folds to one statement per row.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final
from uuid import UUID

from jobnik.domain.archives import ARCHIVED
from jobnik.domain.jobs import Job
from jobnik.domain.stages import Stage
from jobnik.domain.statuses import EXPIRED, FATAL, JOB_FINAL, TIMEOUT, JobStatus, TaskStatus
from jobnik.domain.tasks import Task
from jobnik.projections.catchup.projection import Batch, CatchUpProjection, Sql
from jobnik.projections.store.cursor import Cursor

JOBS, STAGES = "run_stats_v1_jobs", "run_stats_v1_stages"
COUNTERS: Final = (
    "created",
    "successful",
    "retried_after_error",
    "retried_after_timeout",
    "failed_after_retry",
    "failed_without_retry",
    "canceled",
    "queued",
    "expired",
)
QUEUED: Final = frozenset({TaskStatus.PENDING, TaskStatus.RETRIED})
JOB_STATUS: Final[Mapping[type, JobStatus]] = {
    Job.JobStarted: JobStatus.IN_PROGRESS,
    Job.JobPaused: JobStatus.PAUSED,
    Job.JobCompleted: JobStatus.COMPLETED,
    Job.JobFailed: JobStatus.FAILED,
    Job.JobAborted: JobStatus.ABORTED,
}


@dataclass
class Changes:
    """What a batch of events does to the statistics rows (each dict keyed by the row's id)."""

    new_jobs: dict[UUID, dict[str, Any]] = field(default_factory=dict)
    new_stages: dict[UUID, dict[str, Any]] = field(default_factory=dict)
    job_sets: dict[UUID, dict[str, Any]] = field(default_factory=dict)
    stage_adds: dict[UUID, Counter[str]] = field(default_factory=dict)
    stage_sets: dict[UUID, dict[str, Any]] = field(default_factory=dict)
    archived: set[UUID] = field(default_factory=set)  # jobs whose rows go (after the rest)

    def add(self, stage_id: UUID, deltas: Mapping[str, int]) -> None:
        counts = self.stage_adds.get(stage_id)
        if counts is None:
            counts = self.stage_adds[stage_id] = Counter()
        for k, v in deltas.items():  # Counter.update: the same, in slower Python (every event)
            counts[k] = counts.get(k, 0) + v

    def set_stage(self, stage_id: UUID, **values: Any) -> None:
        self.stage_sets.setdefault(stage_id, {}).update(values)

    def set_job(self, job_id: UUID, **values: Any) -> None:
        self.job_sets.setdefault(job_id, {}).update(values)

    def ended(self, stage_id: UUID, deltas: Mapping[str, int], time: datetime) -> None:
        """A task outcome: its counters, and the stage's end_time (the latest outcome's)."""
        self.add(stage_id, deltas)
        sets = self.stage_sets.get(stage_id)
        if sets is None:
            self.stage_sets[stage_id] = {"end_time": time}
        else:
            sets["end_time"] = time


def fold(batch: Batch) -> Changes:
    """The changes `batch` (in log order) makes to the statistics rows. Pure."""
    c = Changes()
    steps = STEP
    for _, e in batch:
        handler = steps.get(type(e))
        if handler is not None:
            handler(c, e)
    return c


def _job_created(c: Changes, e: Any) -> None:
    c.new_jobs[e.originator_id] = {
        "job_id": e.originator_id,
        "name": e.name,
        "status": JobStatus.PENDING.value,
        "creation_time": e.timestamp,
        "start_time": None,
        "end_time": None,
        "deleted": False,
    }


def _job_status(status: JobStatus) -> Callable[[Changes, Any], None]:
    def handle(c: Changes, e: Any) -> None:
        values: dict[str, Any] = {"status": status.value}
        if status is JobStatus.IN_PROGRESS:  # JobStarted
            values["start_time"] = e.timestamp
        elif status in JOB_FINAL:
            values["end_time"] = e.timestamp
        c.set_job(e.originator_id, **values)

    return handle


def _stage_added(c: Changes, e: Any) -> None:
    c.new_stages[e.originator_id] = {
        "stage_id": e.originator_id,
        "job_id": e.job_id,
        "stage_order": e.order,
        "type": e.type,
        "start_time": None,
        "end_time": None,
    }


CREATED: Final = {"created": 1, "queued": 1}
DEQUEUED: Final = {"queued": -1}
RETURNED: Final = {"queued": 1}
SUCCESSFUL: Final = {"successful": 1}
RETRIED: Final = {
    cause: {"created": 1, "queued": 1, f"retried_after_{cause}": 1}
    for cause in ("error", "timeout")
}
FAILED: Final = {"failed_without_retry": 1}, {"failed_after_retry": 1}
EXPIRED_: Final = {"expired": 1, "queued": -1}  # never dequeued: it leaves the queue
CANCELED: Final = {"canceled": 1, "queued": -1}, {"canceled": 1, "queued": 0}

# What each event does to the statistics (a dict by class: no isinstance chain per event).
STEP: Final[dict[type, Callable[[Changes, Any], None]]] = {
    Job.JobCreated: _job_created,
    Job.JobResumed: lambda c, e: c.set_job(e.originator_id, status=str(e.status)),
    **{t: _job_status(status) for t, status in JOB_STATUS.items()},
    Job.JobReopened: lambda c, e: c.set_job(e.originator_id, status=e.status, end_time=None),
    Job.JobDeleted: lambda c, e: c.set_job(e.originator_id, deleted=True),
    Stage.StageAdded: _stage_added,
    Stage.StageStarted: lambda c, e: c.set_stage(e.originator_id, start_time=e.timestamp),
    Task.TaskCreated: lambda c, e: c.add(e.stage_id, CREATED),
    Task.TaskRerun: lambda c, e: c.add(e.stage_id, CREATED),
    **dict.fromkeys(ARCHIVED, lambda c, e: c.archived.update(f.job_id for f in e.files)),
    Task.TaskDequeued: lambda c, e: c.add(e.stage_id, DEQUEUED),
    Task.TaskReturned: lambda c, e: c.add(e.stage_id, RETURNED),
    Task.TaskCompleted: lambda c, e: c.ended(e.stage_id, SUCCESSFUL, e.timestamp),
    Task.TaskRetried: lambda c, e: c.ended(
        e.stage_id, RETRIED["timeout" if e.cause == TIMEOUT else "error"], e.timestamp
    ),
    Task.TaskFailed: lambda c, e: c.ended(
        e.stage_id, EXPIRED_ if e.cause == EXPIRED else FAILED[e.cause != FATAL], e.timestamp
    ),
    Task.TaskAborted: lambda c, e: c.ended(
        e.stage_id, CANCELED[e.previous not in QUEUED], e.timestamp
    ),
}


EVENTS: Final = (
    Job.JobCreated,
    Job.JobStarted,
    Job.JobPaused,
    Job.JobResumed,
    Job.JobCompleted,
    Job.JobFailed,
    Job.JobAborted,
    Job.JobReopened,
    Job.JobDeleted,
    Stage.StageAdded,
    Stage.StageStarted,
    Task.TaskCreated,
    Task.TaskDequeued,
    Task.TaskReturned,
    Task.TaskCompleted,
    Task.TaskRetried,
    Task.TaskFailed,
    Task.TaskAborted,
    Task.TaskRerun,
    *ARCHIVED,
)

INSERT_JOB: Final = (
    "INSERT INTO run_stats_v1_jobs "
    "(job_id, name, status, creation_time, start_time, end_time, deleted) VALUES "
    "(%(job_id)s, %(name)s, %(status)s, %(creation_time)s, %(start_time)s, %(end_time)s, "
    "%(deleted)s)"
)
INSERT_STAGE: Final = (
    "INSERT INTO run_stats_v1_stages "
    "(stage_id, job_id, stage_order, type, start_time, end_time) VALUES "
    "(%(stage_id)s, %(job_id)s, %(stage_order)s, %(type)s, %(start_time)s, %(end_time)s)"
)
ADD_COUNTERS: Final = (
    "UPDATE run_stats_v1_stages SET "
    + ", ".join(f"{c} = {c} + %({c})s" for c in COUNTERS)
    + " WHERE stage_id = %(stage_id)s"
)


class RunStats(CatchUpProjection):
    """Run counters and times per job and per stage."""

    name = "run_stats"
    version = 4  # 2: reruns (JobReopened, TaskRerun); 3: expired tasks; 4: archived jobs leave
    per_job = True  # rows per job and per stage, written by that job's events alone
    tables = (JOBS, STAGES)
    keys = {JOBS: ("job_id",), STAGES: ("stage_id",)}
    events = EVENTS
    leave_with_job = ((STAGES, "job_id IN ({jobs})"), (JOBS, "job_id IN ({jobs})"))
    ddl = f"""
    CREATE TABLE IF NOT EXISTS run_stats_v1_jobs (
        job_id {{uuid}} PRIMARY KEY,
        name TEXT NOT NULL,
        status TEXT NOT NULL,
        creation_time {{time}} NOT NULL,
        start_time {{time}},
        end_time {{time}},
        deleted {{bool}} NOT NULL
    );
    CREATE TABLE IF NOT EXISTS run_stats_v1_stages (
        stage_id {{uuid}} PRIMARY KEY,
        job_id {{uuid}} NOT NULL,
        stage_order INTEGER NOT NULL,
        type TEXT NOT NULL,
        {" ".join(f"{c} INTEGER NOT NULL DEFAULT 0," for c in COUNTERS)}
        start_time {{time}},
        end_time {{time}}
    );
    CREATE INDEX IF NOT EXISTS run_stats_v1_stages_job ON run_stats_v1_stages (job_id)
    """

    def prepare(self, batch: Batch) -> Changes:
        return fold(batch)

    def apply(self, cur: Cursor, batch: Batch, sql: Sql, prepared: Any = None) -> None:
        c = prepared if isinstance(prepared, Changes) else fold(batch)
        d = cur.dialect
        if c.new_jobs:
            cur.executemany(sql(INSERT_JOB), [d.dump_row(r) for r in c.new_jobs.values()])
        if c.new_stages:
            cur.executemany(sql(INSERT_STAGE), [d.dump_row(r) for r in c.new_stages.values()])
        adds = [
            {"stage_id": d.dump("stage_id", s), **{k: deltas.get(k, 0) for k in COUNTERS}}
            for s, deltas in c.stage_adds.items()
            if any(deltas.values())
        ]
        if adds:
            cur.executemany(sql(ADD_COUNTERS), adds)
        for table, key, sets in ((JOBS, "job_id", c.job_sets), (STAGES, "stage_id", c.stage_sets)):
            grouped: dict[tuple[str, ...], list[dict[str, Any]]] = {}
            for row_id, values in sets.items():
                grouped.setdefault(tuple(sorted(values)), []).append(
                    {**d.dump_row(values), key: d.dump(key, row_id)}
                )
            for cols, rows in grouped.items():
                assignments = ", ".join(f"{col} = %({col})s" for col in cols)
                statement = f"UPDATE {table} SET {assignments} WHERE {key} = %({key})s"
                cur.executemany(sql(statement), rows)
        self.forget(cur, sql, c.archived)


# -- reads ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Counts:
    created: int = 0
    successful: int = 0
    retried_after_error: int = 0
    retried_after_timeout: int = 0
    failed_after_retry: int = 0
    failed_without_retry: int = 0
    canceled: int = 0
    obsolete: int = 0
    expired: int = 0

    def __add__(self, other: Counts) -> Counts:
        return Counts(**{k: getattr(self, k) + getattr(other, k) for k in vars(self)})


@dataclass(frozen=True)
class StageStatistics:
    stage_id: UUID
    order: int
    type: str
    counts: Counts
    start_time: datetime | None
    end_time: datetime | None


@dataclass(frozen=True)
class JobStatistics:
    """What `GET /v1/jobs/{id}/statistics` shows."""

    job_id: UUID
    name: str
    status: str
    deleted: bool
    creation_time: datetime
    start_time: datetime | None
    end_time: datetime | None
    counts: Counts
    stages: list[StageStatistics]


def read(cur: Cursor, job_id: UUID) -> JobStatistics | None:
    """The job's statistics as the projection has them, or None when it has none."""
    p, d = cur.dialect.param, cur.dialect
    job = cur.one(
        f"SELECT * FROM run_stats_v1_jobs WHERE job_id = {p('j')}", {"j": d.dump("job_id", job_id)}
    )
    if job is None:
        return None
    ended = job["status"] in JOB_FINAL
    rows = cur.all(
        f"SELECT * FROM run_stats_v1_stages WHERE job_id = {p('j')} ORDER BY stage_order",
        {"j": d.dump("job_id", job_id)},
    )
    stages = [
        StageStatistics(
            stage_id=r["stage_id"],
            order=r["stage_order"],
            type=r["type"],
            counts=Counts(
                **{k: r[k] for k in COUNTERS if k != "queued"},
                obsolete=r["queued"] if ended else 0,
            ),
            start_time=r["start_time"],
            end_time=r["end_time"],
        )
        for r in rows
    ]
    total = Counts()
    for s in stages:
        total = total + s.counts
    return JobStatistics(
        job_id=job["job_id"],
        name=job["name"],
        status=job["status"],
        deleted=bool(job["deleted"]),
        creation_time=job["creation_time"],
        start_time=job["start_time"],
        end_time=job["end_time"],
        counts=total,
        stages=stages,
    )
