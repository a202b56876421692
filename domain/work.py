"""Worker-facing commands: dequeue, report, heartbeat, hand back, log, and the lease sweeper."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import UTC, datetime
from uuid import UUID

from jobnik.domain.errors import StaleAttempt, TaskNotFound, TaskStatusUpdateFailed
from jobnik.domain.jobs import Job
from jobnik.domain.ports import Session, Store
from jobnik.domain.stages import Stage
from jobnik.domain.statuses import Actor, JobStatus, StageStatus, TaskStatus
from jobnik.domain.tasks import DEFAULT_LEASE_SECONDS, TIMEOUT, Task

NO_TRACE = "00-00000000000000000000000000000000-0000000000000000-00"


def utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class Beat:
    """A heartbeat's answer: the task (with its new lease) and whether its job was aborted."""

    task: Task
    cancelled: bool


class WorkCommands:
    """Commands workers call, fenced by attempt number when the client sends one."""

    def __init__(
        self,
        store: Store,
        clock: Callable[[], datetime] = utcnow,
        *,
        lease_seconds: int = DEFAULT_LEASE_SECONDS,
    ) -> None:
        self.store = store
        self.clock = clock
        self.lease_seconds = lease_seconds

    def _write(self) -> AbstractContextManager[Session]:
        return self.store.session(write=True)

    def dequeue(self, stage_type: str, lease_seconds: int | None = None) -> Task:
        """Claim the next eligible task of `stage_type`; TaskNotFound when there is none."""
        now = self.clock()
        with self._write() as s:
            task = s.claim(stage_type)
            if task is None:
                raise TaskNotFound
            stage, job = s.stage(task.stage_id), s.job(task.job_id)
            task.dequeue(now, Actor.WORKER, lease_seconds or self.lease_seconds)
            if stage.start(now, Actor.SYSTEM):
                job.start(now, Actor.SYSTEM)
            s.save(task, stage, job)
        return task

    def report_task(
        self,
        task_id: UUID,
        status: TaskStatus,
        *,
        attempt: int | None = None,
        reason: str | None = None,
        fatal: bool = False,
    ) -> Task:
        """A worker's COMPLETED or FAILED, with every cascade (rules §5, §7).

        With `attempt`, a report from an attempt that is no longer current is recorded and
        refused (StaleAttempt, 409). Without it (Jobnik's SDK), the task must not have changed
        since this request first read it (TaskStatusUpdateFailed, 409; rules §4.3).
        """
        seen = None
        if attempt is None:
            with self.store.session(write=False) as r:
                seen = r.task(task_id).version
        now = self.clock()
        refused: StaleAttempt | None = None
        with self._write() as s:
            task = s.task(task_id)
            if seen is not None and task.version != seen:
                raise TaskStatusUpdateFailed
            if attempt is not None and not task.holds(attempt):
                refused = task.refuse(attempt, f"report {status}", now, Actor.WORKER)
                s.save(task)
            else:
                self._report(s, task, status, now, reason, fatal)
        if refused is not None:
            raise refused
        return task

    def _report(
        self,
        s: Session,
        task: Task,
        status: TaskStatus,
        now: datetime,
        reason: str | None,
        fatal: bool,
    ) -> None:
        stage, job = s.stage(task.stage_id), s.job(task.job_id)
        if job.status == JobStatus.ABORTED and task.status == TaskStatus.IN_PROGRESS:
            task.abort(now, Actor.WORKER, "late report after the job was aborted", status)
            s.save(task)
            return
        task.report(status, now, Actor.WORKER, reason, fatal=fatal)
        s.save(task)
        self._cascade(s, task, stage, job, now)

    def _cascade(self, s: Session, task: Task, stage: Stage, job: Job, now: datetime) -> None:
        """After a task's outcome: stage and job completion or failure (rules §5 R5-R8)."""
        if task.status == TaskStatus.COMPLETED:
            summary = s.summary(stage.id)
            if summary.completed != summary.total or stage.status != StageStatus.IN_PROGRESS:
                return
            stage.complete(now, Actor.SYSTEM)
            following = s.stage_at(job.id, stage.order + 1)
            if following is not None:
                following.release_after_previous(now, Actor.SYSTEM)
            job.stage_completed(stage.id, now, Actor.SYSTEM)
            s.save(stage, *([following] if following else []), job)
        elif task.status == TaskStatus.FAILED and stage.fail(task.id, now, Actor.SYSTEM):
            job.stage_failed(stage.id, now, Actor.SYSTEM)
            s.save(stage, job)

    def heartbeat(self, task_id: UUID, attempt: int) -> Beat:
        """Extend the current attempt's lease; says whether the job was aborted meanwhile."""
        now = self.clock()
        with self._write() as s:
            task = s.task(task_id)
            if not task.holds(attempt):
                refused = task.refuse(attempt, "heartbeat", now, Actor.WORKER)
                s.save(task)
            else:
                refused = None
                cancelled = s.job(task.job_id).status == JobStatus.ABORTED
                task.extend_lease(now, Actor.WORKER)
                s.save(task)
        if refused is not None:
            raise refused
        return Beat(task, cancelled)

    def give_back(self, task_id: UUID, attempt: int, reason: str) -> Task:
        """The current attempt returns the task unfinished: queued again, no attempt spent."""
        now = self.clock()
        with self._write() as s:
            task = s.task(task_id)
            if not task.holds(attempt):
                refused: StaleAttempt | None = task.refuse(attempt, "give back", now, Actor.WORKER)
            else:
                refused = None
                if s.job(task.job_id).status == JobStatus.ABORTED:
                    task.abort(
                        now, Actor.WORKER, f"handed back after the job was aborted: {reason}"
                    )
                else:
                    task.give_back(now, Actor.WORKER, reason)
            s.save(task)
        if refused is not None:
            raise refused
        return task

    def append_log(self, task_id: UUID, lines: Sequence[str], attempt: int | None = None) -> Task:
        """Append lines to the task's log; any attempt may log (each line records its attempt)."""
        with self._write() as s:
            task = s.task(task_id)
            task.append_log(lines, self.clock(), Actor.WORKER, attempt)
            s.save(task)
        return task

    def sweep(self, limit: int = 200) -> int:
        """Take back tasks whose lease expired: RETRIED while attempts remain, else FAILED.

        Counted as timeouts (cause "timeout"), not as handler failures. Tasks of aborted jobs
        are aborted instead. Returns how many tasks it took back.
        """
        now = self.clock()
        with self._write() as s:
            expired = s.expired_leases(now, limit)
            for task in expired:
                stage, job = s.stage(task.stage_id), s.job(task.job_id)
                if job.status == JobStatus.ABORTED:
                    task.abort(now, Actor.SYSTEM, "lease expired after the job was aborted")
                    s.save(task)
                    continue
                task.fail(now, Actor.SYSTEM, "lease expired", cause=TIMEOUT)
                s.save(task)
                self._cascade(s, task, stage, job, now)
        return len(expired)
