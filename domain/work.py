"""Worker-facing commands: dequeue, report, heartbeat, hand back, log, and the lease sweeper."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from jobnik.domain.commands import command, utcnow
from jobnik.domain.delays import RetryPolicy
from jobnik.domain.errors import (
    AttemptRequired,
    DelegationRefused,
    Forbidden,
    StaleAttempt,
    TaskNotFound,
    TaskStatusUpdateFailed,
)
from jobnik.domain.jobs import Job
from jobnik.domain.ports import Session, Store
from jobnik.domain.principals import Actor, Principal, Role
from jobnik.domain.stages import Stage
from jobnik.domain.statuses import (
    DEFAULT_LEASE_SECONDS,
    DEFAULT_MAX_BATCH,
    DEFAULT_MAX_CHILD_JOBS,
    JobStatus,
    StageStatus,
    TaskStatus,
)
from jobnik.domain.tasks import Task
from jobnik.domain.turns import Turns, shift_on_release

NO_TRACE = "00-00000000000000000000000000000000-0000000000000000-00"


@dataclass(frozen=True)
class Report:
    """A task's outcome, from the attempt that ran it: one report, or one item of a batch."""

    task_id: UUID
    attempt: int | None  # None: a report without attempt (Jobnik's SDK), fenced by version
    status: TaskStatus
    reason: str | None = None
    fatal: bool = False
    result: dict[str, Any] | None = None

    def first_read(self, by: Principal) -> FirstRead | None:
        """What fences this report by `by` when it names no attempt (Jobnik's SDK sends none):
        the task's version at its first read (None: its attempt fences it). A worker token
        must name its attempt (AttemptRequired)."""
        if self.attempt is not None:
            return None
        if by.role is Role.WORKER:
            raise AttemptRequired
        return FirstRead()


@dataclass
class FirstRead:
    """What fences a report without attempt (Jobnik's SDK sends none): the task's version when
    the report's first transaction read it. Run again (after a conflict, or after a group that
    failed once it reached the report), the report is refused if the task changed since, as
    Jobnik's manager refuses an update whose row changed under it."""

    version: int | None = None

    def check(self, version: int) -> None:
        """Note `version` on the first read; TaskStatusUpdateFailed on a later one that differs."""
        if self.version is None:
            self.version = version
        elif version != self.version:
            raise TaskStatusUpdateFailed


@dataclass(frozen=True)
class Reporting:
    """A report with who sends it: `seen`, for a report without attempt, what fences it
    (`FirstRead`); `trace`, the trace id its events carry when its principal names none."""

    report: Report
    by: Principal
    seen: FirstRead | None = None
    trace: str | None = None


@dataclass(frozen=True)
class Beat:
    """A heartbeat's answer: the task (with its new lease) and whether its job was aborted."""

    task: Task
    cancelled: bool


