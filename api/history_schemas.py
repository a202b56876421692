"""Wire shapes of the derived views: lastStatus (job definitions), run statistics and job runs,
a delegated task's children, and the event log's entries and pages."""

from __future__ import annotations

from dataclasses import asdict
from datetime import datetime
from uuid import UUID

from fastapi.encoders import jsonable_encoder
from pydantic import Field
from pydantic.alias_generators import to_camel

from jobnik.api.readable import if_asked
from jobnik.api.schemas import ApiModel, OutModel, Payload
from jobnik.domain.jobs import Job
from jobnik.domain.runs import RunState
from jobnik.domain.statuses import JobMode, JobStatus
from jobnik.projections.catchup.last_status import JobDefinition, JobLink
from jobnik.projections.catchup.run_stats import Counts, JobStatistics
from jobnik.projections.queries.audit import Entry, Page
from jobnik.projections.queries.results import CHILD_RESULTS, ChildJob


class JobLinkOut(OutModel):
    job_id: UUID
    name: str
    status: str
    task_id: UUID | None = Field(default=None, description="the delegating task")

    @classmethod
    def of(cls, link: JobLink) -> JobLinkOut:
        return cls(**asdict(link))


class JobDefinitionOut(OutModel):
    name: str
    last_status: str
    last_job_status: str
    last_interaction: datetime
    last_job_id: UUID
    counts: dict[str, int]
    job_status_counts: dict[str, int]
    source_job: JobLinkOut | None = Field(
        default=None, description="the parent job of the last job (walk up)"
    )
    child_jobs: list[JobLinkOut] = Field(
        default_factory=list, description="the child jobs of the last job (walk down)"
    )

    @classmethod
    def of(cls, d: JobDefinition) -> JobDefinitionOut:
        return cls(
            name=d.name,
            last_status=d.last_status,
            last_job_status=d.last_job_status,
            last_interaction=d.last_interaction,
            last_job_id=d.last_job_id,
            counts=d.counts,
            job_status_counts=d.job_counts,
            source_job=JobLinkOut.of(d.source_job) if d.source_job else None,
            child_jobs=[JobLinkOut.of(c) for c in d.child_jobs],
        )


class TaskCountsOut(OutModel):
    """A job's or stage's task counters."""

    created_task_count: int
    successful_task_count: int
    retried_after_error_task_count: int
    retried_after_timeout_task_count: int
    failed_after_retry_task_count: int
    failed_without_retry_task_count: int
    canceled_task_count: int
    obsolete_task_count: int
    expired_task_count: int = Field(
        description="jobnik: tasks that expired in the queue (their schedule-to-start limit)"
    )

    @staticmethod
    def fields(c: Counts) -> dict[str, int]:
        return {f"{k}_task_count": v for k, v in vars(c).items()}


class _StageHead(OutModel):
    stage_id: UUID
    order: int
    type: str
    start_time: datetime | None = None
    end_time: datetime | None = None


class StageStatisticsOut(TaskCountsOut, _StageHead):  # fields: the head's, then the counts
    """One stage's counters and its first start and last finish."""


class _JobHead(OutModel):
    job_id: UUID
    name: str
    status: str
    deleted: bool
    creation_time: datetime
    start_time: datetime | None = None
    end_time: datetime | None = None


class JobStatisticsOut(TaskCountsOut, _JobHead):
    """The job's counters (sums over its stages), its times, and each stage's."""

    stages: list[StageStatisticsOut]

    @classmethod
    def of(cls, s: JobStatistics) -> JobStatisticsOut:
        return cls(
            job_id=s.job_id,
            name=s.name,
            status=s.status,
            deleted=s.deleted,
            creation_time=s.creation_time,
            start_time=s.start_time,
            end_time=s.end_time,
            stages=[
                StageStatisticsOut(
                    stage_id=st.stage_id,
                    order=st.order,
                    type=st.type,
                    start_time=st.start_time,
                    end_time=st.end_time,
                    **cls.fields(st.counts),
                )
                for st in s.stages
            ],
            **cls.fields(s.counts),
        )


