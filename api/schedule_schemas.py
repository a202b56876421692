"""Wire shapes of the schedules: what creates one, what a read answers, a run, a backfill.

Policies, the cron expression, the time zone and the interval are plain values here: the domain
checks them and refuses a bad one with a named 400 (UNKNOWN_POLICY, INVALID_CRON_EXPRESSION,
INVALID_TIME_ZONE, INVALID_INTERVAL, SCHEDULE_TIMING_REQUIRED)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any
from uuid import UUID

from pydantic import Field

from jobnik.api.operator_schemas import Reason
from jobnik.api.schemas import (
    INT32_MAX,
    ApiModel,
    DateTimeQuery,
    JobName,
    OutModel,
    Payload,
    StageType,
)
from jobnik.domain.delays import MAX_DELAY_SECONDS
from jobnik.domain.schedule_commands import MAX_BACKFILL, Backfill, Run
from jobnik.domain.schedules import (
    MAX_CATCHUP_WINDOW,
    MAX_TEMPLATE_TASKS,
    MIN_CATCHUP_WINDOW,
    Catchup,
    JobTemplate,
    Overlap,
    StageTemplate,
    TaskTemplate,
)
from jobnik.domain.statuses import Priority
from jobnik.domain.timing import MAX_INTERVAL
from jobnik.projections.queries.schedules import MAX_NEXT, RunView, ScheduleView

MAX_TEMPLATE_STAGES = 50
ScheduleName = Annotated[str, Field(min_length=1, max_length=100, pattern=r"^[^\x00-\x1f]+$")]


class TaskTemplateIn(ApiModel):
    data: Payload = Field(default_factory=dict)
    user_metadata: Payload = Field(default_factory=dict)
    max_attempts: Annotated[int, Field(ge=1, le=INT32_MAX)] = 3


class StageTemplateIn(ApiModel):
    type: StageType
    data: Payload = Field(default_factory=dict)
    user_metadata: Payload = Field(default_factory=dict)
    tasks: Annotated[list[TaskTemplateIn], Field(max_length=MAX_TEMPLATE_TASKS)] = Field(
        default_factory=list
    )
    delay_seconds: Annotated[int, Field(ge=1, le=int(MAX_DELAY_SECONDS))] | None = Field(
        default=None,
        description="the stage's tasks are not dequeued before this many seconds after the run "
        "starts (none: at once)",
    )
    schedule_to_start_seconds: Annotated[int, Field(ge=1, le=int(MAX_DELAY_SECONDS))] | None = (
        Field(
            default=None,
            description="a task of the stage not dequeued within this many seconds (counted from "
            "when it could first be) expires: it fails, cause `expired`, with its stage and job",
        )
    )


class JobTemplateIn(ApiModel):
    """The job each run creates: its stages and their tasks, or a `hook`: one stage of that
    type holding one task whose data names the run (`scheduleId`, `scheduleName`,
    `nominalTime`, `trigger`); its handler fills the job in (adds stages and tasks) or does the
    work. One of `stages` and `hook`; the stages hold at most 1000 tasks in all."""

    name: JobName
    data: Payload = Field(default_factory=dict)
    priority: Priority = Priority.MEDIUM
    user_metadata: Payload = Field(default_factory=dict)
    stages: Annotated[list[StageTemplateIn], Field(max_length=MAX_TEMPLATE_STAGES)] = Field(
        default_factory=list
    )
    hook: StageType | None = None

    def template(self) -> JobTemplate:
        return JobTemplate(
            name=self.name,
            data=self.data,
            priority=self.priority,
            user_metadata=self.user_metadata,
            stages=tuple(
                StageTemplate(
                    s.type,
                    s.data,
                    s.user_metadata,
                    tuple(TaskTemplate(t.data, t.user_metadata, t.max_attempts) for t in s.tasks),
                    s.delay_seconds,
                    s.schedule_to_start_seconds,
                )
                for s in self.stages
            ),
            hook=self.hook,
        )


def _enum(values: type[Overlap] | type[Catchup]) -> dict[str, Any]:
    return {"enum": [v.value for v in values]}


class CreateSchedule(ApiModel):
    name: ScheduleName = Field(description="unique among the schedules that exist")
    cron: Annotated[str, Field(max_length=200)] | None = Field(
        default=None,
        description="five fields (minute hour day-of-month month day-of-week) or @hourly, "
        "@daily, @weekly, @monthly, @yearly, read in `timezone`; or give `intervalSeconds`",
    )
    timezone: Annotated[str, Field(max_length=100)] = Field(
        default="UTC", description="an IANA time zone, e.g. Europe/Berlin"
    )
    interval_seconds: int | None = Field(
        default=None,
        json_schema_extra={"minimum": 1, "maximum": MAX_INTERVAL},  # INVALID_INTERVAL else
        description="a run every this many seconds, counted from the Unix epoch (1 or more); "
        "or give `cron`",
    )
    job: JobTemplateIn
    overlap_policy: Annotated[str, Field(max_length=50, json_schema_extra=_enum(Overlap))] = Field(
        default=Overlap.SKIP.value,
        description="while the previous run is still going: skip (the fire is skipped), "
        "bufferOne (it runs once the previous ends; one waits at most), allowAll (it runs "
        "beside it), cancelPrevious (the previous run is aborted)",
    )
    catchup_policy: Annotated[str, Field(max_length=50, json_schema_extra=_enum(Catchup))] = Field(
        default=Catchup.LATEST.value,
        description="fires missed within the catch-up window (the server was down): all "
        "(each runs, oldest first) or latest (only the latest; the others count as missed)",
    )
    catchup_window_seconds: int = Field(
        default=24 * 3600,
        json_schema_extra={"minimum": MIN_CATCHUP_WINDOW, "maximum": MAX_CATCHUP_WINDOW},
        description=f"how late a fire may run ({MIN_CATCHUP_WINDOW} to {MAX_CATCHUP_WINDOW}); "
        "older ones are recorded as missed",
    )


class ReasonBody(ApiModel):
    reason: Reason | None = None


class BackfillBody(ApiModel):
    start: DateTimeQuery = Field(
        description="the first nominal time to run, or before it; 1970-01-01T00:00:00Z or later"
    )
    end: DateTimeQuery = Field(
        description=f"the last, at or before now; at most {MAX_BACKFILL} nominal times between"
    )
    reason: Reason | None = None


class ScheduleCountsOut(OutModel):
    """Fires: runs started, skipped (the previous run was still going), buffered, missed; and
    how the ended runs went (these may lag a moment behind the runs)."""

    fired: int
    skipped: int
    buffered: int
    missed: int
    completed: int
    failed: int
    aborted: int


class ScheduleOut(OutModel):
    id: UUID
    name: str
    cron: str | None = None
    timezone: str
    interval_seconds: int | None = None
    job: dict[str, Any] = Field(description="the job template, as created")
    overlap_policy: str
    catchup_policy: str
    catchup_window_seconds: int
    paused: bool
    pause_reason: str | None = None
    next_fire_time: datetime | None = Field(default=None, description="none while paused")
    next_fire_times: list[datetime] = Field(description="the next nominal times (`next`)")
    buffered_fire_time: datetime | None = Field(
        default=None, description="a fire waiting for the previous run to end (bufferOne)"
    )
    last_fire_time: datetime | None = Field(default=None, description="the last run's time")
    last_job_id: UUID | None = None
    last_status: str | None = Field(
        default=None,
        description="the last run's job status (DELETED: the job was deleted; ARCHIVED: it was "
        "archived)",
    )
    counts: ScheduleCountsOut
    failing_runs: int = Field(description="the latest ended runs that failed in a row")
    created_by: str
    creation_time: datetime
    update_time: datetime

    @classmethod
    def of(cls, v: ScheduleView, next_count: int = 5) -> ScheduleOut:
        return cls(
            id=v.id,
            name=v.name,
            cron=v.cron,
            timezone=v.timezone,
            interval_seconds=v.interval_seconds,
            job=v.template.to_json(),
            overlap_policy=v.overlap,
            catchup_policy=v.catchup,
            catchup_window_seconds=v.catchup_window,
            paused=v.paused,
            pause_reason=v.pause_reason,
            next_fire_time=None if v.paused else v.next_fire_at,
            next_fire_times=v.next_fires(next_count),
            buffered_fire_time=v.buffered_time,
            last_fire_time=v.last_fire_time,
            last_job_id=v.last_job_id,
            last_status=v.last_status,
            counts=ScheduleCountsOut(**v.counts),
            failing_runs=v.failing,
            created_by=v.created_by,
            creation_time=v.creation_time,
            update_time=v.update_time,
        )


class SchedulePageOut(ApiModel):
    total: int
    items: list[ScheduleOut]


class ScheduleRunOut(OutModel):
    """A run: its nominal time, what started it (schedule, buffered, trigger, backfill), when,
    its job and the job's status (the last known one once the job is deleted; ARCHIVED once it
    is archived)."""

    nominal_time: datetime
    started_by: str
    fired_at: datetime
    job_id: UUID
    status: str

    @classmethod
    def of(cls, r: RunView) -> ScheduleRunOut:
        return cls(
            nominal_time=r.nominal_time,
            started_by=r.started_by,
            fired_at=r.fired_at,
            job_id=r.job_id,
            status=r.status,
        )


class ScheduleRunsOut(ApiModel):
    items: list[ScheduleRunOut]


class RunStartedOut(OutModel):
    """A run a trigger or backfill asked for: its job, or, when that nominal time had a run
    already, that run's job (`alreadyRan`)."""

    schedule_id: UUID
    nominal_time: datetime
    job_id: UUID
    already_ran: bool

    @classmethod
    def of(cls, run: Run) -> RunStartedOut:
        job_id = run.job.id if run.job is not None else run.existing
        assert job_id is not None
        return cls(
            schedule_id=run.schedule.id,
            nominal_time=run.nominal_time,
            job_id=job_id,
            already_ran=run.job is None,
        )


class BackfillOut(ApiModel):
    fired: int
    already_ran: int
    runs: list[RunStartedOut]

    @classmethod
    def of(cls, backfill: Backfill) -> BackfillOut:
        runs = [RunStartedOut.of(r) for r in backfill.runs]
        fired = sum(1 for r in runs if not r.already_ran)
        return cls(fired=fired, already_ran=len(runs) - fired, runs=runs)


NEXT_MAX = MAX_NEXT
