"""The server's own take-backs: expired leases and deadlines (the sweeper), and delegations left
waiting."""

from __future__ import annotations

from datetime import datetime, timedelta

from jobnik.domain.commands import command
from jobnik.domain.jobs import Job
from jobnik.domain.ports import Session
from jobnik.domain.principals import Actor
from jobnik.domain.statuses import DEADLINE, EXPIRED, TIMEOUT, JobStatus
from jobnik.domain.tasks import Task
from jobnik.domain.turns import Turns
from jobnik.domain.work import WorkCommands


class SweepCommands(WorkCommands):
    """Commands the server runs on its own: no worker asks for them."""

    @command
    def redispatch_stale(self, stale_after: timedelta, limit: int = 1000) -> list[Task]:
        """The safety net: delegated tasks whose child jobs have all ended but that were
        not re-dispatched within `stale_after` go back to the queue. Normally finds none."""
        now = self.clock()
        with self._write() as s:
            stale = s.stale_delegations(now - stale_after, limit)
            turns = Turns(s)
            for task in stale:
                task.redispatch(
                    now,
                    Actor.SYSTEM,
                    "safety net: every child job had ended, not re-dispatched",
                    turn=turns.take(task.stage_id),
                )
            s.save(*stale)
        return stale

    @command
    def expire_deadlines(self, limit: int = 100) -> int:
        """Fail the unfinished jobs whose deadline, or one of whose stages' deadline, passed
        (cause "deadline", by `system`), cascading as an abort does: their other unfinished
        stages, queued tasks and child jobs are aborted (running attempts finish, as in a
        failed job). Returns how many deadlines it acted on; looks before it writes."""
        now = self.clock()
        with self.store.session(write=False) as r:
            seen = r.missed_deadlines(now, limit)
        if not seen:
            return 0
        with self._write() as s:
            s.hold_queue(*{job_id for job_id, _ in seen})
            missed = s.missed_deadlines(now, limit)
            for job_id, stage_id in missed:
                job = s.job(job_id)
                stage = None if stage_id is None else s.stage(stage_id)
                if stage is not None and job.is_final:  # a stage left waiting in an ended job
                    stage.abort(now, Actor.SYSTEM, "its deadline passed after its job ended")
                    s.save(stage)
                    continue
                if stage is not None:
                    stage.time_ran_out(now, DEADLINE, "its deadline passed")
                    s.save(stage)
                passed = "its deadline passed" if stage_id is None else "a stage's deadline passed"
                job.time_ran_out(stage_id, now, DEADLINE, passed)
                self._abort_contents(s, job, now, "its job's deadline passed")
                self._job_ended(s, job, now)
        return len(missed)

    @command
    def expire_queued(self, limit: int = 200) -> int:
        """Fail the queued tasks whose schedule-to-start limit ran out before a worker dequeued
        them (cause "expired", by `system`, no retry); each fails its stage and job as a
        deadline does, from whatever open status they are in. The job's other queued tasks
        stay queued, closed, as after any failure (a rerun runs them). Returns how many tasks
        expired; looks before it writes."""
        now = self.clock()
        with self.store.session(write=False) as r:
            seen = r.expired_queued(now, limit)
        if not seen:
            return 0
        with self._write() as s:
            s.hold_queue(*{t.job_id for t in seen})
            expired = [t for t in s.expired_queued(now, limit) if t.expire(now)]
            for task in expired:
                s.save(task)
                stage, job = s.stage(task.stage_id), s.job(task.job_id)
                reason = "a task expired before it started"
                if stage.time_ran_out(now, EXPIRED, reason, task.id):
                    job.time_ran_out(stage.id, now, EXPIRED, reason)
                    s.save(stage, job)
                    self._job_ended(s, job, now)
        return len(expired)

    def _abort_contents(
        self, s: Session, job: Job, now: datetime, reason: str = "job aborted"
    ) -> None:
        """Save the ended `job` with its unfinished stages, its waiting tasks and, depth
        first, its unfinished child jobs (their parent tasks will never decide), aborted for
        `reason`."""
        stages = s.stages_of(job.id)
        for stage in stages:
            stage.abort(now, Actor.SYSTEM, reason)
        tasks = s.queued_tasks(job.id)
        for task in tasks:
            task.abort(now, Actor.SYSTEM, reason)
        s.save(job, *stages, *tasks)
        for child in s.child_jobs(job.id):
            child.abort(now, Actor.SYSTEM, "parent job aborted")
            self._abort_contents(s, child, now)

    @command
    def sweep(self, limit: int = 200) -> int:
        """Take back tasks whose lease expired: RETRIED while attempts remain, else FAILED.

        Counted as timeouts (cause "timeout"), not as handler failures. Tasks of aborted jobs
        are aborted instead. Returns how many tasks it took back. It looks before it writes: a
        sweep that finds nothing takes no writer lock, and one that will fail a job holds the
        job's queue rows first (`Session.hold_queue`).
        """
        now = self.clock()
        with self.store.session(write=False) as r:  # a look first, without the writer lock
            seen = r.expired_leases(now, limit)
        if not seen:
            return 0
        with self._write() as s:
            # (the jobs whose last attempt timed out: they may fail)
            s.hold_queue(*{t.job_id for t in seen if t.attempts + 1 >= t.max_attempts})
            expired = s.expired_leases(now, limit)
            turns = Turns(s)
            for task in expired:
                stage, job = s.stage(task.stage_id), s.job(task.job_id)
                if job.status == JobStatus.ABORTED:
                    task.abort(now, Actor.SYSTEM, "lease expired after the job was aborted")
                    s.save(task)
                    continue
                turn = turns.take(task.stage_id)
                task.fail(now, Actor.SYSTEM, "lease expired", cause=TIMEOUT, turn=turn)
                s.save(task)
                self._cascade(s, task, stage, job, now)
        return len(expired)
