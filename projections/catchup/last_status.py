"""lastStatus per job name (job definitions): the status of the most recent job of that name, when
a job of that name last changed, and how many jobs of that name are in each status.

A job definition speaks a smaller vocabulary of statuses (the final ones, COMPLETED and FAILED,
plus PENDING and IN_PROGRESS, and the delegation's DELEGATING and WAITING). Jobnik's job statuses
map onto it as follows (`DEFINITION_STATUS`); the jobnik status is kept beside it:

    jobnik        definition    why
    CREATED       PENDING       not claimed by any worker yet
    PENDING       PENDING
    PAUSED        PENDING       not being worked on; resumes into PENDING/IN_PROGRESS
    IN_PROGRESS   IN_PROGRESS
    COMPLETED     COMPLETED
    FAILED        FAILED
    ABORTED       FAILED        the definition knows two final statuses; an abort is an
                                explicit failure there (a parent task hears of it as of FAILED)

Delegation (inferred from the events of the job's tasks):

    TaskDelegated                        DELEGATING  the handler dispatched child jobs this run
    TaskChildEnded, children still open  WAITING     a child ended, its siblings have not
    TaskRedispatched                     IN_PROGRESS every child ended: the task runs again
    then the job's own events            COMPLETED / FAILED as above

A job with several delegating tasks shows the latest of these. A rerun (JobReopened) moves a
FAILED or ABORTED job back to PENDING or IN_PROGRESS.

"Most recent job" is the job of that name created last (highest log position of its
JobCreated). `lastInteraction` is the time of the latest status event (creation included) of any
job of that name. Counts include deleted jobs: deletion tidies the live views, the history stays.
They include archived jobs too, whose own rows (`last_status_v1_jobs`) leave with them: an
archived job has ended, no event moves it again.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Final
from uuid import UUID

from jobnik.domain.archives import ARCHIVED
from jobnik.domain.jobs import Job
from jobnik.domain.statuses import JobStatus
from jobnik.domain.tasks import Task
from jobnik.projections.catchup.projection import (
    Batch,
    CatchUpProjection,
    Sql,
    archived_in,
    select_in,
)
from jobnik.projections.store.cursor import Cursor

STATUS_AFTER: Final[Mapping[type, Callable[[Any], str | None]]] = {
    Job.JobCreated: lambda e: JobStatus.PENDING.value,
    Job.JobStarted: lambda e: JobStatus.IN_PROGRESS.value,
    Job.JobPaused: lambda e: JobStatus.PAUSED.value,
    Job.JobResumed: lambda e: str(e.status),
    Job.JobCompleted: lambda e: JobStatus.COMPLETED.value,
    Job.JobFailed: lambda e: JobStatus.FAILED.value,
    Job.JobAborted: lambda e: JobStatus.ABORTED.value,
    Job.JobReopened: lambda e: str(e.status),
    Task.TaskDelegated: lambda e: "DELEGATING",
    Task.TaskChildEnded: lambda e: "WAITING" if e.open_children else None,
    Task.TaskRedispatched: lambda e: JobStatus.IN_PROGRESS.value,
}
DEFINITION_STATUS: Final[Mapping[str, str]] = {
    JobStatus.CREATED: "PENDING",
    JobStatus.PENDING: "PENDING",
    JobStatus.PAUSED: "PENDING",
    JobStatus.IN_PROGRESS: "IN_PROGRESS",
    JobStatus.COMPLETED: "COMPLETED",
    JobStatus.FAILED: "FAILED",
    JobStatus.ABORTED: "FAILED",
    "DELEGATING": "DELEGATING",
    "WAITING": "WAITING",
}
COUNT_KEYS: Final = ("PENDING", "IN_PROGRESS", "DELEGATING", "WAITING", "COMPLETED", "FAILED")


def job_of(event: Any) -> UUID:
    """The job an event's status speaks of: a task event names its job."""
    job_id: UUID = getattr(event, "job_id", event.originator_id)
    return job_id


NAMES, JOBS, COUNTS = "last_status_v1", "last_status_v1_jobs", "last_status_v1_counts"


@dataclass(frozen=True)
class JobRow:
    job_id: UUID
    name: str
    status: str  # jobnik's


@dataclass(frozen=True)
class NameRow:
    name: str
    last_job_id: UUID
    last_job_position: int
    last_job_status: str  # jobnik's
    last_interaction: datetime

    @property
    def last_status(self) -> str:
        return DEFINITION_STATUS.get(self.last_job_status, self.last_job_status)


