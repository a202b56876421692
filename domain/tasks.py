"""The Task aggregate: one unit of work; workers dequeue it by its stage's type."""

from __future__ import annotations

from dataclasses import field
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID, uuid4

from jobnik.domain.base import Entity, cause
from jobnik.domain.delays import RetryPolicy
from jobnik.domain.principals import Actor, Principal
from jobnik.domain.statuses import DEFAULT_LEASE_SECONDS, ERROR
from jobnik.domain.statuses import TaskStatus as S
from jobnik.domain.task_commands import TaskCommands


class Task(TaskCommands, Entity):
    """A task: status, attempts (failures so far), `attempt` (dequeues so far) and its lease.

    Its state and the events that change it are here; what can be asked of it, its commands,
    in task_commands.py."""

    class TaskCreated(Entity.Created):
        stage_id: UUID
        job_id: UUID
        stage_type: str
        data: dict[str, Any]
        user_metadata: dict[str, Any]
        max_attempts: int
        traceparent: str
        tracestate: str | None
        # Not dequeued before `not_before`; `retry_policy` (RetryPolicy.to_dict) spaces its
        # retries. Keyword fields with defaults: events stored without them load with None.
        not_before: datetime | None = field(default=None, kw_only=True)
        retry_policy: dict[str, float] | None = field(default=None, kw_only=True)
        turn: int = field(default=0, kw_only=True)  # its place in the queue (domain/turns.py)

        def apply(self, task: Task) -> None:
            task.not_before, task.retry_policy = self.not_before, self.retry_policy
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
            task.not_before = None
            task.lease_seconds, task.lease_expires_at = self.lease_seconds, self.lease_expires_at
            task.holder = self.holder

    class TaskLeaseExtended(Entity.Event):
        """A heartbeat from the current attempt (a keep-alive)."""

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
        turn: int = field(default=0, kw_only=True)  # its place in the queue again

        def apply(self, task: Task) -> None:
            task.status, task.delegated_at, task.not_before = S.PENDING, None, None

    class TaskRetried(Entity.Event):
        """Back in the queue; `cause` is error (the handler failed) or timeout (lease expired);
        `not_before`: when its retry policy lets it be dequeued again (None: at once)."""

        class_version = 2

        stage_id: UUID
        attempt: int
        attempts: int
        cause: str
        not_before: datetime | None = field(default=None, kw_only=True)
        turn: int = field(default=0, kw_only=True)  # its place in the queue again

        @staticmethod
        def upcast_v1_v2(state: dict[str, Any]) -> None:
            """v1 (before leases) had only handler failures."""
            state["cause"] = ERROR

        def apply(self, task: Task) -> None:
            task.status, task.attempts, task.lease_expires_at = S.RETRIED, self.attempts, None
            task.not_before = self.not_before

    class TaskFailed(Entity.Event):
        """Failed for good; `cause` is error (attempts ran out), timeout, fatal (no retry), or
        expired (never dequeued: `previous`, the queued status it left; None for the others,
        which leave IN_PROGRESS)."""

        class_version = 2

        stage_id: UUID
        attempt: int
        attempts: int
        cause: str
        previous: str | None = field(default=None, kw_only=True)

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
        turn: int = field(default=0, kw_only=True)  # its place in the queue again

        def apply(self, task: Task) -> None:
            task.status, task.lease_expires_at, task.not_before = S.PENDING, None, None

    class TaskRescheduled(Entity.Event):
        """A queued task's not-before time changed (None: it may be dequeued at once)."""

        stage_id: UUID
        not_before: datetime | None
        previous: datetime | None

        def apply(self, task: Task) -> None:
            task.not_before = self.not_before

    class TaskAborted(Entity.Event):
        """Cancelled with its job; `reported` is a late worker report that moved nothing."""

        stage_id: UUID
        previous: str
        reported: str | None

        def apply(self, task: Task) -> None:
            task.status, task.end_time, task.lease_expires_at = S.ABORTED, self.timestamp, None
            task.not_before = None

    class TaskRerun(Entity.Event):
        """An operator's rerun: queued again with a fresh attempt budget (`attempts` back to 0;
        `attempt` keeps counting, so reports from earlier attempts stay stale)."""

        stage_id: UUID
        job_id: UUID
        previous: str
        turn: int = field(default=0, kw_only=True)  # its place in the queue again

        def apply(self, task: Task) -> None:
            task.status, task.attempts, task.end_time = S.PENDING, 0, None
            task.lease_expires_at, task.result, task.not_before = None, None, None

    class TaskAttemptRefused(Entity.Event):
        """A worker's request (report, heartbeat, hand-back, log) from an attempt that is no
        longer current, or from a token other than the one that opened it: recorded, refused."""

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
        not_before: datetime | None = None,
        retry_policy: RetryPolicy | None = None,
        turn: int = 0,
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
            not_before=not_before,
            retry_policy=None if retry_policy is None else retry_policy.to_dict(),
            turn=turn,
        )
