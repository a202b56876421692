"""The Task aggregate: one unit of work; workers dequeue it by its stage's type."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any
from uuid import UUID, uuid4

from jobnik.domain.base import Entity
from jobnik.domain.errors import IllegalTaskTransition
from jobnik.domain.statuses import TASK_FINAL, TASK_TRANSITIONS, Actor
from jobnik.domain.statuses import TaskStatus as S


class Task(Entity):
    """A task: status, attempts (failed attempts so far) and `attempt` (dequeues so far)."""

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
            task.stage_id, task.job_id, task.stage_type = (
                self.stage_id,
                self.job_id,
                self.stage_type,
            )
            task.data, task.user_metadata = self.data, self.user_metadata
            task.max_attempts, task.attempts, task.attempt = self.max_attempts, 0, 0
            task.traceparent, task.tracestate = self.traceparent, self.tracestate
            task.status = str(S.PENDING)
            task.start_time = task.end_time = None

    class TaskDequeued(Entity.Event):
        stage_id: UUID
        previous: str
        attempt: int

        def apply(self, task: Task) -> None:
            task.status, task.start_time, task.attempt = S.IN_PROGRESS, self.timestamp, self.attempt

    class TaskCompleted(Entity.Event):
        stage_id: UUID
        attempt: int

        def apply(self, task: Task) -> None:
            task.status, task.end_time = S.COMPLETED, self.timestamp

    class TaskRetried(Entity.Event):
        stage_id: UUID
        attempt: int
        attempts: int

        def apply(self, task: Task) -> None:
            task.status, task.attempts = S.RETRIED, self.attempts

    class TaskFailed(Entity.Event):
        stage_id: UUID
        attempt: int
        attempts: int

        def apply(self, task: Task) -> None:
            task.status, task.attempts, task.end_time = S.FAILED, self.attempts, self.timestamp

    class TaskAborted(Entity.Event):
        """Cancelled with its job; `reported` is a late worker report that moved nothing."""

        stage_id: UUID
        previous: str
        reported: str | None

        def apply(self, task: Task) -> None:
            task.status, task.end_time = S.ABORTED, self.timestamp

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
        actor: Actor = Actor.API,
        id: UUID | None = None,
    ) -> Task:
        return cls._create(
            cls.TaskCreated,
            id=id or uuid4(),
            timestamp=now,
            actor=str(actor),
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

    def dequeue(self, now: datetime, actor: Actor) -> None:
        """PENDING/RETRIED → IN_PROGRESS; opens attempt number `attempt + 1`."""
        self._check(S.IN_PROGRESS)
        self._emit(
            self.TaskDequeued,
            now,
            actor,
            stage_id=self.stage_id,
            previous=self.status,
            attempt=self.attempt + 1,
        )

    def complete(self, now: datetime, actor: Actor) -> None:
        self._check(S.COMPLETED)
        self._emit(self.TaskCompleted, now, actor, stage_id=self.stage_id, attempt=self.attempt)

    def fail(self, now: datetime, actor: Actor, reason: str | None = None) -> None:
        """RETRIED while attempts remain, else FAILED (rules §7); `attempts` counts failures."""
        attempts = self.attempts + 1
        target = S.RETRIED if attempts < self.max_attempts else S.FAILED
        self._check(target)
        event = self.TaskRetried if target is S.RETRIED else self.TaskFailed
        self._emit(
            event,
            now,
            actor,
            reason,
            stage_id=self.stage_id,
            attempt=self.attempt,
            attempts=attempts,
        )

    def report(self, status: S, now: datetime, actor: Actor, reason: str | None = None) -> None:
        """A worker's PUT status: COMPLETED or FAILED."""
        if status is S.COMPLETED:
            self.complete(now, actor)
        else:
            self.fail(now, actor, reason)

    def abort(self, now: datetime, actor: Actor, reason: str, reported: S | None = None) -> None:
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

    def replace_user_metadata(
        self, user_metadata: dict[str, Any], now: datetime, actor: Actor
    ) -> None:
        self._emit(self.TaskUserMetadataReplaced, now, actor, user_metadata=user_metadata)