class JobRunOut(OutModel):
    """A job as a run: `tasks` are its counters, `worker` one entry per stage, keyed
    `<order - 1>_<stage type>` (the job-run vocabulary of Eclipse SMILA)."""

    job_id: UUID
    name: str
    mode: JobMode
    state: RunState
    status: JobStatus
    paused: bool
    start_time: datetime | None = None
    finish_time: datetime | None = None
    end_time: datetime | None = None
    tasks: TaskCountsOut
    worker: dict[str, StageStatisticsOut]

    @classmethod
    def of(cls, job: Job, state: RunState, statistics: JobStatistics | None) -> JobRunOut:
        stats = JobStatisticsOut.of(statistics) if statistics else None
        counts = TaskCountsOut.fields(statistics.counts if statistics else Counts())
        return cls(
            job_id=job.id,
            name=job.name,
            mode=JobMode(job.mode),
            state=state,
            status=JobStatus(job.status),
            paused=job.status == JobStatus.PAUSED,
            start_time=job.start_time,
            finish_time=job.finish_time,
            end_time=job.end_time,
            tasks=TaskCountsOut(**counts),
            worker={f"{s.order - 1}_{s.type}": s for s in stats.stages} if stats else {},
        )


class ChildResultOut(OutModel):
    task_id: UUID
    stage_type: str
    result: Payload


class ChildJobOut(OutModel):
    """A child job of a delegated task: its outcome and its tasks' results."""

    id: UUID
    name: str
    status: JobStatus
    percentage: int
    end_time: datetime | None = None
    results: list[ChildResultOut] = Field(
        description=f"its tasks that completed with a result, the first {CHILD_RESULTS} by end time"
    )
    more_results: bool = Field(
        description="whether it has more such tasks than `results` lists (the rest: its "
        "stages' tasks, GET /v1/tasks?stage_id={stageId}&status=COMPLETED)"
    )

    @classmethod
    def of(cls, child: ChildJob) -> ChildJobOut:
        j = child.job
        return cls(
            id=j.id,
            name=j.name,
            status=JobStatus(j.status),
            percentage=j.percentage,
            end_time=j.end_time,
            results=[
                ChildResultOut(task_id=t.id, stage_type=t.stage_type, result=t.result or {})
                for t in child.results
            ],
            more_results=child.more_results,
        )


class EventOut(ApiModel):
    """One event of the log, as the audit shows it."""

    position: int
    type: str
    entity: str
    entity_id: UUID
    version: int
    time: datetime
    actor: str
    actor_role: str | None = Field(
        None, description="the role of the token `actor` names; absent for api, worker, system"
    )
    reason: str | None = None
    trace_id: str | None = Field(
        None,
        description="the OpenTelemetry trace id (32 hex digits) of the request that caused the "
        "event: its `traceparent` header, or the server's span when it traces; absent when "
        "there was none (the lease sweeper's work, or a request without trace context)",
    )
    payload: Payload

    @classmethod
    def of(cls, e: Entry) -> EventOut:
        return cls(
            position=e.position,
            type=e.type,
            entity=e.entity,
            entity_id=e.entity_id,
            version=e.version,
            time=e.time,
            actor=e.actor,
            actor_role=e.actor_role,
            reason=e.reason,
            trace_id=e.trace_id,
            payload=jsonable_encoder(if_asked({to_camel(k): v for k, v in e.payload.items()})),
        )


class EventPage(ApiModel):
    """A page of events in log order; `next` is the cursor for the next page (None: the end)."""

    items: list[EventOut]
    next: int | None = None

    @classmethod
    def of(cls, page: Page) -> EventPage:
        return cls(items=[EventOut.of(e) for e in page.items], next=page.next)
