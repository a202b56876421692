"""Aggregates in every status, reached by driving their commands (no hand-built events)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar
from uuid import UUID, uuid4

from jobnik.domain.archives import Archive, ArchiveFile, archive_id
from jobnik.domain.base import Entity
from jobnik.domain.delays import RetryPolicy
from jobnik.domain.jobs import Job
from jobnik.domain.principals import Actor
from jobnik.domain.stages import Stage
from jobnik.domain.statuses import JobStatus, Priority, StageStatus, TaskStatus
from jobnik.domain.tasks import Task

NOW = datetime(2026, 7, 1, 12, 0, tzinfo=UTC)
TRACE = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

E = TypeVar("E", bound=Entity)


def at(minutes: int) -> datetime:
    return NOW + timedelta(minutes=minutes)


class Clock:
    """A clock for the application service: one minute later on every call."""

    def __init__(self) -> None:
        self.minute = 0

    def __call__(self) -> datetime:
        self.minute += 1
        return at(self.minute)


class HeldClock:
    """A clock that stands still until the test moves it (`now`, `advance`)."""

    def __init__(self, start: datetime = NOW) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> datetime:
        self.now += timedelta(seconds=seconds)
        return self.now


def new_job(priority: Priority = Priority.MEDIUM, now: datetime = NOW) -> Job:
    return Job.create(
        name="nightly",
        data={"bbox": [0, 0, 1, 1]},
        priority=priority,
        user_metadata={"owner": "ops"},
        traceparent=TRACE,
        tracestate=None,
        now=now,
    )


def new_stage(
    *,
    order: int = 1,
    start_as_waiting: bool = False,
    previous_completed: bool = False,
    job_id: UUID | None = None,
    now: datetime = NOW,
    failure_patterns: Sequence[str] = (),
) -> Stage:
    return Stage.add(
        job_id=job_id or uuid4(),
        order=order,
        type="tiles",
        data={"zoom": 12},
        user_metadata={},
        traceparent=TRACE,
        tracestate="vendor=1",
        start_as_waiting=start_as_waiting,
        previous_completed=previous_completed,
        now=now,
        failure_patterns=failure_patterns,
    )


def new_task(
    max_attempts: int = 3,
    *,
    stage_id: UUID | None = None,
    job_id: UUID | None = None,
    now: datetime = NOW,
    retry_policy: RetryPolicy | None = None,
) -> Task:
    return Task.create(
        stage_id=stage_id or uuid4(),
        job_id=job_id or uuid4(),
        stage_type="tiles",
        data={"tile": [1, 2, 3]},
        user_metadata={},
        max_attempts=max_attempts,
        traceparent=TRACE,
        tracestate=None,
        now=now,
        retry_policy=retry_policy,
    )


def with_status(aggregate: E, status: str) -> E:
    """The same aggregate in a status no command reaches (CREATED): a restored snapshot."""
    state = {**aggregate.state(), "status": status}
    return type(aggregate).restore(
        aggregate.id, aggregate.version, aggregate.created_on, aggregate.modified_on, state
    )


def settled(aggregate: E) -> E:
    """The aggregate with its pending events taken, as a command finds it after loading."""
    aggregate.collect_events()
    return aggregate


def job_in(status: JobStatus, *, started: bool = False) -> Job:
    """A job in `status`; PAUSED jobs were paused after starting when `started`."""
    job = new_job()
    if status is JobStatus.CREATED:
        return with_status(settled(job), status)
    if status is JobStatus.PENDING:
        return settled(job)
    stage_id = uuid4()
    job.append_stage(stage_id, at(1), Actor.API)
    if status is JobStatus.ABORTED:
        job.request_status(JobStatus.ABORTED, at(2))
        return settled(job)
    if status is JobStatus.PAUSED:
        if started:
            job.start(at(2), Actor.SYSTEM)
        job.request_status(JobStatus.PAUSED, at(3))
        return settled(job)
    job.start(at(2), Actor.SYSTEM)
    if status is JobStatus.COMPLETED:
        job.stage_completed(stage_id, at(3), Actor.SYSTEM)
    elif status is JobStatus.FAILED:
        job.stage_failed(stage_id, at(3), Actor.SYSTEM)
    assert job.status == status
    return settled(job)


def stage_in(status: StageStatus, *, order: int = 1) -> Stage:
    if status is StageStatus.CREATED:
        return settled(new_stage(order=max(order, 2)))
    if status is StageStatus.WAITING:
        return settled(new_stage(order=order, start_as_waiting=True))
    stage = new_stage(order=order, previous_completed=True)
    if status is StageStatus.ABORTED:
        stage.abort(at(1), Actor.SYSTEM, "job aborted")
    elif status is not StageStatus.PENDING:
        stage.start(at(1), Actor.SYSTEM)
        if status is StageStatus.COMPLETED:
            stage.complete(at(2), Actor.SYSTEM)
        elif status is StageStatus.FAILED:
            stage.fail(uuid4(), at(2), Actor.SYSTEM)
    assert stage.status == status
    return settled(stage)


def task_in(status: TaskStatus, *, max_attempts: int = 3) -> Task:
    task = new_task(max_attempts)
    if status is TaskStatus.CREATED:
        return with_status(settled(task), status)
    if status is TaskStatus.ABORTED:
        task.abort(at(1), Actor.SYSTEM, "job aborted")
    elif status is not TaskStatus.PENDING:
        task.dequeue(at(1), Actor.WORKER)
        if status is TaskStatus.COMPLETED:
            task.complete(at(2), Actor.WORKER)
        elif status is TaskStatus.RETRIED:
            task.fail(at(2), Actor.WORKER)
        elif status is TaskStatus.FAILED:
            for minute in range(2, 2 * max_attempts, 2):  # use up the retries first
                task.fail(at(minute), Actor.WORKER)
                task.dequeue(at(minute + 1), Actor.WORKER)
            task.fail(at(2 * max_attempts), Actor.WORKER)
        elif status is TaskStatus.DELEGATED:
            task.delegate(1, at(2), Actor.WORKER)
    assert task.status == status
    return settled(task)


def replay(events: Sequence[Any]) -> Any:
    """The aggregate rebuilt from its events, as the repository would."""
    aggregate = events[0].mutate(None)
    for event in events[1:]:
        aggregate = event.mutate(aggregate)
    return aggregate


def per_job_record(file: ArchiveFile, now: datetime) -> Archive.JobArchived:
    """A job's archive record as records were written one per job (still read)."""
    fields = {k: v for k, v in vars(file).items() if k != "fire"}
    record = Archive._create(
        Archive.JobArchived,
        id=archive_id(file.job_id),
        timestamp=now,
        reason=None,
        actor=str(Actor.SYSTEM),
        **fields,
    )
    [event] = record.collect_events()
    return event  # type: ignore[return-value]
