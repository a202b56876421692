"""The application service: each command loads aggregates, lets them decide, saves atomically."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from uuid import UUID, uuid4

from jobnik.domain.access import TokenCommands
from jobnik.domain.batches import BatchCommands
from jobnik.domain.commands import command, utcnow
from jobnik.domain.delays import RetryPolicy, latest
from jobnik.domain.errors import InvalidRequest, ParentTaskNotRunning, TooManyChildJobs
from jobnik.domain.jobs import Job
from jobnik.domain.principals import Actor, Principal
from jobnik.domain.reruns import RerunCommands
from jobnik.domain.reschedules import RescheduleCommands
from jobnik.domain.stages import Stage
from jobnik.domain.statuses import JobMode, JobStatus, Priority, StageStatus, TaskStatus
from jobnik.domain.sweeps import SweepCommands
from jobnik.domain.tasks import Task
from jobnik.domain.turns import Turns, shift_on_release
from jobnik.domain.work import NO_TRACE

__all__ = ["NO_TRACE", "Jobnik", "NewJob", "NewStage", "NewTask", "utcnow"]


@dataclass(frozen=True)
class NewJob:
    name: str
    data: dict[str, Any]
    priority: Priority = Priority.MEDIUM
    user_metadata: dict[str, Any] = field(default_factory=dict)
    traceparent: str = NO_TRACE
    tracestate: str | None = None
    mode: JobMode = JobMode.RUN_ONCE
    parent_task_id: UUID | None = None
    not_before: datetime | None = None  # its tasks are not dequeued before
    retry_policy: RetryPolicy | None = None  # its stages' default
    deadline: datetime | None = None  # it fails if it has not ended by then
    schedule_to_start_seconds: int | None = None  # its stages' default
    fairness_key: str | None = None  # its tasks take turns as one with this key's other jobs'
    fairness_weight: int | None = None  # its tasks (or its key's) per turn, under fair order
    concurrency_key: str | None = None  # its tasks count against this key's per-key limits


@dataclass(frozen=True)
class NewStage:
    type: str
    data: dict[str, Any]
    user_metadata: dict[str, Any] = field(default_factory=dict)
    traceparent: str = NO_TRACE
    tracestate: str | None = None
    start_as_waiting: bool = False
    completion: bool = False
    failure_patterns: tuple[str, ...] = ()
    not_before: datetime | None = None  # its tasks are not dequeued before
    retry_policy: RetryPolicy | None = None  # None: the job's, else the server's
    deadline: datetime | None = None  # it (and its job) fails if it has not ended by then
    # A queued task not dequeued within this many seconds expires; None: the job's, else none.
    schedule_to_start_seconds: int | None = None


@dataclass(frozen=True)
class NewTask:
    data: dict[str, Any]
    user_metadata: dict[str, Any] = field(default_factory=dict)
    max_attempts: int = 3
    traceparent: str = NO_TRACE
    tracestate: str | None = None
    not_before: datetime | None = None  # not dequeued before (nor before its stage's, job's)


class Jobnik(RescheduleCommands, RerunCommands, BatchCommands, SweepCommands, TokenCommands):
    """The Jobnik contract's commands, one transaction each; the worker's (WorkCommands;
    batched: BatchCommands), the server's take-backs (SweepCommands), the operator's reruns
    (RerunCommands) and access management (TokenCommands) besides."""

    # -- jobs -----------------------------------------------------------------------------

    @command
    def create_job(self, new: NewJob, *, by: Principal = Actor.API) -> Job:
        """A job; with `parent_task_id`, a child job of that (running) task."""
        now = self.clock()
        with self._write() as s:
            parent_job_id = None
            if new.parent_task_id is not None:
                parent = s.task(new.parent_task_id)
                if parent.status != TaskStatus.IN_PROGRESS:
                    raise ParentTaskNotRunning(
                        f"parent task {parent.id} is {parent.status}: child jobs are created by "
                        "its running handler"
                    )
                if s.children_counts(parent.id).total >= self.max_child_jobs:
                    raise TooManyChildJobs(
                        f"task {parent.id} has created {self.max_child_jobs} child jobs, as many "
                        "as a task may (JOBNIK_MAX_CHILD_JOBS)"
                    )
                parent_job_id = parent.job_id
            job = Job.create(
                name=new.name,
                data=new.data,
                priority=new.priority,
                user_metadata=new.user_metadata,
                traceparent=new.traceparent,
                tracestate=new.tracestate,
                now=now,
                actor=by,
                mode=new.mode,
                parent_task_id=new.parent_task_id,
                parent_job_id=parent_job_id,
                not_before=new.not_before,
                retry_policy=new.retry_policy,
                deadline=new.deadline,
                schedule_to_start_seconds=new.schedule_to_start_seconds,
                fairness_key=new.fairness_key,
                fairness_weight=new.fairness_weight,
                concurrency_key=new.concurrency_key,
            )
            s.save(job)
        return job

    @command
    def finish_job(self, job_id: UUID, *, by: Principal = Actor.API) -> Job:
        """Finish: no new stages or tasks; the job completes when its work is done."""
        now = self.clock()
        with self._write() as s:
            job = s.job(job_id)
            if job.finish(now, by):
                phase = job.next_phase(now, by)
                s.save(job)
                self._after_phase(s, job, phase, now)
        return job

    @command
    def set_job_status(
        self,
        job_id: UUID,
        target: JobStatus,
        *,
        by: Principal = Actor.API,
        reason: str | None = None,
    ) -> Job:
        """PENDING (resume/start), PAUSED or ABORTED; abort cascades. `reason`
        is recorded on the job's event."""
        now = self.clock()
        with self._write() as s:
            job = s.job(job_id)
            job.request_status(target, now, reason, actor=by)
            if target in (JobStatus.PAUSED, JobStatus.ABORTED):
                s.hold_queue(job.id)  # its queued tasks stop being dequeueable
            if target is not JobStatus.ABORTED:
                s.save(job)
                return job
            self._abort_contents(s, job, now)
            self._job_ended(s, job, now)
        return job

    @command
    def change_priority(
        self,
        job_id: UUID,
        priority: Priority,
        *,
        by: Principal = Actor.API,
        reason: str | None = None,
    ) -> bool:
        """False when the job already has that priority (the API answers 204)."""
        with self._write() as s:
            job = s.job(job_id)
            changed = job.change_priority(priority, self.clock(), by, reason)
            if changed:
                s.hold_queue(job.id)  # its queued tasks are re-ranked
            s.save(job)
        return changed

    @command
    def replace_job_user_metadata(
        self, job_id: UUID, user_metadata: dict[str, Any], *, by: Principal = Actor.API
    ) -> Job:
        with self._write() as s:
            job = s.job(job_id)
            job.replace_user_metadata(user_metadata, self.clock(), by)
            s.save(job)
        return job

    @command
    def delete_job(
        self, job_id: UUID, *, by: Principal = Actor.API, reason: str | None = None
    ) -> None:
        """Remove a final job from every read model; its events stay."""
        with self._write() as s:
            job = s.job(job_id)
            job.delete(self.clock(), by, reason)
            s.save(job)

    @command
    def erase_job(self, job_id: UUID, *, by: Principal, reason: str) -> Job:
        """Erase an ended job's user data (data, user metadata, results, log lines) from the
        log and the read models, keeping its events' skeleton; JobErased records who and why.
        A job that has not ended: JobNotEnded."""
        with self._write() as s:
            job = s.job(job_id)
            job.erase(self.clock(), by, reason)
            s.erase_user_data(job.id)
            s.save(job)
        return job

    # -- stages ---------------------------------------------------------------------------

    @command
    def add_stage(self, job_id: UUID, new: NewStage, *, by: Principal = Actor.API) -> Stage:
        now = self.clock()
        with self._write() as s:
            job = s.job(job_id)
            stage_id = uuid4()
            order = job.append_stage(stage_id, now, by, completion=new.completion)
            previous = self._normal_before(s, job, order)
            stage = Stage.add(
                id=stage_id,
                job_id=job_id,
                order=order,
                type=new.type,
                data=new.data,
                user_metadata=new.user_metadata,
                traceparent=new.traceparent,
                tracestate=new.tracestate,
                start_as_waiting=new.start_as_waiting,
                previous_completed=previous is not None
                and previous.status == StageStatus.COMPLETED,
                now=now,
                actor=by,
                completion=new.completion,
                failure_patterns=new.failure_patterns,
                not_before=new.not_before,
                retry_policy=new.retry_policy,
                deadline=new.deadline,
                schedule_to_start_seconds=(
                    new.schedule_to_start_seconds
                    if new.schedule_to_start_seconds is not None
                    else job.schedule_to_start_seconds
                ),
            )
            s.save(job, stage)
        return stage

    @command
    def release_stage(self, stage_id: UUID, *, by: Principal = Actor.API) -> Stage:
        """A user's PUT PENDING on a stage; a PENDING stage is a no-op."""
        with self._write() as s:
            stage = s.stage(stage_id)
            previous = self._normal_before(s, s.job(stage.job_id), stage.order)
            stage.release(previous, self.clock(), by, shift_on_release(s, stage.id))
            s.save(stage)
        return stage

    @command
    def replace_stage_user_metadata(
        self, stage_id: UUID, user_metadata: dict[str, Any], *, by: Principal = Actor.API
    ) -> Stage:
        with self._write() as s:
            stage = s.stage(stage_id)
            stage.replace_user_metadata(user_metadata, self.clock(), by)
            s.save(stage)
        return stage

    # -- tasks ----------------------------------------------------------------------------

    @command
    def add_tasks(
        self, stage_id: UUID, new: Sequence[NewTask], *, by: Principal = Actor.API
    ) -> list[Task]:
        if not new:
            raise InvalidRequest("request/body must NOT have fewer than 1 items")
        now = self.clock()
        with self._write() as s:
            stage = s.stage(stage_id)
            stage.check_tasks_can_be_added()
            job = s.job(stage.job_id)
            if not stage.completion:  # completion stages take tasks until the job ends
                job.check_not_finishing()
            policy = self.retry_policy_of(stage, job)
            turns = Turns(s)
            tasks = [
                Task.create(
                    stage_id=stage.id,
                    job_id=stage.job_id,
                    stage_type=stage.type,
                    data=n.data,
                    user_metadata=n.user_metadata,
                    max_attempts=n.max_attempts,
                    traceparent=n.traceparent,
                    tracestate=n.tracestate,
                    now=now,
                    actor=by,
                    not_before=latest(n.not_before, stage.not_before, job.not_before),
                    retry_policy=policy,
                    turn=turns.take(stage.id),
                )
                for n in new
            ]
            s.save(*tasks)
        return tasks

    @command
    def replace_task_user_metadata(
        self, task_id: UUID, user_metadata: dict[str, Any], *, by: Principal = Actor.API
    ) -> Task:
        with self._write() as s:
            task = s.task(task_id)
            task.replace_user_metadata(user_metadata, self.clock(), by)
            s.save(task)
        return task
