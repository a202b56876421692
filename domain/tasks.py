"""The Task aggregate: one unit of work; workers dequeue it by its stage's type."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Final
from uuid import UUID, uuid4

from jobnik.domain.base import Entity, cause
from jobnik.domain.errors import Forbidden, IllegalTaskTransition, StaleAttempt, TaskNotRerunnable
from jobnik.domain.principals import Actor, Principal
from jobnik.domain.statuses import TASK_FINAL, TASK_TRANSITIONS
from jobnik.domain.statuses import TaskStatus as S

DEFAULT_LEASE_SECONDS: Final = 30 * 60  # for clients that never heartbeat (rules §20 #7)

# Why a task failed or was retried: the run statistics count them apart (SMILA's counters).
ERROR, TIMEOUT, FATAL = "error", "timeout", "fatal"


class Task(Entity):
    """A task: status, attempts (failures so far), `attempt` (dequeues so far) and its lease."""

    if TYPE_CHECKING:  # set by the events' apply(); no annotations at runtime, so the
        # library does not turn them into __init__ arguments
        stage_id: UUID
        job_id: UUID
        stage_type: str
        data: dict[str, Any]
        user_metadata: dict[str, Any]
        max_attempts: int
        attempts: int
        attempt: int
        traceparent: str
        tracestate: str | None
        status: str
        start_time: datetime | None
        end_time: datetime | None
        lease_seconds: int
        lease_expires_at: datetime | None
        result: dict[str, Any] | None
        delegations: int
        delegated_at: datetime | None
        holder: str | None  # the token whose dequeue opened the current attempt

    class TaskCreated(Entity.Created):
        stage_id: UUID
        job_id: UUID
        stage_type: str
        data: dict[str, Any]
        user_metadata: dict[str, Any]
        max_attempts: int
        traceparent: str
        tracestate: str | None

        def apply(self, task: Task) -> None:
            task.stage_id, task.job_id = self.stage_id, self.job_id
            task.stage_type = self.stage_type
            task.data, task.user_metadata = self.data, self.user_metadata
            task.max_attempts, task.attempts, task.attempt = self.max_attempts, 0, 0
            task.traceparent, task.tracestate = self.traceparent, self.tracestate
            task.status = str(S.PENDING)
            task.start_time = task.end_time = task.lease_expires_at = None
            task.lease_seconds = 0
            task.result, task.delegations, task.delegated_at = None, 0, None
            task.holder = None

    class TaskDequeued(Entity.Event):
        """Attempt number `attempt` opened, leased until `lease_expires_at`."""

        class_version = 2

        stage_id: UUID
        previous: str
        attempt: int
        lease_seconds: int
        lease_expires_at: datetime

        @staticmethod
        def upcast_v1_v2(state: dict[str, Any]) -> None:
            """v1 (before leases): the default lease, from the dequeue's time."""
            state["lease_seconds"] = DEFAULT_LEASE_SECONDS
            state["lease_expires_at"] = state["timestamp"] + timedelta(
                seconds=DEFAULT_LEASE_SECONDS
            )

        @property
        def holder(self) -> str | None:
            """The token the attempt belongs to (None: dequeued with access control off)."""
            return self.actor if self.actor_role else None

        def apply(self, task: Task) -> None:
            task.status, task.start_time, task.attempt = S.IN_PROGRESS, self.timestamp, self.attempt
            task.lease_seconds, task.lease_expires_at = self.lease_seconds, self.lease_expires_at
            task.holder = self.holder

    class TaskLeaseExtended(Entity.Event):
        """A heartbeat from the current attempt (SMILA's keep-alive)."""

        attempt: int
        lease_expires_at: datetime

        def apply(self, task: Task) -> None:
            task.lease_expires_at = self.lease_expires_at

    class TaskCompleted(Entity.Event):
        """Done; `result` is what the handler returned (kept, shown, handed to a parent task)."""

        class_version = 2

        stage_id: UUID
        attempt: int
        result: dict[str, Any] | None

        @staticmethod
        def upcast_v1_v2(state: dict[str, Any]) -> None:
            """v1 (before results): no result."""
            state["result"] = None

        def apply(self, task: Task) -> None:
            task.status, task.end_time, task.lease_expires_at = S.COMPLETED, self.timestamp, None
            task.result = self.result

    class TaskDelegated(Entity.Event):
        """The handler created child jobs and waits for them: no lease, no attempt spent."""

        stage_id: UUID
        job_id: UUID
        attempt: int
        open_children: int

        def apply(self, task: Task) -> None:
            task.status, task.lease_expires_at = S.DELEGATED, None
            task.delegations, task.delegated_at = task.delegations + 1, self.timestamp

    class TaskChildEnded(Entity.Event):
        """A child job of this delegated task ended; `open_children` are still running."""

        job_id: UUID
        child_job_id: UUID
        child_status: str
        open_children: int

        def apply(self, task: Task) -> None:
            pass

    class TaskRedispatched(Entity.Event):
        """Every child job ended: the task is queued again for its handler to decide."""

        stage_id: UUID
        job_id: UUID

        def apply(self, task: Task) -> None:
            task.status, task.delegated_at = S.PENDING, None

    class TaskRetried(Entity.Event):
        """Back in the queue; `cause` is error (the handler failed) or timeout (lease expired)."""

        class_version = 2

        stage_id: UUID
        attempt: int
        attempts: int
        cause: str

        @staticmethod
        def upcast_v1_v2(state: dict[str, Any]) -> None:
            """v1 (before leases) had only handler failures."""
            state["cause"] = ERROR

        def apply(self, task: Task) -> None:
            task.status, task.attempts, task.lease_expires_at = S.RETRIED, self.attempts, None

    class TaskFailed(Entity.Event):
        """Failed for good; `cause` is error (attempts ran out), timeout, or fatal (no retry)."""

        class_version = 2

        stage_id: UUID
        attempt: int
        attempts: int
        cause: str

        @staticmethod
        def upcast_v1_v2(state: dict[str, Any]) -> None:
            """v1 (before leases) had only handler failures."""
            state["cause"] = ERROR

        def apply(self, task: Task) -> None:
            task.status, task.attempts, task.end_time = S.FAILED, self.attempts, self.timestamp
            task.lease_expires_at = None

    class TaskReturned(Entity.Event):
        """A worker handed the task back unfinished (shutdown): queued again, no attempt spent."""

        stage_id: UUID
        attempt: int

        def apply(self, task: Task) -> None:
            task.status, task.lease_expires_at = S.PENDING, None

    class TaskAborted(Entity.Event):
        """Cancelled with its job; `reported` is a late worker report that moved nothing."""

        stage_id: UUID
        previous: str
        reported: str | None

        def apply(self, task: Task) -> None:
            task.status, task.end_time, task.lease_expires_at = S.ABORTED, self.timestamp, None

    class TaskRerun(Entity.Event):
        """An operator's rerun: queued again with a fresh attempt budget (`attempts` back to 0;
        `attempt` keeps counting, so reports from earlier attempts stay stale)."""

        stage_id: UUID
        job_id: UUID
        previous: str

        def apply(self, task: Task) -> None:
            task.status, task.attempts, task.end_time = S.PENDING, 0, None
            task.lease_expires_at, task.result = None, None

    class TaskAttemptRefused(Entity.Event):
        """A report or heartbeat from an attempt that is no longer current: recorded, refused."""

        attempt: int
        current_attempt: int
        request: str

        def apply(self, task: Task) -> None:
            pass

    class TaskLogged(Entity.Event):
        """Lines appended to the task's log (append-only), by attempt `attempt`."""

        job_id: UUID
        attempt: int
        lines: list[str]

        def apply(self, task: Task) -> None:
            pass

    class TaskUserMetadataReplaced(Entity.Event):
        user_metadata: dict[str, Any]

        def apply(self, task: Task) -> None:
            task.user_metadata = self.user_metadata

    # -- commands -------------------------------------------------------------------------

    @classmethod
    def create(
        cls,
        *,
        stage_id: UUID,
        job_id: UUID,
        stage_type: str,
        data: dict[str, Any],
        user_metadata: dict[str, Any],
        max_attempts: int,
        traceparent: str,
        tracestate: str | None,
        now: datetime,
        actor: Principal = Actor.API,
        id: UUID | None = None,
    ) -> Task:
        return cls._create(
            cls.TaskCreated,
            id=id or uuid4(),
            timestamp=now,
            **cause(actor),
            reason=None,
            stage_id=stage_id,
            job_id=job_id,
            stage_type=stage_type,
            data=data,
            user_metadata=user_metadata,
            max_attempts=max_attempts,
            traceparent=traceparent,
            tracestate=tracestate,
        )

    @property
    def is_final(self) -> bool:
        return self.status in TASK_FINAL

    def _check(self, target: S) -> None:
        if target not in TASK_TRANSITIONS[S(self.status)]:
            raise IllegalTaskTransition.between(self.status, target)

    def holds(self, attempt: int | None) -> bool:
        """Whether `attempt` (None: a client without fencing) is the current, open attempt."""
        return self.status == S.IN_PROGRESS and (attempt is None or attempt == self.attempt)

    def held_by_another(self, actor: Principal) -> bool:
        """Whether the current attempt belongs to a token other than `actor`'s (fencing by
        identity: only while access control is on, for attempts a token opened)."""
        return (
            actor.authenticated
            and self.status == S.IN_PROGRESS
            and self.holder is not None
            and self.holder != actor.name
        )

    def refuse_another(
        self, attempt: int | None, request: str, now: datetime, actor: Principal
    ) -> Forbidden:
        """Record a request from a token that does not hold the current attempt; returns the
        error to raise after saving."""
        self._emit(
            self.TaskAttemptRefused,
            now,
            actor,
            "the attempt belongs to another token",
            attempt=self.attempt if attempt is None else attempt,
            current_attempt=self.attempt,
            request=request,
        )
        return Forbidden(
            f"attempt {self.attempt} of task {self.id} belongs to token '{self.holder}', "
            f"not to '{actor.name}'"
        )

    def refuse(self, attempt: int, request: str, now: datetime, actor: Principal) -> StaleAttempt:
        """Record a request from a stale attempt; returns the error to raise after saving."""
        self._emit(
            self.TaskAttemptRefused,
            now,
            actor,
            "attempt is no longer current",
            attempt=attempt,
            current_attempt=self.attempt,
            request=request,
        )
        return StaleAttempt(
            f"attempt {attempt} of task {self.id} is no longer current "
            f"(current attempt {self.attempt}, status {self.status})"
        )

    def dequeue(
        self, now: datetime, actor: Principal, lease_seconds: int = DEFAULT_LEASE_SECONDS
    ) -> None:
        """PENDING/RETRIED → IN_PROGRESS; opens attempt `attempt + 1`, leased `lease_seconds`."""
        self._check(S.IN_PROGRESS)
        self._emit(
            self.TaskDequeued,
            now,
            actor,
            stage_id=self.stage_id,
            previous=self.status,
            attempt=self.attempt + 1,
            lease_seconds=lease_seconds,
            lease_expires_at=now + timedelta(seconds=lease_seconds),
        )

    def extend_lease(self, now: datetime, actor: Principal) -> None:
        """Push the lease `lease_seconds` past now (only an IN_PROGRESS task holds a lease)."""
        if self.status != S.IN_PROGRESS:
            raise IllegalTaskTransition(f"a {self.status} task holds no lease")
        self._emit(
            self.TaskLeaseExtended,
            now,
            actor,
            attempt=self.attempt,
            lease_expires_at=now + timedelta(seconds=self.lease_seconds),
        )

    def complete(
        self, now: datetime, actor: Principal, result: dict[str, Any] | None = None
    ) -> None:
        self._check(S.COMPLETED)
        self._emit(
            self.TaskCompleted,
            now,
            actor,
            stage_id=self.stage_id,
            attempt=self.attempt,
            result=result,
        )

    def delegate(self, open_children: int, now: datetime, actor: Principal) -> None:
        """IN_PROGRESS → DELEGATED: wait for `open_children` child jobs to end."""
        self._check(S.DELEGATED)
        self._emit(
            self.TaskDelegated,
            now,
            actor,
            f"waiting for {open_children} child job(s)",
            stage_id=self.stage_id,
            job_id=self.job_id,
            attempt=self.attempt,
            open_children=open_children,
        )

    def child_ended(
        self, child_job_id: UUID, child_status: str, open_children: int, now: datetime
    ) -> None:
        self._emit(
            self.TaskChildEnded,
            now,
            Actor.SYSTEM,
            f"child job {child_status}",
            job_id=self.job_id,
            child_job_id=child_job_id,
            child_status=child_status,
            open_children=open_children,
        )

    def redispatch(self, now: datetime, actor: Principal, reason: str) -> None:
        """DELEGATED → PENDING: back in the queue; the handler sees its children's outcomes."""
        self._check(S.PENDING)
        self._emit(
            self.TaskRedispatched, now, actor, reason, stage_id=self.stage_id, job_id=self.job_id
        )

    def fail(
        self, now: datetime, actor: Principal, reason: str | None = None, *, cause: str = ERROR
    ) -> None:
        """RETRIED while attempts remain, else FAILED (rules §7); fatal fails at once."""
        attempts = self.attempts + 1
        retry = cause != FATAL and attempts < self.max_attempts
        target = S.RETRIED if retry else S.FAILED
        self._check(target)
        event = self.TaskRetried if retry else self.TaskFailed
        self._emit(
            event,
            now,
            actor,
            reason,
            stage_id=self.stage_id,
            attempt=self.attempt,
            attempts=attempts,
            cause=cause,
        )

    def report(
        self,
        status: S,
        now: datetime,
        actor: Principal,
        reason: str | None = None,
        *,
        fatal: bool = False,
        result: dict[str, Any] | None = None,
    ) -> None:
        """A worker's PUT status: COMPLETED or FAILED (fatal: without retry)."""
        if S(status) == S.COMPLETED:
            self.complete(now, actor, result)
        else:
            self.fail(now, actor, reason, cause=FATAL if fatal else ERROR)

    def give_back(self, now: datetime, actor: Principal, reason: str) -> None:
        """IN_PROGRESS → PENDING: the worker returns it unfinished; no attempt is spent."""
        if self.status != S.IN_PROGRESS:
            raise IllegalTaskTransition.between(self.status, S.PENDING)
        self._check(S.PENDING)
        self._emit(
            self.TaskReturned, now, actor, reason, stage_id=self.stage_id, attempt=self.attempt
        )

    def abort(
        self, now: datetime, actor: Principal, reason: str, reported: S | None = None
    ) -> None:
        """Cancel the task with its job; a late report is recorded in `reported`."""
        if self.is_final:
            return
        self._emit(
            self.TaskAborted,
            now,
            actor,
            reason,
            stage_id=self.stage_id,
            previous=self.status,
            reported=str(reported) if reported else None,
        )

    def rerun(self, now: datetime, actor: Principal, reason: str | None) -> None:
        """A final task (COMPLETED, FAILED, ABORTED) → PENDING; which ones a command reruns is
        the command's choice (domain/reruns.py)."""
        if not self.is_final:
            raise TaskNotRerunnable(f"task {self.id} is {self.status}: it has not ended")
        self._emit(
            self.TaskRerun,
            now,
            actor,
            reason,
            stage_id=self.stage_id,
            job_id=self.job_id,
            previous=self.status,
        )

    def append_log(
        self, lines: Sequence[str], now: datetime, actor: Principal, attempt: int | None = None
    ) -> None:
        self._emit(
            self.TaskLogged,
            now,
            actor,
            job_id=self.job_id,
            attempt=self.attempt if attempt is None else attempt,
            lines=list(lines),
        )

    def replace_user_metadata(
        self, user_metadata: dict[str, Any], now: datetime, actor: Principal
    ) -> None:
        self._emit(self.TaskUserMetadataReplaced, now, actor, user_metadata=user_metadata)
