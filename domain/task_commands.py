"""What can be asked of a task: the Task aggregate's commands (its state and events: tasks.py).

Each command checks the transition table (statuses.py) and raises if it refuses; otherwise it
emits the event that records the fact.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any
from uuid import UUID

from eventsourcing.domain import Aggregate

from jobnik.domain.base import Entity
from jobnik.domain.delays import RetryPolicy
from jobnik.domain.errors import (
    Forbidden,
    IllegalTaskTransition,
    StaleAttempt,
    TaskNotQueued,
    TaskNotRerunnable,
)
from jobnik.domain.principals import Actor, Principal
from jobnik.domain.statuses import (
    DEFAULT_LEASE_SECONDS,
    ERROR,
    EXPIRED,
    FATAL,
    TASK_FINAL,
    TASK_QUEUED,
    TASK_TRANSITIONS,
)
from jobnik.domain.statuses import TaskStatus as S


class TaskCommands:
    """The Task aggregate's commands, mixed into `Task`, and what they use of it."""

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
        not_before: datetime | None  # not dequeued before (None: at once)
        retry_policy: dict[str, float] | None  # RetryPolicy.to_dict(); None: retry at once
        # the events (tasks.py)
        TaskDequeued: type[Entity.Event]
        TaskLeaseExtended: type[Entity.Event]
        TaskCompleted: type[Entity.Event]
        TaskDelegated: type[Entity.Event]
        TaskChildEnded: type[Entity.Event]
        TaskRedispatched: type[Entity.Event]
        TaskRetried: type[Entity.Event]
        TaskFailed: type[Entity.Event]
        TaskReturned: type[Entity.Event]
        TaskRescheduled: type[Entity.Event]
        TaskAborted: type[Entity.Event]
        TaskRerun: type[Entity.Event]
        TaskAttemptRefused: type[Entity.Event]
        TaskLogged: type[Entity.Event]
        TaskUserMetadataReplaced: type[Entity.Event]

        @property
        def id(self) -> UUID: ...

        def _emit(
            self,
            event_class: type[Aggregate.Event],
            now: datetime,
            actor: Principal,
            reason: str | None = None,
            **fields: Any,
        ) -> None: ...

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
        return self.status == S.IN_PROGRESS and self.opened_by_another(actor)

    def opened_by_another(self, actor: Principal) -> bool:
        """Whether the task's latest attempt, open or ended, was opened by a token other than
        `actor`'s (as `held_by_another`: only while access control is on)."""
        return actor.authenticated and self.holder is not None and self.holder != actor.name

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

    def redispatch(self, now: datetime, actor: Principal, reason: str, *, turn: int = 0) -> None:
        """DELEGATED → PENDING: back in the queue at `turn` (domain/turns.py); the handler sees
        its children's outcomes."""
        self._check(S.PENDING)
        self._emit(
            self.TaskRedispatched,
            now,
            actor,
            reason,
            stage_id=self.stage_id,
            job_id=self.job_id,
            turn=turn,
        )

    def fail(
        self,
        now: datetime,
        actor: Principal,
        reason: str | None = None,
        *,
        cause: str = ERROR,
        turn: int = 0,
    ) -> None:
        """RETRIED (queued again at `turn`) while attempts remain, else FAILED; fatal fails at
        once."""
        attempts = self.attempts + 1
        retry = cause != FATAL and attempts < self.max_attempts
        self._check(S.RETRIED if retry else S.FAILED)
        policy = RetryPolicy.from_dict(self.retry_policy) if retry else None
        due = {
            "not_before": None if policy is None else policy.due(attempts, self.id, now),
            "turn": turn,
        }
        self._emit(
            self.TaskRetried if retry else self.TaskFailed,
            now,
            actor,
            reason,
            stage_id=self.stage_id,
            attempt=self.attempt,
            attempts=attempts,
            cause=cause,
            **(due if retry else {}),
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
        turn: int = 0,
    ) -> None:
        """A worker's PUT status: COMPLETED or FAILED (fatal: without retry; a retry is queued
        at `turn`)."""
        if S(status) == S.COMPLETED:
            self.complete(now, actor, result)
        else:
            self.fail(now, actor, reason, cause=FATAL if fatal else ERROR, turn=turn)

    def reschedule(
        self, not_before: datetime | None, now: datetime, actor: Principal, reason: str
    ) -> bool:
        """Bring a queued task forward or postpone it (None: dequeueable at once); False when
        it already has that time (nothing recorded). TaskNotQueued unless PENDING or RETRIED."""
        if self.status not in TASK_QUEUED:
            raise TaskNotQueued(f"task {self.id} is {self.status}: it is not waiting in the queue")
        if not_before == self.not_before:
            return False
        self._emit(
            self.TaskRescheduled,
            now,
            actor,
            reason,
            stage_id=self.stage_id,
            not_before=not_before,
            previous=self.not_before,
        )
        return True

    def expire(self, now: datetime) -> bool:
        """A queued task (PENDING or RETRIED) that was not dequeued within its stage's
        schedule-to-start limit fails for good, cause "expired", by `system`: no attempt was
        spent and none is made. False (nothing recorded) when it is no longer queued."""
        if self.status not in TASK_QUEUED:
            return False
        self._emit(
            self.TaskFailed,
            now,
            Actor.SYSTEM,
            "not dequeued within its schedule-to-start limit",
            stage_id=self.stage_id,
            attempt=self.attempt,
            attempts=self.attempts,
            cause=EXPIRED,
            previous=self.status,
        )
        return True

    def give_back(self, now: datetime, actor: Principal, reason: str, *, turn: int = 0) -> None:
        """IN_PROGRESS → PENDING: the worker returns it unfinished, queued again at `turn`; no
        attempt is spent."""
        if self.status != S.IN_PROGRESS:
            raise IllegalTaskTransition.between(self.status, S.PENDING)
        self._check(S.PENDING)
        self._emit(
            self.TaskReturned,
            now,
            actor,
            reason,
            stage_id=self.stage_id,
            attempt=self.attempt,
            turn=turn,
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

    def rerun(self, now: datetime, actor: Principal, reason: str | None, *, turn: int = 0) -> None:
        """A final task (COMPLETED, FAILED, ABORTED) → PENDING, queued at `turn`; which ones a
        command reruns is the command's choice (domain/reruns.py)."""
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
            turn=turn,
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