class WorkCommands:
    """Commands workers call, fenced by attempt number when the client sends one, and by the
    token that opened the attempt when access control is on; a worker token works only on its
    stage types."""

    def __init__(
        self,
        store: Store,
        clock: Callable[[], datetime] = utcnow,
        *,
        lease_seconds: int = DEFAULT_LEASE_SECONDS,
        max_batch: int = DEFAULT_MAX_BATCH,
        max_child_jobs: int = DEFAULT_MAX_CHILD_JOBS,
        retry_policy: RetryPolicy | None = None,
    ) -> None:
        self.store = store
        self.clock = clock
        self.lease_seconds = lease_seconds
        self.max_batch = max_batch  # the most tasks one batched command takes
        self.max_child_jobs = max_child_jobs  # the most child jobs one task creates
        self.retry_policy = retry_policy  # the server's default (None: retry at once)

    def _write(self) -> AbstractContextManager[Session]:
        return self.store.session(write=True)

    @command
    def dequeue(
        self, stage_type: str, lease_seconds: int | None = None, *, by: Principal = Actor.WORKER
    ) -> Task:
        """Claim the next eligible task of `stage_type`; TaskNotFound when there is none."""
        by.check_stage_type(stage_type)
        now = self.clock()
        with self._write() as s:  # (committed also when it finds none: what a claim let through)
            task = s.claim(stage_type, now)
            if task is not None:
                stage, job = s.stage(task.stage_id), s.job(task.job_id)
                task.dequeue(now, by, lease_seconds or self.lease_seconds)
                if stage.start(now, Actor.SYSTEM):
                    job.start(now, Actor.SYSTEM)
                s.save(task, stage, job)
        if task is None:
            raise TaskNotFound
        return task

    def report_task(
        self,
        task_id: UUID,
        status: TaskStatus,
        *,
        attempt: int | None = None,
        reason: str | None = None,
        fatal: bool = False,
        result: dict[str, Any] | None = None,
        by: Principal = Actor.WORKER,
    ) -> Task:
        """A worker's COMPLETED (with its `result`), FAILED or DELEGATED, with every cascade
        (with delegation and failure patterns).

        With `attempt`, a report from an attempt that is no longer current is recorded and
        refused (StaleAttempt, 409). Without it (Jobnik's SDK), the task must not have changed
        since this request first read it (`FirstRead`: TaskStatusUpdateFailed, 409). A worker
        token must name its attempt (AttemptRequired).
        """
        return self.report(Report(task_id, attempt, status, reason, fatal, result), by=by)

    def report(self, report: Report, *, by: Principal = Actor.WORKER) -> Task:
        """`report_task` of a `Report`."""
        return self._report_one(report, report.first_read(by), by=by)

    @command
    def _report_one(self, report: Report, seen: FirstRead | None, *, by: Principal) -> Task:
        """`report`'s transaction (run again on a conflict)."""
        now = self.clock()
        with self._write() as s:
            task = s.task(report.task_id)
            by.check_stage_type(task.stage_type)
            if seen is not None:
                seen.check(task.version)
            refused = self._fenced_report(s, task, report, now, by)
        if refused is not None:
            raise refused
        return task

    def _fenced_report(
        self,
        s: Session,
        task: Task,
        report: Report,
        now: datetime,
        by: Principal,
        later: list[Task] | None = None,
        turns: Turns | None = None,
    ) -> StaleAttempt | Forbidden | None:
        """Make `report` on `task` if `by` holds its attempt; else record the refusal and
        return the error to raise after saving. `later`, `turns`: as `_report`'s."""
        refused: StaleAttempt | Forbidden | None = None
        attempt = report.attempt
        if task.held_by_another(by):
            refused = task.refuse_another(attempt, f"report {report.status}", now, by)
        elif attempt is not None and not task.holds(attempt):
            refused = task.refuse(attempt, f"report {report.status}", now, by)
        else:
            self._report(s, task, report, now, by, later, turns)
            return None
        if later is None:
            s.save(task)
        else:
            later.append(task)
        return refused

    def _report(
        self,
        s: Session,
        task: Task,
        report: Report,
        now: datetime,
        by: Principal,
        later: list[Task] | None = None,
        turns: Turns | None = None,
    ) -> None:
        """The outcome, saved, and its cascade. With `later` (a batch), a COMPLETED, FAILED or
        refused outcome joins `later` instead: saved with the batch's others, then cascaded;
        `turns`: the batch's, so that two tasks of a stage queued again take two turns."""
        turns = turns if turns is not None else Turns(s)
        stage, job = s.stage(task.stage_id), s.job(task.job_id)
        status, result = report.status, report.result
        if job.status == JobStatus.ABORTED and task.status == TaskStatus.IN_PROGRESS:
            task.abort(now, by, "late report after the job was aborted", status)
            s.save(task)
            return
        if status == TaskStatus.DELEGATED:
            self._delegate(s, task, now, by, turns)
            return
        failure = stage.failure_in(result) if status == TaskStatus.COMPLETED else None
        # (a retry is queued again: its turn read only then)
        turn = turns.take(task.stage_id) if failure or status != TaskStatus.COMPLETED else 0
        if failure is not None:  # a failure pattern matched the result
            task.fail(now, Actor.SYSTEM, failure, turn=turn)
        else:
            task.report(
                status, now, by, report.reason, fatal=report.fatal, result=result, turn=turn
            )
        if task.status == TaskStatus.FAILED:
            s.hold_queue(job.id)  # the stage and the job may fail: their tasks leave the queue
        if later is not None:
            later.append(task)
            return
        s.save(task)
        self._cascade(s, task, stage, job, now)

    def _delegate(self, s: Session, task: Task, now: datetime, by: Principal, turns: Turns) -> None:
        """The handler created child jobs: the task waits for them, or goes back to the queue
        at once when they have all ended already."""
        children = s.children_counts(task.id)
        if not children.total:
            raise DelegationRefused(
                f"task {task.id} has no child jobs: create them with parentTaskId first"
            )
        open_children = children.running
        task.delegate(open_children, now, by)
        if open_children == 0:
            task.redispatch(
                now,
                Actor.SYSTEM,
                "every child job had ended already",
                turn=turns.take(task.stage_id),
            )
        s.save(task)

    def _cascade(self, s: Session, task: Task, stage: Stage, job: Job, now: datetime) -> None:
        """After a task's outcome: stage and job completion or failure."""
        if task.status == TaskStatus.COMPLETED:
            if stage.status != StageStatus.IN_PROGRESS or not s.all_completed(stage.id):
                return
            stage.complete(now, Actor.SYSTEM)
            s.save(stage)
            self._stage_completed(s, stage, job, now)
        elif task.status == TaskStatus.FAILED and stage.fail(task.id, now, Actor.SYSTEM):
            job.stage_failed(stage.id, now, Actor.SYSTEM)
            s.save(stage, job)
            self._job_ended(s, job, now)

    def _stage_completed(self, s: Session, stage: Stage, job: Job, now: datetime) -> None:
        """Release the next normal stage, count the stage on the job, and move its phase."""
        following = None if stage.completion else self._normal_after(s, job, stage.order)
        if following is not None:
            following.release_after_previous(now, Actor.SYSTEM, shift_on_release(s, following.id))
        phase = job.stage_completed(stage.id, now, Actor.SYSTEM)
        s.save(*([following] if following else []), job)
        if stage.completion and phase is None:
            phase = "completing"  # the next completion stage's turn
        self._after_phase(s, job, phase, now)

    def _after_phase(self, s: Session, job: Job, phase: str | None, now: datetime) -> None:
        """COMPLETING runs the first completion stage not completed (one at a time, in order):
        releases it if held, or lets it run if a rerun reopened it running; an empty one
        completes at once. A job that ended may let its parent task be re-dispatched."""
        if phase == "completing":
            for stage in s.stages_of(job.id):
                if not stage.completion or stage.status == StageStatus.COMPLETED:
                    continue
                # (only a held one)
                stage.release_for_completion(now, Actor.SYSTEM, shift_on_release(s, stage.id))
                if stage.status != StageStatus.PENDING or s.summary(stage.id).total:
                    s.save(stage)
                    return
                stage.complete(now, Actor.SYSTEM, "no completion tasks")
                phase = job.stage_completed(stage.id, now, Actor.SYSTEM)
                s.save(stage, job)
        if phase == "completed":
            self._job_ended(s, job, now)

    def _job_ended(self, s: Session, job: Job, now: datetime) -> None:
        """A child job ended: its delegated parent task hears of it, and is re-dispatched
        when it was the last open child (the parent task's re-dispatch)."""
        if not job.is_final or job.parent_task_id is None:
            return
        try:
            parent = s.task(job.parent_task_id)
        except TaskNotFound:  # the parent's job was deleted
            return
        if parent.status != TaskStatus.DELEGATED:
            return
        open_children = s.children_counts(parent.id).running
        parent.child_ended(job.id, job.status, open_children, now)
        if open_children == 0:
            parent.redispatch(
                now, Actor.SYSTEM, "every child job ended", turn=Turns(s).take(parent.stage_id)
            )
        s.save(parent)

    @staticmethod
    def _normal_before(s: Session, job: Job, order: int) -> Stage | None:
        """The normal stage before `order` (completion stages run apart, after the rest)."""
        if not job.completion_stages:
            return s.stage_at(job.id, order - 1) if order > 1 else None
        before = [st for st in s.stages_of(job.id) if st.order < order and not st.completion]
        return before[-1] if before else None

    @staticmethod
    def _normal_after(s: Session, job: Job, order: int) -> Stage | None:
        if not job.completion_stages:
            return s.stage_at(job.id, order + 1)
        after = [st for st in s.stages_of(job.id) if st.order > order and not st.completion]
        return after[0] if after else None

    @command
    def heartbeat(self, task_id: UUID, attempt: int, *, by: Principal = Actor.WORKER) -> Beat:
        """Extend the current attempt's lease; says whether the job was aborted meanwhile."""
        now = self.clock()
        with self._write() as s:
            task = s.task(task_id)
            by.check_stage_type(task.stage_type)
            refused: StaleAttempt | Forbidden | None = None
            cancelled = False
            if task.held_by_another(by):
                refused = task.refuse_another(attempt, "heartbeat", now, by)
            elif not task.holds(attempt):
                refused = task.refuse(attempt, "heartbeat", now, by)
            else:
                cancelled = s.job(task.job_id).status == JobStatus.ABORTED
                task.extend_lease(now, by)
            s.save(task)
        if refused is not None:
            raise refused
        return Beat(task, cancelled)

    @command
    def give_back(
        self, task_id: UUID, attempt: int, reason: str, *, by: Principal = Actor.WORKER
    ) -> Task:
        """The current attempt returns the task unfinished: queued again, no attempt spent."""
        now = self.clock()
        with self._write() as s:
            task = s.task(task_id)
            by.check_stage_type(task.stage_type)
            refused: StaleAttempt | Forbidden | None = None
            if task.held_by_another(by):
                refused = task.refuse_another(attempt, "give back", now, by)
            elif not task.holds(attempt):
                refused = task.refuse(attempt, "give back", now, by)
            elif s.job(task.job_id).status == JobStatus.ABORTED:
                task.abort(now, by, f"handed back after the job was aborted: {reason}")
            else:
                task.give_back(now, by, reason, turn=Turns(s).take(task.stage_id))
            s.save(task)
        if refused is not None:
            raise refused
        return task

    @command
    def append_log(
        self,
        task_id: UUID,
        lines: Sequence[str],
        attempt: int | None = None,
        *,
        by: Principal = Actor.WORKER,
    ) -> Task:
        """Append lines to the log of the task's latest attempt (`attempt`, when given, must be
        it), open or ended; each line records its attempt and its actor. Lines naming another
        attempt are recorded and refused (StaleAttempt, 409); with access control on, so are
        lines from a token other than the one that opened the attempt (Forbidden, 403)."""
        now = self.clock()
        with self._write() as s:
            task = s.task(task_id)
            by.check_stage_type(task.stage_type)
            refused: StaleAttempt | Forbidden | None = None
            if task.opened_by_another(by):
                refused = task.refuse_another(attempt, "log", now, by)
            elif attempt is not None and attempt != task.attempt:
                refused = task.refuse(attempt, "log", now, by)
            else:
                task.append_log(lines, now, by, attempt)
            s.save(task)
        if refused is not None:
            raise refused
        return task