@dataclass
class State:
    """The rows a batch touches, in memory: the fold reads and replaces them."""

    jobs: dict[UUID, JobRow]
    names: dict[str, NameRow]
    counts: Counter[tuple[str, str]]  # (name, jobnik status) → change in the number of jobs


def step(state: State, event: Any, position: int) -> None:
    """Fold one event into `state`. Pure: no I/O, no clock."""
    status_of = STATUS_AFTER.get(type(event))
    status = status_of(event) if status_of is not None else None
    if status is None:
        return
    job_id = job_of(event)
    if isinstance(event, Job.JobCreated):
        job = JobRow(job_id, event.name, status)
        state.counts[job.name, status] += 1
        current = state.names.get(job.name)
        if current is None or current.last_job_position < position:
            state.names[job.name] = NameRow(job.name, job_id, position, status, event.timestamp)
        else:
            state.names[job.name] = replace(current, last_interaction=event.timestamp)
    else:
        previous = state.jobs.get(job_id)
        if previous is None:  # a job created before the log began: cannot happen; ignore
            return
        job = replace(previous, status=status)
        state.counts[job.name, previous.status] -= 1
        state.counts[job.name, status] += 1
        row = state.names[job.name]
        if row.last_job_id == job_id:
            row = replace(row, last_job_status=status)
        state.names[job.name] = replace(row, last_interaction=event.timestamp)
    state.jobs[job_id] = job


UPSERT_JOB: Final = (
    "INSERT INTO last_status_v1_jobs (job_id, name, status) "
    "VALUES (%(job_id)s, %(name)s, %(status)s) "
    "ON CONFLICT (job_id) DO UPDATE SET status = EXCLUDED.status"
)
UPSERT_NAME: Final = (
    "INSERT INTO last_status_v1 (name, last_job_id, last_job_position, last_job_status, "
    "last_status, last_interaction) VALUES (%(name)s, %(last_job_id)s, %(last_job_position)s, "
    "%(last_job_status)s, %(last_status)s, %(last_interaction)s) ON CONFLICT (name) DO UPDATE "
    "SET last_job_id = EXCLUDED.last_job_id, last_job_position = EXCLUDED.last_job_position, "
    "last_job_status = EXCLUDED.last_job_status, last_status = EXCLUDED.last_status, "
    "last_interaction = EXCLUDED.last_interaction"
)
ADD_COUNT: Final = (
    "INSERT INTO last_status_v1_counts (name, status, jobs) "
    "VALUES (%(name)s, %(status)s, %(jobs)s) "
    "ON CONFLICT (name, status) DO UPDATE SET jobs = last_status_v1_counts.jobs + EXCLUDED.jobs"
)


class LastStatus(CatchUpProjection):
    """lastStatus, lastInteraction and counts by status per job name."""

    name = "last_status"
    # 2: DELEGATING and WAITING; 3: reruns (JobReopened); 4: archived jobs' rows leave
    version = 4
    tables = (NAMES, JOBS, COUNTS)
    keys = {NAMES: ("name",), JOBS: ("job_id",), COUNTS: ("name", "status")}
    events = (*STATUS_AFTER, *ARCHIVED)
    # (an archived job has ended: no event moves it again, and its name's row and counts
    # already hold what it contributed)
    leave_with_job = ((JOBS, "job_id IN ({jobs})"),)
    ddl = """
    CREATE TABLE IF NOT EXISTS last_status_v1 (
        name TEXT PRIMARY KEY,
        last_job_id {uuid} NOT NULL,
        last_job_position BIGINT NOT NULL,
        last_job_status TEXT NOT NULL,
        last_status TEXT NOT NULL,
        last_interaction {time} NOT NULL
    );
    CREATE TABLE IF NOT EXISTS last_status_v1_jobs (
        job_id {uuid} PRIMARY KEY,
        name TEXT NOT NULL,
        status TEXT NOT NULL
    );
    CREATE TABLE IF NOT EXISTS last_status_v1_counts (
        name TEXT NOT NULL,
        status TEXT NOT NULL,
        jobs INTEGER NOT NULL,
        PRIMARY KEY (name, status)
    );
    """

    def apply(self, cur: Cursor, batch: Batch, sql: Sql, prepared: Any = None) -> None:
        state = self._load(cur, batch, sql)
        loaded_jobs, loaded_names = dict(state.jobs), dict(state.names)
        for position, event in batch:
            step(state, event, position)
        d = cur.dialect
        jobs = [vars(j) for j in state.jobs.values() if loaded_jobs.get(j.job_id) != j]
        names = [
            {**vars(n), "last_status": n.last_status}
            for n in state.names.values()
            if loaded_names.get(n.name) != n
        ]
        counts = [  # zero deltas too: a row exists once any job of the name had the status,
            {"name": name, "status": status, "jobs": delta}  # however events fall into batches
            for (name, status), delta in state.counts.items()
        ]
        for statement, rows in ((UPSERT_JOB, jobs), (UPSERT_NAME, names), (ADD_COUNT, counts)):
            if rows:
                cur.executemany(sql(statement), [d.dump_row(r) for r in rows])
        self.forget(cur, sql, archived_in(batch))

    def _load(self, cur: Cursor, batch: Batch, sql: Sql) -> State:
        """The stored rows of the jobs the batch changes (not creates) and of their names."""
        created = {e.originator_id for _, e in batch if isinstance(e, Job.JobCreated)}
        wanted = {job_of(e) for _, e in batch if type(e) in STATUS_AFTER} - created
        jobs = {
            r["job_id"]: JobRow(r["job_id"], r["name"], r["status"])
            for r in select_in(cur, sql, "SELECT * FROM last_status_v1_jobs", "job_id", wanted)
        }
        names = {j.name for j in jobs.values()} | {
            e.name for _, e in batch if isinstance(e, Job.JobCreated)
        }
        rows = select_in(cur, sql, "SELECT * FROM last_status_v1", "name", names)
        return State(
            jobs,
            {
                r["name"]: NameRow(
                    r["name"],
                    r["last_job_id"],
                    r["last_job_position"],
                    r["last_job_status"],
                    r["last_interaction"],
                )
                for r in rows
            },
            Counter(),
        )


