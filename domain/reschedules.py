"""Delayed work: bring a queued task, or a stage's or job's queued tasks, forward or postpone
them.

A task is not dequeued before its not-before time (`Task.not_before`): the one it was created
with (the latest of its own, its stage's and its job's), or the due time its retry policy gave a
retry. Changing it is an event naming who and why (`TaskRescheduled`, `StageRescheduled`,
`JobRescheduled`).
"""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from jobnik.domain.commands import command
from jobnik.domain.delays import RetryPolicy
from jobnik.domain.jobs import Job
from jobnik.domain.principals import Actor, Principal
from jobnik.domain.stages import Stage
from jobnik.domain.statuses import TaskStatus
from jobnik.domain.tasks import Task
from jobnik.domain.work import WorkCommands

QUEUED = (TaskStatus.PENDING, TaskStatus.RETRIED)


class RescheduleCommands(WorkCommands):
    """Not-before times and retry policies."""

    def retry_policy_of(self, stage: Stage, job: Job) -> RetryPolicy | None:
        """The retry policy the stage's new tasks get: the stage's, else its job's, else the
        server's (None: retry at once)."""
        own = RetryPolicy.from_dict(stage.retry_policy) or RetryPolicy.from_dict(job.retry_policy)
        return own or self.retry_policy

    @command
    def reschedule_task(
        self,
        task_id: UUID,
        not_before: datetime | None,
        *,
        reason: str,
        by: Principal = Actor.API,
    ) -> Task:
        """A queued task's new not-before time (None: at once); TaskNotQueued otherwise."""
        now = self.clock()
        with self._write() as s:
            task = s.task(task_id)
            if task.reschedule(not_before, now, by, reason):
                s.hold_queue(task.job_id)  # a dequeue under way may hold its queue row
                s.save(task)
        return task

    @command
    def reschedule_job(
        self,
        job_id: UUID,
        not_before: datetime | None,
        *,
        reason: str,
        by: Principal = Actor.API,
    ) -> Job:
        """The job's new not-before time: its queued tasks (PENDING, RETRIED) get it, and so do
        tasks added to it later. JobInFiniteState once the job ended."""
        now = self.clock()
        with self._write() as s:
            job = s.job(job_id)
            job.reschedule(not_before, now, by, reason)
            s.hold_queue(job.id)
            queued = [t for t in s.queued_tasks(job.id) if t.status in QUEUED]
            s.save(job, *self._moved(queued, not_before, now, by, reason))
        return job

    @staticmethod
    def _moved(
        tasks: list[Task], not_before: datetime | None, now: datetime, by: Principal, reason: str
    ) -> list[Task]:
        """The tasks rescheduled to `not_before` (those that had another time)."""
        return [t for t in tasks if t.reschedule(not_before, now, by, reason)]

    @command
    def reschedule_stage(
        self,
        stage_id: UUID,
        not_before: datetime | None,
        *,
        reason: str,
        by: Principal = Actor.API,
    ) -> Stage:
        """The stage's new not-before time: its queued tasks (PENDING, RETRIED) get it, and so
        do tasks added to it later. StageInFiniteState once the stage ended."""
        now = self.clock()
        with self._write() as s:
            stage = s.stage(stage_id)
            stage.reschedule(not_before, now, by, reason)
            s.hold_queue(stage.job_id)
            moved = self._moved(s.tasks_in(stage.id, QUEUED), not_before, now, by, reason)
            s.save(stage, *moved)
        return stage
