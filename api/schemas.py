"""Wire shapes of Jobnik's v1 contract: camelCase JSON, unknown fields refused."""

from __future__ import annotations

import functools
import itertools
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Annotated, Any, Final, Literal
from uuid import UUID

from fastapi import Response
from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainValidator,
    SerializerFunctionWrapHandler,
    TypeAdapter,
    WithJsonSchema,
    model_serializer,
    model_validator,
)
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticCustomError

from jobnik.api.readable import if_asked
from jobnik.api.settings import Settings
from jobnik.domain.delays import MAX_DELAY_SECONDS, RetryPolicy, parse_instant, parse_not_before
from jobnik.domain.errors import InvalidDeadline, InvalidRequest, TooManyLogLines
from jobnik.domain.jobs import Job
from jobnik.domain.limits import CONCURRENCY_KEY_MAX
from jobnik.domain.ports import Summary
from jobnik.domain.statuses import JobMode, JobStatus, Priority, StageStatus, TaskStatus
from jobnik.domain.tasks import Task
from jobnik.domain.turns import FAIRNESS_KEY_MAX, FAIRNESS_WEIGHT_MAX
from jobnik.projections.queries.results import JobView, StageView
from jobnik.projections.queries.timetravel import in_utc

# W3C trace context headers, as a request may carry them (here and in the body).
TRACEPARENT_RE: Final = re.compile(r"^[\da-f]{2}-[\da-f]{32}-[\da-f]{16}-[\da-f]{2}$")
TRACESTATE_RE: Final = re.compile(
    r"^[a-z0-9][a-z0-9_\-*/]*=[^,=]+(?:,[a-z0-9][a-z0-9_\-*/]*=[^,=]+)*$"
)
TRACEPARENT, TRACESTATE = TRACEPARENT_RE.pattern, TRACESTATE_RE.pattern

JOB_NAME_MIN, JOB_NAME_MAX = 2, 50  # a job's name, as Jobnik bounds it
JobName = Annotated[str, Field(min_length=JOB_NAME_MIN, max_length=JOB_NAME_MAX)]
StageType = Annotated[str, Field(min_length=1, max_length=50)]
Traceparent = Annotated[str, Field(pattern=TRACEPARENT)]
Tracestate = Annotated[str, Field(pattern=TRACESTATE)]


def _payload(value: Any) -> dict[str, Any]:
    """A free-form JSON object as it is: the input gate has checked its contents, so only its
    type is validated (not each of its keys); made readable when a stored one fails to render
    (api/readable.py)."""
    value = if_asked(value)
    if not isinstance(value, dict):
        raise PydanticCustomError("dict_type", "Input should be a valid dictionary")
    return value


# A free-form payload's schema names itself, for the document to state what it may hold from the
# settings (api/openapi.py: `JsonObject`).
FREE_FORM: Final = "x-jobnik-free-form"
Payload = Annotated[
    dict[str, Any],
    PlainValidator(_payload, json_schema_input_type=dict[str, Any]),
    WithJsonSchema({"type": "object", "additionalProperties": True, FREE_FORM: True}),
]
INT32_MAX = 2**31 - 1  # the stores' INTEGER columns (attempts, counters)
INT64_MAX = 2**63 - 1  # log positions (BIGINT)
Attempt = Annotated[int, Field(ge=1, le=INT32_MAX)]
_ISO_DATE_TIME = re.compile(r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}")


def _iso_text(value: Any) -> Any:
    """Only ISO 8601 text is a date-time here (pydantic alone also takes Unix seconds)."""
    if not isinstance(value, str) or not _ISO_DATE_TIME.match(value):
        raise PydanticCustomError("datetime_parsing", "not an ISO 8601 date-time")
    return value


DateTimeQuery = Annotated[AwareDatetime, BeforeValidator(_iso_text), AfterValidator(in_utc)]


@dataclass(frozen=True)
class MostItems:
    """An array's bound, in its type's `Annotated` metadata: at most `Settings.<setting>` items,
    else `error` ("request/body has N `noun`; at most M per request"), counted by the input gate
    before anything validates an item (api/bodies.py)."""

    setting: str
    error: type[InvalidRequest]
    noun: str

    def most(self, settings: Settings) -> int:
        most: int = getattr(settings, self.setting)
        return most