# -- reads ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class JobDefinition:
    """What `GET /v1/job-definitions/{name}` shows."""

    name: str
    last_status: str
    last_job_status: str
    last_interaction: datetime
    last_job_id: UUID
    counts: dict[str, int]  # the definition's vocabulary, every key present
    job_counts: dict[str, int]  # jobnik's statuses, those with jobs
    source_job: JobLink | None = None  # the last job's parent job (`sourceJob` on the wire)
    child_jobs: tuple[JobLink, ...] = ()  # the last job's child jobs


@dataclass(frozen=True)
class JobLink:
    """A parent or child job, as the inline read model has it now (deleted jobs are gone)."""

    job_id: UUID
    name: str
    status: str
    task_id: UUID | None  # the delegating task


def _links(cur: Cursor, job_id: UUID) -> tuple[JobLink | None, tuple[JobLink, ...]]:
    p, d = cur.dialect.param, cur.dialect
    select = "SELECT id, name, status, parent_task_id, parent_job_id FROM jobs_v1"
    me = cur.one(f"{select} WHERE id = {p('j')}", {"j": d.dump("id", job_id)})
    parent = None
    if me is not None and me["parent_job_id"] is not None:
        row = cur.one(f"{select} WHERE id = {p('j')}", {"j": d.dump("id", me["parent_job_id"])})
        if row is not None:
            parent = JobLink(row["id"], row["name"], row["status"], me["parent_task_id"])
    rows = cur.all(
        f"{select} WHERE parent_job_id = {p('j')} ORDER BY creation_time, id",
        {"j": d.dump("parent_job_id", job_id)},
    )
    children = tuple(JobLink(r["id"], r["name"], r["status"], r["parent_task_id"]) for r in rows)
    return parent, children


def read(cur: Cursor, name: str) -> JobDefinition | None:
    """The job definition `name` as the projection has it, or None when it has no job."""
    p = cur.dialect.param
    row = cur.one(f"SELECT * FROM last_status_v1 WHERE name = {p('n')}", {"n": name})
    if row is None:
        return None
    rows = cur.all(
        f"SELECT status, jobs FROM last_status_v1_counts WHERE name = {p('n')}", {"n": name}
    )
    job_counts = {r["status"]: int(r["jobs"]) for r in rows if r["jobs"]}
    counts = dict.fromkeys(COUNT_KEYS, 0)
    for status, n in job_counts.items():
        key = DEFINITION_STATUS.get(status, status)
        counts[key] = counts.get(key, 0) + n
    source, children = _links(cur, row["last_job_id"])
    return JobDefinition(
        name=row["name"],
        last_status=row["last_status"],
        last_job_status=row["last_job_status"],
        last_interaction=row["last_interaction"],
        last_job_id=row["last_job_id"],
        counts=counts,
        job_counts=dict(sorted(job_counts.items())),
        source_job=source,
        child_jobs=children,
    )
