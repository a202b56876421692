"""Wire shapes of the operator's commands: pause, resume, abort, priority, delete and reruns.

Each takes an optional `reason`, recorded on the events the command appends (the job's history
shows it). It is a body field where the contract's request has a body, and a query parameter on
DELETE, whose request has none: clients that send no reason (Jobnik's SDK) are unchanged.
"""

from __future__ import annotations

from typing import Annotated, Literal
from uuid import UUID

from pydantic import Field

from jobnik.api.schemas import ApiModel, NotBefore, OutModel
from jobnik.domain.errors import (
    EarlierStageNotCompleted,
    InvalidNotBefore,
    InvalidRequest,
    JobNotRerunnable,
    LaterStageEnded,
)
from jobnik.domain.reruns import Rerun
from jobnik.domain.statuses import JobStatus, Priority

# Documented error answers the routes share (api/errors.py: error_answers).
MALFORMED = (InvalidRequest, "the request is malformed; the message names the field")
STAGE_NOT_CURRENT = (EarlierStageNotCompleted, LaterStageEnded)  # task and stage reruns
JOB_NOT_ENDED = (JobNotRerunnable, "the job has not FAILED and was not ABORTED")

# A reschedule's documented error answers.
BAD_NOT_BEFORE = (InvalidNotBefore, "notBefore does not parse, or names no time zone offset")

REASON_MAX: int = 2000
REASON_TEXT = "jobnik: why; recorded on the events this command appends"
Reason = Annotated[str, Field(max_length=REASON_MAX, description=REASON_TEXT)]


class JobStatusChange(ApiModel):
    status: Literal[JobStatus.PENDING, JobStatus.PAUSED, JobStatus.ABORTED]
    reason: Reason | None = None


class PriorityChange(ApiModel):
    priority: Priority
    reason: Reason | None = None


class RerunRequest(ApiModel):
    reason: Reason | None = None


class JobRerunRequest(RerunRequest):
    from_stage_id: UUID | None = Field(
        default=None,
        description="the stage to run again from: the job's first unfinished stage (the "
        "default) or an earlier one, whose tasks then all run again",
    )


class JobCounts(OutModel):
    """How many jobs match, in all and per status (statuses with none are 0)."""

    total: int
    by_status: dict[JobStatus, int]

    @classmethod
    def of(cls, counts: dict[str, int]) -> JobCounts:
        by_status = {s: counts.get(str(s), 0) for s in JobStatus}
        return cls(total=sum(by_status.values()), by_status=by_status)


class RerunOut(OutModel):
    """What a rerun did: the job it reopened, the stage it runs again from, the stages it
    reopened and how many tasks it put back in the queue."""

    job_id: UUID
    job_status: JobStatus
    from_stage_id: UUID | None = None
    reopened_stages: list[UUID]
    rerun_tasks: int

    @classmethod
    def of(cls, rerun: Rerun) -> RerunOut:
        return cls(
            job_id=rerun.job.id,
            job_status=JobStatus(rerun.job.status),
            from_stage_id=rerun.from_stage_id,
            reopened_stages=list(rerun.stages),
            rerun_tasks=rerun.tasks,
        )


class Reschedule(ApiModel):
    """A queued task's, or a stage's, new not-before time: later postpones, earlier brings
    forward, null lets it be dequeued at once."""

    not_before: NotBefore | None = Field(
        description="ISO 8601 with a time zone offset; null: at once (a stage's tasks: none)"
    )
    reason: Annotated[str, Field(min_length=1, max_length=REASON_MAX)] = Field(
        description="why; recorded on the events the change appends"
    )