class ApiModel(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _no_more_keys_than_names(cls, data: Any) -> Any:
        """An object with more keys than the model has names (its fields' and their aliases)
        holds an unknown key among its first ones: refused for that key alone, where pydantic
        would report each unknown key (a body may hold a hundred thousand)."""
        if isinstance(data, dict):
            names = _names(cls)
            if len(data) > len(names):
                key = next(k for k in itertools.islice(data, len(names) + 1) if k not in names)
                raise PydanticCustomError(
                    "additional_property", "unknown field {key}", {"key": str(key)}
                )
        return data


@functools.cache
def _names(model: type[BaseModel]) -> frozenset[str]:
    """The keys an object of `model` may hold: its fields' names and aliases."""
    return frozenset(
        name for field, info in model.model_fields.items() for name in (field, info.alias) if name
    )


class OutModel(ApiModel):
    """Responses leave out fields that are None (e.g. tracestate, startTime before start)."""

    @model_serializer(mode="wrap")
    def _drop_none(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        return {k: v for k, v in data.items() if v is not None}

    def response(self) -> Response:
        """This model as the response body. A route that returns the model has FastAPI
        validate it again against its `response_model` before serialising it, so the worker's
        routes return this instead, and declare `response_model` for the OpenAPI document."""
        return Response(self.model_dump_json(by_alias=True), media_type="application/json")

    @classmethod
    def list_response(cls, models: Sequence[OutModel]) -> Response:
        """A list of these models as the response body."""
        body = _list_of(cls).dump_json(list(models), by_alias=True)
        return Response(body, media_type="application/json")


@functools.cache
def _list_of(model: type[OutModel]) -> TypeAdapter[list[Any]]:
    return TypeAdapter(list[model])  # type: ignore[valid-type]


# -- requests -----------------------------------------------------------------------------


class Traced(ApiModel):
    traceparent: Traceparent | None = None
    tracestate: Tracestate | None = None

    def trace(self, incoming: tuple[str, str | None]) -> dict[str, str | None]:
        """The body's trace context, else the caller's."""
        if self.traceparent is not None:
            return {"traceparent": self.traceparent, "tracestate": self.tracestate}
        return {"traceparent": incoming[0], "tracestate": incoming[1]}


NotBefore = Annotated[
    str,
    Field(
        max_length=64,
        description="jobnik: not dequeued before this time: ISO 8601 with a time zone offset, "
        "e.g. 2030-01-02T03:04:05Z (else 400 INVALID_NOT_BEFORE)",
    ),
]


class RetryPolicyIn(ApiModel):
    """jobnik: how long a retried task waits before its next attempt: retry n waits
    initialSeconds * coefficient^(n-1), at most maxSeconds, less up to `jitter` of it (a
    fraction fixed per task and retry). Out of bounds: 400 INVALID_RETRY_POLICY."""

    initial_seconds: float
    coefficient: float = 2.0
    max_seconds: float = 3600.0
    jitter: float = 0.0

    def policy(self) -> RetryPolicy:
        return RetryPolicy(self.initial_seconds, self.coefficient, self.max_seconds, self.jitter)

    @classmethod
    def of(cls, values: dict[str, float] | None) -> RetryPolicyIn | None:
        return None if values is None else cls(**values)


class Delayable(Traced):
    """What a job's or a stage's creation says about time."""

    not_before: NotBefore | None = None
    retry_policy: RetryPolicyIn | None = Field(
        default=None, description="jobnik: its tasks' retry policy (a stage's, else its job's)"
    )

    deadline: Annotated[str, Field(max_length=64)] | None = Field(
        default=None,
        description="jobnik: if it has not ended by then (ISO 8601 with an offset, later than "
        "now; else 400 INVALID_DEADLINE), it fails with cause `deadline`, by `system`, and what "
        "it holds is aborted",
    )
    schedule_to_start_seconds: int | None = Field(
        default=None,
        # (documented bounds; the domain checks them, answering 400 INVALID_SCHEDULE_TO_START)
        json_schema_extra={"minimum": 1, "maximum": int(MAX_DELAY_SECONDS)},
        description="jobnik: a queued task not dequeued within this many seconds (1 to "
        "10,000,000; else 400 INVALID_SCHEDULE_TO_START) fails with cause `expired`, by "
        "`system`, without retry, failing its stage and job; counted from when it is queued, "
        "its not-before time or its stage and job opening, whichever is latest (a stage's, "
        "else its job's)",
    )

    def timing(self) -> dict[str, Any]:
        """NewJob's and NewStage's time fields (InvalidNotBefore, InvalidRetryPolicy,
        InvalidDeadline; the domain checks the schedule-to-start limit)."""
        policy = None if self.retry_policy is None else self.retry_policy.policy()
        return {
            "not_before": parse_not_before(self.not_before),
            "retry_policy": policy,
            "deadline": parse_instant(self.deadline, "deadline", InvalidDeadline),
            "schedule_to_start_seconds": self.schedule_to_start_seconds,
        }


class CreateJob(Delayable):
    name: JobName
    data: Payload
    priority: Priority = Priority.MEDIUM
    user_metadata: Payload = Field(default_factory=dict)
    mode: JobMode = Field(
        default=JobMode.RUN_ONCE,
        description="jobnik: runOnce completes with its stages; standard stays open "
        "for new stages until POST /v1/jobs/{jobId}/finish",
    )
    parent_task_id: UUID | None = Field(
        default=None,
        description="jobnik: the running task this child job is delegated from",
    )
    fairness_key: str | None = Field(
        default=None,
        # (documented bounds; the domain checks them, answering 400 INVALID_FAIRNESS_KEY)
        json_schema_extra={"minLength": 1, "maxLength": FAIRNESS_KEY_MAX},
        description="jobnik: at a stage type whose queue order is fair, the jobs of one key "
        "(a tenant, say) take their turns as one (1 to 100 characters; else 400 "
        "INVALID_FAIRNESS_KEY)",
    )
    fairness_weight: int | None = Field(
        default=None,
        # (documented bounds; the domain checks them, answering 400 INVALID_FAIRNESS_WEIGHT)
        json_schema_extra={"minimum": 1, "maximum": FAIRNESS_WEIGHT_MAX},
        description="jobnik: at a stage type whose queue order is fair, its tasks (or its "
        "fairness key's) take this many places at each turn: a job of weight 3 gets three "
        "tasks dequeued for each one of a job of weight 1 (1 to 100, default 1; else 400 "
        "INVALID_FAIRNESS_WEIGHT)",
    )
    concurrency_key: str | None = Field(
        default=None,
        # (documented bounds; the domain checks them, answering 400 INVALID_CONCURRENCY_KEY)
        json_schema_extra={"minLength": 1, "maxLength": CONCURRENCY_KEY_MAX},
        description="jobnik: at a stage type with a per-key limit (PUT "
        "/v1/limits/{stageType}/keys), the jobs of one key (a tenant, a licence) share its "
        "tasks in progress; without one, the job is its own key (1 to 100 characters; else "
        "400 INVALID_CONCURRENCY_KEY)",
    )


FailurePattern = Annotated[str, Field(min_length=1, max_length=500)]


class CreateStage(Delayable):
    type: StageType
    data: Payload
    user_metadata: Payload = Field(default_factory=dict)
    start_as_waiting: bool = False
    completion: bool = Field(
        default=False,
        description="jobnik: held until every normal stage completed, then runs "
        "while the job is COMPLETING",
    )
    failure_patterns: Annotated[list[FailurePattern], Field(max_length=20)] = Field(
        default_factory=list,
        description="jobnik: regular expressions; a COMPLETED report whose result "
        "has a matching string is recorded as a failure",
    )


class CreateTask(Traced):
    data: Payload
    user_metadata: Payload = Field(default_factory=dict)
    max_attempts: Annotated[int, Field(ge=1, le=INT32_MAX)] = 3
    not_before: NotBefore | None = None


class StageStatusChange(ApiModel):
    status: Literal[StageStatus.PENDING]


class TaskStatusChange(ApiModel):
    status: Literal[TaskStatus.COMPLETED, TaskStatus.FAILED, TaskStatus.DELEGATED] = Field(
        description="DELEGATED (jobnik): the task created child jobs and waits for them"
    )
    result: Payload | None = Field(
        default=None, description="jobnik: the task's result, with COMPLETED"
    )
    attempt: Attempt | None = Field(
        default=None, description="jobnik: the reporting attempt; a stale one gets 409"
    )
    reason: Annotated[str, Field(max_length=2000)] | None = Field(
        default=None, description="jobnik: why the task failed (kept in its history)"
    )
    fatal: bool = Field(default=False, description="jobnik: fail without retry")


class AttemptBody(ApiModel):
    attempt: Attempt


class GiveBack(AttemptBody):
    reason: Annotated[str, Field(max_length=2000)] = "handed back by the worker"


class LogLines(ApiModel):
    lines: Annotated[
        list[Annotated[str, Field(max_length=10_000)]],
        Field(min_length=1),
        MostItems("max_log_lines", TooManyLogLines, "lines"),
    ]
    attempt: Attempt | None = None


class HeartbeatOut(OutModel):
    status: TaskStatus
    attempt: int
    lease_expires_at: datetime | None = None
    cancelled: bool


class LogLineOut(OutModel):
    time: datetime
    attempt: int
    actor: str = Field(
        description="who appended it: the token, or `worker`/`api` without access control"
    )
    position: int = Field(description="its append's log position (the TaskLogged event's)")
    line: str


class LogPageOut(ApiModel):
    """A page of a task's log lines, oldest first; `next` is the cursor for the next page
    (None: the page was not full)."""

    items: list[LogLineOut]
    next: str | None = None


class Appended(OutModel):
    appended: int


# -- responses ----------------------------------------------------------------------------


class Message(OutModel):
    code: str


class ErrorBody(OutModel):
    """Every error answer: what went wrong, and its code (e.g. JOB_NOT_FOUND)."""

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
    delegated: int = Field(description="jobnik: tasks waiting for their child jobs")

    @classmethod
    def of(cls, s: Summary) -> SummaryOut:
        return cls(**asdict(s))


class TaskOut(OutModel):
    id: UUID
    stage_id: UUID
    data: Payload
    user_metadata: Payload
    status: TaskStatus
    attempts: int = Field(
        description="attempts spent, as Jobnik counts them: a FAILED report or an expired lease "
        "spends one (a completion, a hand-back or a delegation spends none); the task fails for "
        "good when they reach maxAttempts, and a rerun sets them back to 0. A task completed at "
        "its first dequeue shows attempts 0 and attempt 1"
    )
    max_attempts: int
    creation_time: datetime
    update_time: datetime
    start_time: datetime | None = None
    end_time: datetime | None = None
    traceparent: str
    tracestate: str | None = None
    attempt: int = Field(
        description="jobnik: the number of the task's latest dequeue (0 before the first), "
        "which its reports and heartbeats name; every dequeue counts, spent or not"
    )
    lease_expires_at: datetime | None = Field(
        default=None, description="jobnik: when an IN_PROGRESS task goes back to the queue"
    )
    result: Payload | None = Field(default=None, description="jobnik: the completed result")
    delegations: int = Field(
        default=0, description="jobnik: how many times the task waited for child jobs"
    )
    not_before: datetime | None = Field(
        default=None,
        description="jobnik: a queued task is not dequeued before this time (a delayed task, or "
        "a retry's due time); absent when it may be dequeued at once",
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
            result=t.result,
            delegations=t.delegations,
            not_before=t.not_before,
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
    completion: bool = Field(default=False, description="jobnik: a completion-phase stage")
    failure_patterns: list[str] | None = None
    not_before: datetime | None = Field(
        default=None, description="jobnik: its tasks are not dequeued before this time"
    )
    retry_policy: RetryPolicyIn | None = Field(
        default=None, description="jobnik: the retry policy its new tasks get"
    )
    deadline: datetime | None = Field(
        default=None, description="jobnik: it fails if it has not ended by then"
    )
    schedule_to_start_seconds: int | None = Field(
        default=None, description="jobnik: its queued tasks expire if not dequeued within it"
    )

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
            completion=s.completion,
            failure_patterns=s.failure_patterns or None,
            not_before=s.not_before,
            retry_policy=RetryPolicyIn.of(s.retry_policy),
            deadline=s.deadline,
            schedule_to_start_seconds=s.schedule_to_start_seconds,
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
    mode: JobMode = Field(default=JobMode.RUN_ONCE, description="jobnik: runOnce or standard")
    parent_task_id: UUID | None = Field(default=None, description="jobnik: the delegating task")
    parent_job_id: UUID | None = Field(default=None, description="jobnik: that task's job")
    finish_time: datetime | None = Field(default=None, description="jobnik: when it was finished")
    not_before: datetime | None = Field(
        default=None, description="jobnik: its tasks are not dequeued before this time"
    )
    retry_policy: RetryPolicyIn | None = Field(
        default=None, description="jobnik: its stages' default retry policy"
    )
    deadline: datetime | None = Field(
        default=None, description="jobnik: it fails if it has not ended by then"
    )
    schedule_to_start_seconds: int | None = Field(
        default=None, description="jobnik: its stages' default schedule-to-start limit"
    )
    fairness_key: str | None = Field(
        default=None, description="jobnik: the jobs it takes turns with as one"
    )
    fairness_weight: int | None = Field(
        default=None, description="jobnik: its tasks per turn under a fair queue order"
    )
    concurrency_key: str | None = Field(
        default=None, description="jobnik: the jobs it shares per-key limits with"
    )

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
            mode=JobMode(j.mode),
            parent_task_id=j.parent_task_id,
            parent_job_id=j.parent_job_id,
            finish_time=j.finish_time,
            not_before=j.not_before,
            retry_policy=RetryPolicyIn.of(j.retry_policy),
            deadline=j.deadline,
            schedule_to_start_seconds=j.schedule_to_start_seconds,
            fairness_key=j.fairness_key,
            fairness_weight=j.fairness_weight,
            concurrency_key=j.concurrency_key,
        )
