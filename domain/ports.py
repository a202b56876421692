"""What the application service needs from storage: one transaction, seen as a Session."""

from __future__ import annotations

from collections.abc import Collection, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol
from uuid import UUID

from jobnik.domain.base import Entity
from jobnik.domain.jobs import Job
from jobnik.domain.limits import StageTypeLimits
from jobnik.domain.schedules import Schedule
from jobnik.domain.stages import Stage
from jobnik.domain.tasks import Task
from jobnik.domain.tokens import Token
from jobnik.domain.turns import QueueTurns


@dataclass(frozen=True)
class Summary:
    """A stage's task counters (Jobnik's summary), plus jobnik's `aborted` and `delegated`."""

    pending: int = 0
    in_progress: int = 0
    completed: int = 0
    failed: int = 0
    created: int = 0
    retried: int = 0
    aborted: int = 0
    total: int = 0
    delegated: int = 0

    @property
    def percentage(self) -> int:
        return (self.completed * 100) // self.total if self.total else 0


@dataclass(frozen=True)
class ChildCounts:
    """A task's child jobs: how many it created, and how many of them have not ended."""

    total: int
    running: int


class Session(Protocol):
    """One database transaction. Loads raise the domain's NotFound errors."""

    def job(self, job_id: UUID) -> Job: ...

    def stage(self, stage_id: UUID) -> Stage: ...

    def task(self, task_id: UUID) -> Task: ...

    def token(self, token_id: UUID) -> Token:
        """The token (revoked ones too); TokenNotFound when none has that id."""
        ...

    def schedule(self, schedule_id: UUID) -> Schedule:
        """The schedule, read under the writer lock when the session writes (ScheduleNotFound
        when none, or deleted)."""
        ...

    def schedule_named(self, name: str) -> UUID | None:
        """The id of the schedule named `name`, if one exists."""
        ...

    def run_at(self, schedule_id: UUID, nominal_time: datetime) -> UUID | None:
        """The job of the schedule's run for `nominal_time` (its fire key), if it has one."""
        ...

    def retention_names_besides(self, name: str) -> int:
        """How many job names other than `name` have a retention period of their own."""
        ...

    def due_schedules(self, now: datetime, limit: int) -> list[UUID]:
        """Schedules not paused with a nominal time due at `now`, or a buffered fire."""
        ...

    def limited_types_besides(self, stage_type: str) -> int:
        """How many stage types other than `stage_type` have a limit in force."""
        ...

    def limit(self, limit_id: UUID) -> StageTypeLimits:
        """A stage type's concurrency limit (removed ones too), read under the writer lock when
        the session writes; LimitNotFound when none was ever set."""
        ...

    def stage_at(self, job_id: UUID, order: int) -> Stage | None: ...

    def stages_of(self, job_id: UUID) -> list[Stage]: ...

    def queued_tasks(self, job_id: UUID) -> list[Task]:
        """The job's tasks waiting for a worker or for their child jobs (PENDING, RETRIED,
        DELEGATED): what an abort takes with it at once."""
        ...

    def tasks_in(self, stage_id: UUID, statuses: Collection[str]) -> list[Task]:
        """The stage's tasks whose status is one of `statuses`, oldest first."""
        ...

    def children_counts(self, task_id: UUID) -> ChildCounts:
        """How many child jobs `task_id` has created, and how many of them have not ended
        (under the writer lock)."""
        ...

    def child_jobs(self, job_id: UUID) -> list[Job]:
        """The unfinished child jobs of any task of `job_id`."""
        ...

    def stale_delegations(self, before: datetime, limit: int) -> list[Task]:
        """DELEGATED tasks since before `before` whose child jobs have all ended."""
        ...

    def claim(self, stage_type: str, now: datetime) -> Task | None:
        """The next eligible task of `stage_type` (priority, then enqueue order), locked; a
        task with a not-before time only once `now` reached it. None when none, or when the
        stage type's concurrency limit has no room (the claim, committed, never takes the
        type's tasks IN_PROGRESS over its limit)."""
        ...

    def read_ahead(self, task_ids: Collection[UUID]) -> None:
        """A hint that these tasks will be loaded: a store may read them at once (loads
        still raise NotFound)."""
        ...

    def claim_batch(self, stage_type: str, count: int, now: datetime) -> list[Task]:
        """Up to `count` next eligible tasks of `stage_type`, in `claim`'s order, locked; no
        more than its concurrency limit has room for."""
        ...

    def queue_turns(self, stage_id: UUID) -> QueueTurns:
        """What the turns of the stage's tasks queued now depend on (domain/turns.py)."""
        ...

    def summary(self, stage_id: UUID) -> Summary: ...

    def hold_queue(self, *job_ids: UUID) -> None:
        """Before a command changes or removes the queued tasks of `job_ids` or of their child
        jobs: wait for dequeues under way that claimed some of them, and keep new ones off
        them. Called once, with every job, before anything else the command writes (see
        SqlSession.hold_queue); a no-op where writers never overlap."""
        ...

    def all_completed(self, stage_id: UUID) -> bool:
        """Whether every task of the stage is COMPLETED, counting this session's own saves."""
        ...

    def expired_queued(self, now: datetime, limit: int) -> list[Task]:
        """Up to `limit` queued tasks, earliest first, whose schedule-to-start limit ran out
        at or before `now` while they could be dequeued."""
        ...

    def missed_deadlines(self, now: datetime, limit: int) -> list[tuple[UUID, UUID | None]]:
        """(job, stage) of unfinished jobs (stage None) and stages whose deadline passed
        before `now`, earliest first."""
        ...

    def expired_leases(self, now: datetime, limit: int) -> list[Task]:
        """IN_PROGRESS tasks whose lease ended before `now`, oldest first."""
        ...

    def save(self, *aggregates: Entity) -> None:
        """Append the aggregates' pending events and apply them to the inline read models."""
        ...

    def erase_user_data(self, job_id: UUID) -> None:
        """Rewrite the stored events of the job, its stages and its tasks without their user
        data (data, user metadata, results, log lines), in this transaction."""
        ...

    @property
    def position(self) -> int | None:
        """The log position of the last event this session appended."""
        ...


class Store(Protocol):
    """Opens sessions: `write=True` ones serialise with every other writer."""

    def session(self, *, write: bool) -> AbstractContextManager[Session]: ...


def each(aggregates: Sequence[Entity | None]) -> Iterator[Entity]:
    """The aggregates that are there."""
    return (a for a in aggregates if a is not None)
