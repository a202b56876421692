"""The Job aggregate: a whole workflow; owns the ordered list of its stages."""

from __future__ import annotations

from dataclasses import field
from datetime import datetime
from typing import TYPE_CHECKING, Any
from uuid import UUID, uuid4

from jobnik.domain.base import Entity, cause
from jobnik.domain.delays import RetryPolicy, check_deadline, check_schedule_to_start
from jobnik.domain.errors import (
    IllegalJobTransition,
    JobFinishing,
    JobInFiniteState,
    JobNotEnded,
    JobNotInFiniteState,
    JobNotRerunnable,
)
from jobnik.domain.limits import check_concurrency_key
from jobnik.domain.principals import Actor, Principal
from jobnik.domain.statuses import (
    JOB_FINAL,
    JOB_RERUNNABLE,
    JOB_TRANSITIONS,
    JobMode,
    Priority,
)
from jobnik.domain.statuses import JobStatus as S
from jobnik.domain.turns import check_fairness_key, check_fairness_weight


class Job(Entity):
    """A job: status, priority and metadata, and how many of its stages exist and completed."""

    if TYPE_CHECKING:  # set by the events' apply(); no annotations at runtime, so the
        # library does not turn them into __init__ arguments
        name: str
        data: dict[str, Any]
        priority: str
        user_metadata: dict[str, Any]
        traceparent: str
        tracestate: str | None
        status: str
        percentage: int
        started: bool
        stage_count: int
        completed_stages: int
        start_time: datetime | None
        end_time: datetime | None
        deleted: bool
        mode: str
        parent_task_id: UUID | None
        parent_job_id: UUID | None
        completion_stages: int
        finishing: bool
        completing: bool
        finish_time: datetime | None
        not_before: datetime | None
        retry_policy: dict[str, float] | None
        deadline: datetime | None
        schedule_to_start_seconds: int | None
        fairness_key: str | None
        fairness_weight: int | None
        concurrency_key: str | None

    class JobCreated(Entity.Created):
        """`mode`: runOnce or standard; `parent_task_id`: the delegating task."""

        class_version = 2

        name: str
        data: dict[str, Any]
        priority: str
        user_metadata: dict[str, Any]
        traceparent: str
        tracestate: str | None
        mode: str
        parent_task_id: UUID | None
        parent_job_id: UUID | None
        # Its tasks' not-before time and its stages' default retry policy; keyword fields
        # with defaults: events stored without them load with None.
        not_before: datetime | None = field(default=None, kw_only=True)
        retry_policy: dict[str, float] | None = field(default=None, kw_only=True)
        deadline: datetime | None = field(default=None, kw_only=True)  # fails unfinished then
        # Its stages' default schedule-to-start limit, in seconds (None: none).
        schedule_to_start_seconds: int | None = field(default=None, kw_only=True)
        # Its tasks take turns with the other jobs of this key as one (domain/turns.py).
        fairness_key: str | None = field(default=None, kw_only=True)
        fairness_weight: int | None = field(default=None, kw_only=True)  # tasks per turn (1)
        # Its tasks count against this key's per-key concurrency limit at each stage type
        # (domain/limits.py), as the other jobs' of the key do; None: its own.
        concurrency_key: str | None = field(default=None, kw_only=True)

        @staticmethod
        def upcast_v1_v2(state: dict[str, Any]) -> None:
            """v1 (before modes and delegation): a runOnce job with no parent."""
            state.update(mode=str(JobMode.RUN_ONCE), parent_task_id=None, parent_job_id=None)

        def apply(self, job: Job) -> None:
            job.not_before, job.retry_policy = self.not_before, self.retry_policy
            job.deadline = self.deadline
            job.schedule_to_start_seconds = self.schedule_to_start_seconds
            job.fairness_key, job.concurrency_key = self.fairness_key, self.concurrency_key
            job.fairness_weight = self.fairness_weight
            job.name, job.data, job.priority = self.name, self.data, self.priority
            job.user_metadata = self.user_metadata
            job.traceparent, job.tracestate = self.traceparent, self.tracestate
            job.status, job.percentage, job.started = S.PENDING, 0, False
            job.stage_count = job.completed_stages = 0
            job.start_time = job.end_time = None
            job.deleted = False
            job.mode, job.parent_task_id = self.mode, self.parent_task_id
            job.parent_job_id = self.parent_job_id
            job.completion_stages, job.finishing, job.completing = 0, False, False
            job.finish_time = None

    class StageAppended(Entity.Event):
        """A stage joined the job (its order is the job's stage count)."""

        class_version = 2

        stage_id: UUID
        order: int
        completion: bool

        @staticmethod
        def upcast_v1_v2(state: dict[str, Any]) -> None:
            """v1 (before completion stages): a normal stage."""
            state["completion"] = False

        def apply(self, job: Job) -> None:
            job.stage_count = self.order
            job.completion_stages += 1 if self.completion else 0

    class JobFinishing(Entity.Event):
        """Finish: nothing new is accepted; the job completes when its work is done."""

        def apply(self, job: Job) -> None:
            job.finishing, job.finish_time = True, self.timestamp

    class JobCompleting(Entity.Event):
        """Every normal stage completed: the completion stages run (COMPLETING)."""

        def apply(self, job: Job) -> None:
            job.completing = True

    class JobStarted(Entity.Event):
        def apply(self, job: Job) -> None:
            job.status, job.started, job.start_time = S.IN_PROGRESS, True, self.timestamp

    class JobPaused(Entity.Event):
        previous: str

        def apply(self, job: Job) -> None:
            job.status = S.PAUSED

    class JobResumed(Entity.Event):
        status: str

        def apply(self, job: Job) -> None:
            job.status = self.status

    class JobProgressed(Entity.Event):
        """A stage of the job completed; the job's percentage moves."""

        stage_id: UUID
        completed_stages: int
        percentage: int

        def apply(self, job: Job) -> None:
            job.completed_stages, job.percentage = self.completed_stages, self.percentage

    class JobCompleted(Entity.Event):
        def apply(self, job: Job) -> None:
            job.status, job.end_time = S.COMPLETED, self.timestamp

    class JobFailed(Entity.Event):
        """A stage failed (`stage_id`), or the job's deadline passed (`cause` "deadline",
        `stage_id` None)."""

        stage_id: UUID | None
        cause: str | None = field(default=None, kw_only=True)

        def apply(self, job: Job) -> None:
            job.status, job.end_time = S.FAILED, self.timestamp

    class JobAborted(Entity.Event):
        previous: str

        def apply(self, job: Job) -> None:
            job.status, job.end_time = S.ABORTED, self.timestamp

    class JobReopened(Entity.Event):
        """A rerun gave the ended job work again, from `from_stage_id` (None: none reopened)."""

        previous: str
        status: str
        from_stage_id: UUID | None
        completed_stages: int
        percentage: int
        completing: bool

        def apply(self, job: Job) -> None:
            job.status, job.end_time = self.status, None
            job.completed_stages, job.percentage = self.completed_stages, self.percentage
            job.completing, job.deadline = self.completing, None

    class JobPriorityChanged(Entity.Event):
        previous: str
        priority: str

        def apply(self, job: Job) -> None:
            job.priority = self.priority

    class JobUserMetadataReplaced(Entity.Event):
        user_metadata: dict[str, Any]

        def apply(self, job: Job) -> None:
            job.user_metadata = self.user_metadata

    class JobRescheduled(Entity.Event):
        """The job's not-before time changed (None: none)."""

        not_before: datetime | None
        previous: datetime | None

        def apply(self, job: Job) -> None:
            job.not_before = self.not_before

    class JobDeleted(Entity.Event):
        def apply(self, job: Job) -> None:
            job.deleted = True

    class JobErased(Entity.Event):
        """The user data of the job, its stages and its tasks (data, user metadata, results,
        log lines) was erased from the log and the read models; who and why are kept."""

        def apply(self, job: Job) -> None:
            job.data, job.user_metadata = {}, {}

    class JobCreatedBySchedule(Entity.Event):
        """The job is a run of the schedule `schedule_id` (`schedule_name`) for its nominal
        time `nominal_time`, started by `trigger` (schedule, buffered, trigger, backfill)."""

        schedule_id: UUID
        schedule_name: str
        nominal_time: datetime
        trigger: str

    # -- commands -------------------------------------------------------------------------

    @classmethod
    def create(
        cls,
        *,
        name: str,
        data: dict[str, Any],
        priority: Priority,
        user_metadata: dict[str, Any],
        traceparent: str,
        tracestate: str | None,
        now: datetime,
        actor: Principal = Actor.API,
        id: UUID | None = None,
        mode: JobMode = JobMode.RUN_ONCE,
        parent_task_id: UUID | None = None,
        parent_job_id: UUID | None = None,
        not_before: datetime | None = None,
        retry_policy: RetryPolicy | None = None,
        deadline: datetime | None = None,
        schedule_to_start_seconds: int | None = None,
        fairness_key: str | None = None,
        fairness_weight: int | None = None,
        concurrency_key: str | None = None,
    ) -> Job:
        check_deadline(deadline, now)
        check_schedule_to_start(schedule_to_start_seconds)
        check_fairness_key(fairness_key)
        check_fairness_weight(fairness_weight)
        check_concurrency_key(concurrency_key)
        return cls._create(
            cls.JobCreated,
            id=id or uuid4(),
            timestamp=now,
            **cause(actor),
            reason=None,
            name=name,
            data=data,
            priority=str(priority),
            user_metadata=user_metadata,
            traceparent=traceparent,
            tracestate=tracestate,
            mode=str(mode),
            parent_task_id=parent_task_id,
            parent_job_id=parent_job_id,
            not_before=not_before,
            retry_policy=None if retry_policy is None else retry_policy.to_dict(),
            deadline=deadline,
            schedule_to_start_seconds=schedule_to_start_seconds,
            fairness_key=fairness_key,
            fairness_weight=fairness_weight,
            concurrency_key=concurrency_key,
        )

    @property
    def is_final(self) -> bool:
        return self.status in JOB_FINAL

    @property
    def closes_by_itself(self) -> bool:
        """Whether the job completes once its work is done: runOnce, or standard and finished."""
        return self.mode == JobMode.RUN_ONCE or self.finishing

    @property
    def normal_stages(self) -> int:
        return self.stage_count - self.completion_stages

    def _percentage(self, completed_stages: int) -> int:
        return (completed_stages * 100) // self.stage_count if self.stage_count else 0

    def check_accepts_work(self) -> None:
        """New stages or tasks: refused once the job is final, finishing or completing."""
        if self.is_final:
            raise JobInFiniteState
        self.check_not_finishing()

    def check_not_finishing(self) -> None:
        """Tasks of normal stages: refused once the job is finishing (Jobnik's own checks on
        the stage's status still apply)."""
        if self.finishing or self.completing:
            raise JobFinishing

    def _check(self, target: S) -> None:
        if target not in JOB_TRANSITIONS[S(self.status)]:
            raise IllegalJobTransition.between(self.status, target)

    def append_stage(
        self, stage_id: UUID, now: datetime, actor: Principal, *, completion: bool = False
    ) -> int:
        """Give a new stage the next order; refused once the job is final or finishing."""
        self.check_accepts_work()
        order = self.stage_count + 1
        self._emit(
            self.StageAppended, now, actor, stage_id=stage_id, order=order, completion=completion
        )
        return order

    def finish(self, now: datetime, actor: Principal = Actor.API) -> bool:
        """The finish command. False (no event) when already finishing."""
        if self.is_final:
            raise JobInFiniteState
        if self.finishing:
            return False
        self._emit(self.JobFinishing, now, actor, "finish requested")
        return True

    def next_phase(self, now: datetime, actor: Principal) -> str | None:
        """After a stage completed or a finish: 'completing' when the completion stages are due
        (the caller releases them), 'completed' when the job just completed, else None."""
        if self.is_final or not self.closes_by_itself:
            return None
        if self.completed_stages < self.normal_stages:
            return None
        if self.completion_stages and not self.completing:
            self._emit(self.JobCompleting, now, actor, "every normal stage completed")
            return "completing"
        if self.completed_stages == self.stage_count:
            self._check(S.COMPLETED)
            reason = "all stages completed" if self.stage_count else "finished with no stages"
            self._emit(self.JobCompleted, now, actor, reason)
            return "completed"
        return None

    def abort(self, now: datetime, actor: Principal, reason: str) -> None:
        """Aborted with its parent (a delegating task's job was aborted); final jobs stay."""
        if not self.is_final:
            self._emit(self.JobAborted, now, actor, reason, previous=self.status)

    def request_status(
        self,
        target: S,
        now: datetime,
        reason: str | None = None,
        actor: Principal = Actor.API,
    ) -> None:
        """A user's PUT status: PENDING (resume or start), PAUSED or ABORTED."""
        target = S(target)
        if target not in (S.PENDING, S.PAUSED, S.ABORTED):
            raise IllegalJobTransition.between(self.status, target)
        self._check(target)
        if target is S.PAUSED:
            self._emit(self.JobPaused, now, actor, reason, previous=self.status)
        elif target is S.ABORTED:
            self._emit(self.JobAborted, now, actor, reason, previous=self.status)
        else:  # resume restores IN_PROGRESS when the job had started
            resumed = S.IN_PROGRESS if self.started else S.PENDING
            self._emit(self.JobResumed, now, actor, reason, status=resumed)

    def start(self, now: datetime, actor: Principal) -> None:
        """A stage of the job started: PENDING → IN_PROGRESS."""
        if self.status == S.PENDING:
            self._emit(self.JobStarted, now, actor)

    def stage_completed(self, stage_id: UUID, now: datetime, actor: Principal) -> str | None:
        """Count a completed stage; the job completes when every stage has and it
        closes by itself (runOnce, or finished). Returns what `next_phase` says."""
        done = self.completed_stages + 1
        self._emit(
            self.JobProgressed,
            now,
            actor,
            stage_id=stage_id,
            completed_stages=done,
            percentage=self._percentage(done),
        )
        return self.next_phase(now, actor)

    def time_ran_out(self, stage_id: UUID | None, now: datetime, cause: str, reason: str) -> None:
        """Its deadline, or stage `stage_id`'s, passed before it ended (`cause` "deadline"; the
        command aborts what it held, as an abort does), or a queued task of that stage expired
        (cause "expired"): it fails from whatever open status it is in, by `system`."""
        if self.is_final:
            return
        self._emit(self.JobFailed, now, Actor.SYSTEM, reason, stage_id=stage_id, cause=cause)

    def stage_failed(self, stage_id: UUID, now: datetime, actor: Principal) -> None:
        """A stage failed: the job fails."""
        if self.is_final:
            return
        self._check(S.FAILED)
        self._emit(self.JobFailed, now, actor, "a stage failed", stage_id=stage_id)

    def reopen(
        self,
        from_stage_id: UUID | None,
        completed_stages: int,
        completing: bool,
        now: datetime,
        actor: Principal,
        reason: str | None,
    ) -> None:
        """FAILED or ABORTED → running again, with `completed_stages` still COMPLETED."""
        if self.status not in JOB_RERUNNABLE:
            raise JobNotRerunnable(f"job {self.id} is {self.status}")
        self._emit(
            self.JobReopened,
            now,
            actor,
            reason,
            previous=self.status,
            status=str(S.IN_PROGRESS if self.started else S.PENDING),
            from_stage_id=from_stage_id,
            completed_stages=completed_stages,
            percentage=self._percentage(completed_stages),
            completing=completing,
        )

    def change_priority(
        self,
        priority: Priority,
        now: datetime,
        actor: Principal = Actor.API,
        reason: str | None = None,
    ) -> bool:
        """False (and no event) when the priority is already `priority`."""
        if self.priority == priority:
            return False
        self._emit(
            self.JobPriorityChanged,
            now,
            actor,
            reason,
            previous=self.priority,
            priority=str(priority),
        )
        return True

    def replace_user_metadata(
        self, user_metadata: dict[str, Any], now: datetime, actor: Principal
    ) -> None:
        self._emit(self.JobUserMetadataReplaced, now, actor, user_metadata=user_metadata)

    def reschedule(
        self, not_before: datetime | None, now: datetime, actor: Principal, reason: str
    ) -> None:
        """A new not-before time for the job's tasks (its queued ones are rescheduled with it,
        by the command). JobInFiniteState once it ended."""
        if self.is_final:
            raise JobInFiniteState
        self._emit(
            self.JobRescheduled, now, actor, reason, not_before=not_before, previous=self.not_before
        )

    def run_of(
        self,
        schedule_id: UUID,
        schedule_name: str,
        nominal_time: datetime,
        trigger: str,
        now: datetime,
        actor: Principal,
    ) -> None:
        """Record that this new job is a schedule's run for `nominal_time`."""
        self._emit(
            self.JobCreatedBySchedule,
            now,
            actor,
            f"schedule '{schedule_name}', nominal time {nominal_time.isoformat()}",
            schedule_id=schedule_id,
            schedule_name=schedule_name,
            nominal_time=nominal_time,
            trigger=trigger,
        )

    def erase(self, now: datetime, actor: Principal, reason: str) -> None:
        """Only an ended job is erased (JobNotEnded, 409): its tasks report no more data."""
        if not self.is_final:
            raise JobNotEnded(f"job {self.id} is {self.status}: a job is erased once it ended")
        self._emit(self.JobErased, now, actor, reason)

    def delete(
        self, now: datetime, actor: Principal = Actor.API, reason: str | None = None
    ) -> None:
        """Only a final job can be deleted; its history stays in the event log."""
        if not self.is_final:
            raise JobNotInFiniteState
        self._emit(self.JobDeleted, now, actor, reason)
