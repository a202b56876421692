"""Wire shapes of Jobnik's v1 contract: camelCase JSON, unknown fields refused."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal
from uuid import UUID

from fastapi.encoders import jsonable_encoder
from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer
from pydantic.alias_generators import to_camel

from jobnik.api.deps import TRACEPARENT_RE, TRACESTATE_RE
from jobnik.domain.jobs import Job
from jobnik.domain.ports import Summary
from jobnik.domain.statuses import JobStatus, Priority, StageStatus, TaskStatus
from jobnik.domain.tasks import Task
from jobnik.projections.audit import Entry, Page
from jobnik.projections.views import JobView, StageView

TRACEPARENT, TRACESTATE = TRACEPARENT_RE.pattern, TRACESTATE_RE.pattern

JobName = Annotated[str, Field(min_length=2, max_length=50)]
StageType = Annotated[str, Field(min_length=1, max_length=50)]
Traceparent = Annotated[str, Field(pattern=TRACEPARENT)]
Tracestate = Annotated[str, Field(pattern=TRACESTATE)]
Payload = dict[str, Any]


class ApiModel(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


class OutModel(ApiModel):
    """Responses leave out fields that are None (e.g. tracestate, startTime before start)."""

    @model_serializer(mode="wrap")
    def _drop_none(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        return {k: v for k, v in data.items() if v is not None}


# -- requests -----------------------------------------------------------------------------


class Traced(ApiModel):
    traceparent: Traceparent | None = None
    tracestate: Tracestate | None = None

    def trace(self, incoming: tuple[str, str | None]) -> dict[str, str | None]:
        """The body's trace context, else the caller's (rules §15)."""
        if self.traceparent is not None:
            return {"traceparent": self.traceparent, "tracestate": self.tracestate}
        return {"traceparent": incoming[0], "tracestate": incoming[1]}


class CreateJob(Traced):
    name: JobName
    data: Payload
    priority: Priority = Priority.MEDIUM
    user_metadata: Payload = Field(default_factory=dict)


class CreateStage(Traced):
    type: StageType
    data: Payload
    user_metadata: Payload = Field(default_factory=dict)
    start_as_waiting: bool = False


class CreateTask(Traced):
    data: Payload
    user_metadata: Payload = Field(default_factory=dict)
    max_attempts: Annotated[int, Field(ge=1)] = 3


class JobStatusChange(ApiModel):
    status: Literal[JobStatus.PENDING, JobStatus.PAUSED, JobStatus.ABORTED]


class StageStatusChange(ApiModel):
    status: Literal[StageStatus.PENDING]


class TaskStatusChange(ApiModel):
    status: Literal[TaskStatus.COMPLETED, TaskStatus.FAILED]
    attempt: Annotated[int, Field(ge=1)] | None = Field(
        default=None, description="jobnik: the reporting attempt; a stale one gets 409"
    )
    reason: Annotated[str, Field(max_length=2000)] | None = Field(
        default=None, description="jobnik: why the task failed (kept in its history)"
    )
    fatal: bool = Field(default=False, description="jobnik: fail without retry")


class AttemptBody(ApiModel):
    attempt: Annotated[int, Field(ge=1)]


class GiveBack(AttemptBody):
    reason: Annotated[str, Field(max_length=2000)] = "handed back by the worker"


class LogLines(ApiModel):
    lines: Annotated[list[Annotated[str, Field(max_length=10_000)]], Field(min_length=1)]
    attempt: Annotated[int, Field(ge=1)] | None = None


class HeartbeatOut(OutModel):
    status: TaskStatus
    attempt: int
    lease_expires_at: datetime | None = None
    cancelled: bool


class LogLineOut(OutModel):
    time: datetime
    attempt: int
    line: str


class Appended(OutModel):
    appended: int


class PriorityChange(ApiModel):
    priority: Priority


# -- responses ----------------------------------------------------------------------------


class Message(OutModel):
    code: str


class ErrorBody(OutModel):
    message: str
    code: str


class SummaryOut(OutModel):
    pending: int
    in_progress: int
    completed: int
    failed: int
    created: int
    retried: int
    total: int
    aborted: int

    @classmethod
    def of(cls, s: Summary) -> SummaryOut:
        return cls(
            pending=s.pending,
            in_progress=s.in_progress,
            completed=s.completed,
            failed=s.failed,
            created=s.created,
            retried=s.retried,
            total=s.total,
            aborted=s.aborted,
        )


class TaskOut(OutModel):
    id: UUID
    stage_id: UUID
    data: Payload
    user_metadata: Payload
    status: TaskStatus
    attempts: int
    max_attempts: int
    creation_time: datetime
    update_time: datetime
    start_time: datetime | None = None
    end_time: datetime | None = None
    traceparent: str
    tracestate: str | None = None
    attempt: int = Field(description="jobnik: dequeues so far; reports and heartbeats name it")
    lease_expires_at: datetime | None = Field(
        default=None, description="jobnik: when an IN_PROGRESS task goes back to the queue"
    )

    @classmethod
    def of(cls, t: Task) -> TaskOut:
        return cls(
            id=t.id,
            stage_id=t.stage_id,
            data=t.data,
            user_metadata=t.user_metadata,
            status=TaskStatus(t.status),
            attempts=t.attempts,
            max_attempts=t.max_attempts,
            creation_time=t.created_on,
            update_time=t.modified_on,
            start_time=t.start_time,
            end_time=t.end_time,
            traceparent=t.traceparent,
            tracestate=t.tracestate,
            attempt=t.attempt,
            lease_expires_at=t.lease_expires_at,
        )


class StageOut(OutModel):
    id: UUID
    job_id: UUID
    type: str
    order: int
    data: Payload
    user_metadata: Payload
    status: StageStatus
    summary: SummaryOut
    percentage: int
    creation_time: datetime
    update_time: datetime
    start_time: datetime | None = None
    end_time: datetime | None = None
    traceparent: str
    tracestate: str | None = None
    tasks: list[TaskOut] | None = None

    @classmethod
    def of(cls, v: StageView) -> StageOut:
        s = v.stage
        return cls(
            id=s.id,
            job_id=s.job_id,
            type=s.type,
            order=s.order,
            data=s.data,
            user_metadata=s.user_metadata,
            status=StageStatus(s.status),
            summary=SummaryOut.of(v.summary),
            percentage=v.summary.percentage,
            creation_time=s.created_on,
            update_time=s.modified_on,
            start_time=s.start_time,
            end_time=s.end_time,
            traceparent=s.traceparent,
            tracestate=s.tracestate,
            tasks=[TaskOut.of(t) for t in v.tasks] if v.tasks is not None else None,
        )


class JobOut(OutModel):
    id: UUID
    name: str
    data: Payload
    priority: Priority
    user_metadata: Payload
    status: JobStatus
    percentage: int
    creation_time: datetime
    update_time: datetime
    start_time: datetime | None = None
    end_time: datetime | None = None
    traceparent: str
    tracestate: str | None = None
    stages: list[StageOut] | None = None

    @classmethod
    def of(cls, job: Job | JobView) -> JobOut:
        view = job if isinstance(job, JobView) else JobView(job)
        j = view.job
        return cls(
            id=j.id,
            name=j.name,
            data=j.data,
            priority=Priority(j.priority),
            user_metadata=j.user_metadata,
            status=JobStatus(j.status),
            percentage=j.percentage,
            creation_time=j.created_on,
            update_time=j.modified_on,
            start_time=j.start_time,
            end_time=j.end_time,
            traceparent=j.traceparent,
            tracestate=j.tracestate,
            stages=[StageOut.of(s) for s in view.stages] if view.stages is not None else None,
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
    reason: str | None = None
    payload: dict[str, Any]

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
            reason=e.reason,
            payload=jsonable_encoder({to_camel(k): v for k, v in e.payload.items()}),
        )


class EventPage(ApiModel):
    """A page of events in log order; `next` is the cursor for the next page (None: the end)."""

    items: list[EventOut]
    next: int | None = None

    @classmethod
    def of(cls, page: Page) -> EventPage:
        return cls(items=[EventOut.of(e) for e in page.items], next=page.next)
