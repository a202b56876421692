"""The Stage aggregate: one ordered phase of a job; its tasks are dequeued by its `type`."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import field
from datetime import datetime
from typing import TYPE_CHECKING, Any
from uuid import UUID, uuid4

from jobnik.domain import patterns
from jobnik.domain.base import Entity, cause
from jobnik.domain.delays import RetryPolicy, check_deadline, check_schedule_to_start
from jobnik.domain.errors import (
    AddTasksNotAllowed,
    CompletionStageHeld,
    IllegalStageTransition,
    StageInFiniteState,
)
from jobnik.domain.principals import Actor, Principal
from jobnik.domain.statuses import STAGE_FINAL, STAGE_TRANSITIONS
from jobnik.domain.statuses import StageStatus as S


class Stage(Entity):
    """A stage: status, order and metadata. Its task counters live in the summary read model."""

    if TYPE_CHECKING:  # set by the events' apply(); no annotations at runtime, so the
        # library does not turn them into __init__ arguments
        job_id: UUID
        order: int
        type: str
        data: dict[str, Any]
        user_metadata: dict[str, Any]
        traceparent: str
        tracestate: str | None
        status: str
        start_time: datetime | None
        end_time: datetime | None
        completion: bool
        failure_patterns: list[str]
        not_before: datetime | None
        retry_policy: dict[str, float] | None
        deadline: datetime | None
        schedule_to_start_seconds: int | None

    class StageAdded(Entity.Created):
        """`completion`: held until every normal stage completed (the job's completion phase);
        `failure_patterns`: a completion whose result matches one is a failure."""

        class_version = 2

        job_id: UUID
        order: int
        type: str
        data: dict[str, Any]
        user_metadata: dict[str, Any]
        traceparent: str
        tracestate: str | None
        status: str
        completion: bool
        failure_patterns: list[str]
        # Its tasks' not-before time and retry policy (RetryPolicy.to_dict); keyword fields
        # with defaults: events stored without them load with None.
        not_before: datetime | None = field(default=None, kw_only=True)
        retry_policy: dict[str, float] | None = field(default=None, kw_only=True)
        deadline: datetime | None = field(default=None, kw_only=True)  # fails unfinished then
        # A queued task of it not dequeued within this many seconds expires (None: never).
        schedule_to_start_seconds: int | None = field(default=None, kw_only=True)

        @staticmethod
        def upcast_v1_v2(state: dict[str, Any]) -> None:
            """v1: a normal stage without failure patterns."""
            state.update(completion=False, failure_patterns=[])

        def apply(self, stage: Stage) -> None:
            stage.not_before, stage.retry_policy = self.not_before, self.retry_policy
            stage.deadline = self.deadline
            stage.schedule_to_start_seconds = self.schedule_to_start_seconds
            stage.job_id, stage.order, stage.type = self.job_id, self.order, self.type
            stage.data, stage.user_metadata = self.data, self.user_metadata
            stage.traceparent, stage.tracestate = self.traceparent, self.tracestate
            stage.status = self.status
            stage.start_time = stage.end_time = None
            stage.completion, stage.failure_patterns = self.completion, self.failure_patterns

    class StageRescheduled(Entity.Event):
        """The stage's not-before time changed (None: none)."""

        job_id: UUID
        not_before: datetime | None
        previous: datetime | None

        def apply(self, stage: Stage) -> None:
            stage.not_before = self.not_before

    class StageReleased(Entity.Event):
        """CREATED/WAITING → PENDING, by a user or because the previous stage completed; its
        queued tasks' turns move by `turn_shift` (domain/turns.py)."""

        job_id: UUID
        previous: str
        turn_shift: int = field(default=0, kw_only=True)

        def apply(self, stage: Stage) -> None:
            stage.status = S.PENDING

    class StageStarted(Entity.Event):
        job_id: UUID

        def apply(self, stage: Stage) -> None:
            stage.status, stage.start_time = S.IN_PROGRESS, self.timestamp

    class StageCompleted(Entity.Event):
        job_id: UUID

        def apply(self, stage: Stage) -> None:
            stage.status, stage.end_time = S.COMPLETED, self.timestamp

    class StageFailed(Entity.Event):
        """A task failed for good (`task_id`), or the stage's deadline passed (`cause`
        "deadline", `task_id` None)."""

        job_id: UUID
        task_id: UUID | None
        cause: str | None = field(default=None, kw_only=True)

        def apply(self, stage: Stage) -> None:
            stage.status, stage.end_time = S.FAILED, self.timestamp

    class StageAborted(Entity.Event):
        job_id: UUID
        previous: str

        def apply(self, stage: Stage) -> None:
            stage.status, stage.end_time = S.ABORTED, self.timestamp

    class StageReopened(Entity.Event):
        """A rerun gave the ended stage work again: `status` PENDING or IN_PROGRESS (its turn:
        it runs now; IN_PROGRESS when it had started), or CREATED (it waits for its turn)."""

        job_id: UUID
        previous: str
        status: str

        def apply(self, stage: Stage) -> None:
            stage.status, stage.end_time, stage.deadline = self.status, None, None

    class StageUserMetadataReplaced(Entity.Event):
        user_metadata: dict[str, Any]

        def apply(self, stage: Stage) -> None:
            stage.user_metadata = self.user_metadata

    # -- commands -------------------------------------------------------------------------

    @classmethod
    def add(
        cls,
        *,
        id: UUID | None = None,
        job_id: UUID,
        order: int,
        type: str,
        data: dict[str, Any],
        user_metadata: dict[str, Any],
        traceparent: str,
        tracestate: str | None,
        start_as_waiting: bool,
        previous_completed: bool,
        now: datetime,
        actor: Principal = Actor.API,
        completion: bool = False,
        failure_patterns: Sequence[str] = (),
        not_before: datetime | None = None,
        retry_policy: RetryPolicy | None = None,
        deadline: datetime | None = None,
        schedule_to_start_seconds: int | None = None,
    ) -> Stage:
        """WAITING if asked; PENDING if first or after a completed stage; else CREATED.

        A completion stage is CREATED (held) until the job's completion phase releases it."""
        patterns.check(failure_patterns)
        check_deadline(deadline, now)
        check_schedule_to_start(schedule_to_start_seconds)
        if completion:
            status = S.CREATED
        elif start_as_waiting:
            status = S.WAITING
        elif order == 1 or previous_completed:
            status = S.PENDING
        else:
            status = S.CREATED
        return cls._create(
            cls.StageAdded,
            id=id or uuid4(),
            timestamp=now,
            **cause(actor),
            reason=None,
            job_id=job_id,
            order=order,
            type=type,
            data=data,
            user_metadata=user_metadata,
            traceparent=traceparent,
            tracestate=tracestate,
            status=str(status),
            completion=completion,
            failure_patterns=list(failure_patterns),
            not_before=not_before,
            retry_policy=None if retry_policy is None else retry_policy.to_dict(),
            deadline=deadline,
            schedule_to_start_seconds=schedule_to_start_seconds,
        )

    def time_ran_out(
        self, now: datetime, cause: str, reason: str, task_id: UUID | None = None
    ) -> bool:
        """Its deadline passed (`cause` "deadline"), or queued task `task_id` expired (cause
        "expired"), before it ended: it fails from whatever open status it is in (a stage none
        of whose tasks started is still PENDING), by `system`. True if it failed."""
        if self.is_final:
            return False
        self._emit(
            self.StageFailed,
            now,
            Actor.SYSTEM,
            reason,
            job_id=self.job_id,
            task_id=task_id,
            cause=cause,
        )
        return True

    def reschedule(
        self, not_before: datetime | None, now: datetime, actor: Principal, reason: str
    ) -> None:
        """A new not-before time for the stage's tasks (its queued ones are rescheduled with
        it, by the command; tasks added later get it too). StageInFiniteState once it ended."""
        if self.is_final:
            raise StageInFiniteState
        self._emit(
            self.StageRescheduled,
            now,
            actor,
            reason,
            job_id=self.job_id,
            not_before=not_before,
            previous=self.not_before,
        )

    def failure_in(self, result: Any) -> str | None:
        """The reason a result counts as a failure: a string in it matches a failure pattern."""
        if not self.failure_patterns or result is None:
            return None
        found = patterns.first_match(self.failure_patterns, _strings(result))
        if found is None:
            return None
        pattern, text = found
        return f"result matches failure pattern {pattern!r}: {text[:200]!r}"

    @property
    def is_final(self) -> bool:
        return self.status in STAGE_FINAL

    def _check(self, target: S) -> None:
        if target not in STAGE_TRANSITIONS[S(self.status)]:
            raise IllegalStageTransition.between(self.status, target)

    def check_tasks_can_be_added(self) -> None:
        """Tasks join a stage only while it is CREATED, PENDING or WAITING."""
        if self.is_final:
            raise StageInFiniteState
        if self.status == S.IN_PROGRESS:
            raise AddTasksNotAllowed

    def release(
        self,
        previous_stage: Stage | None,
        now: datetime,
        actor: Principal,
        shift: Callable[[], int] = lambda: 0,
    ) -> None:
        """A user's PUT PENDING, checked in the order Jobnik's manager checks it; its queued
        tasks' turns move by `shift()`."""
        if self.status == S.PENDING:
            return
        if self.completion:
            raise CompletionStageHeld
        if previous_stage is not None and previous_stage.status != S.COMPLETED:
            raise IllegalStageTransition("Previous stage is not COMPLETED")
        self._check(S.PENDING)
        self._emit(
            self.StageReleased,
            now,
            actor,
            "released by user",
            job_id=self.job_id,
            previous=self.status,
            turn_shift=shift(),
        )

    def release_after_previous(
        self, now: datetime, actor: Principal, shift: Callable[[], int] = lambda: 0
    ) -> None:
        """The previous stage completed: a CREATED stage becomes PENDING, its queued tasks'
        turns moved by `shift()`; WAITING stays. Completion stages wait for the completion
        phase instead."""
        if self.status == S.CREATED and not self.completion:
            self._emit(
                self.StageReleased,
                now,
                actor,
                "previous stage completed",
                job_id=self.job_id,
                previous=self.status,
                turn_shift=shift(),
            )

    def release_for_completion(
        self, now: datetime, actor: Principal, shift: Callable[[], int] = lambda: 0
    ) -> None:
        """The job's completion phase began: a held completion stage becomes PENDING, its
        queued tasks' turns moved by `shift()`."""
        if self.completion and self.status == S.CREATED:
            self._emit(
                self.StageReleased,
                now,
                actor,
                "completion phase",
                job_id=self.job_id,
                previous=self.status,
                turn_shift=shift(),
            )

    def start(self, now: datetime, actor: Principal) -> bool:
        """First dequeue of the stage: PENDING → IN_PROGRESS (R2). True when it started."""
        if self.status != S.PENDING:
            return False
        self._emit(self.StageStarted, now, actor, job_id=self.job_id)
        return True

    def complete(
        self, now: datetime, actor: Principal, reason: str = "all tasks completed"
    ) -> None:
        """IN_PROGRESS → COMPLETED; a released completion stage with no tasks completes from
        PENDING (an empty completion phase ends at once)."""
        if not (self.completion and self.status == S.PENDING):
            self._check(S.COMPLETED)
        self._emit(self.StageCompleted, now, actor, reason, job_id=self.job_id)

    def fail(self, task_id: UUID, now: datetime, actor: Principal) -> bool:
        """A task failed for good: the stage fails unless it has already. True if it failed."""
        if self.status == S.FAILED:
            return False
        self._check(S.FAILED)
        self._emit(
            self.StageFailed, now, actor, "a task failed", job_id=self.job_id, task_id=task_id
        )
        return True

    def abort(self, now: datetime, actor: Principal, reason: str) -> None:
        """Cascaded from the job's abort; final stages keep their status."""
        if self.is_final:
            return
        self._emit(self.StageAborted, now, actor, reason, job_id=self.job_id, previous=self.status)

    def reopen(self, runs: bool, now: datetime, actor: Principal, reason: str | None) -> None:
        """A rerun reopens the ended stage: it runs now (`runs`: PENDING, or IN_PROGRESS when it
        had started, so that the attempts still running in it end it as before) or waits for
        its turn (CREATED). A completion stage runs now only in the job's completion phase."""
        if not self.is_final:
            raise IllegalStageTransition(f"stage {self.id} is {self.status}: it has not ended")
        status = S.CREATED
        if runs:
            status = S.PENDING if self.start_time is None else S.IN_PROGRESS
        self._emit(
            self.StageReopened,
            now,
            actor,
            reason,
            job_id=self.job_id,
            previous=self.status,
            status=str(status),
        )

    def replace_user_metadata(
        self, user_metadata: dict[str, Any], now: datetime, actor: Principal
    ) -> None:
        self._emit(self.StageUserMetadataReplaced, now, actor, user_metadata=user_metadata)


def _strings(value: Any) -> Iterator[str]:
    """Every string in a JSON value (keys excluded), depth first."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)
