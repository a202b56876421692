"""Worker commands on many tasks in one transaction: a batched dequeue and a batched report.

Each task keeps its own attempt, lease, events and fencing, exactly as one request per task
would; what the batch shares is the transaction (one writer-lock turn, one commit). A report's
items are answered one by one: a stale attempt, a token that does not hold the attempt or an
illegal transition is that item's answer, recorded like a single request's, and the others go
on.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from jobnik.domain.base import Entity
from jobnik.domain.commands import command
from jobnik.domain.errors import (
    BatchTooLarge,
    Forbidden,
    IllegalTransition,
    InvalidRequest,
    JobnikError,
    NotFound,
    StaleAttempt,
)
from jobnik.domain.ports import Session
from jobnik.domain.principals import Actor, Principal
from jobnik.domain.statuses import TaskStatus
from jobnik.domain.tasks import Task
from jobnik.domain.work import WorkCommands

# What refuses one item of a batched report without touching the others: each is raised
# before the item changes anything.
ITEM_ERRORS = (NotFound, IllegalTransition, InvalidRequest, Forbidden, StaleAttempt)


@dataclass(frozen=True)
class Report:
    """One item of a batched report: a task's outcome, from the attempt that ran it."""

    task_id: UUID
    attempt: int
    status: TaskStatus
    reason: str | None = None
    fatal: bool = False
    result: dict[str, Any] | None = None


@dataclass(frozen=True)
class Outcome:
    """One item's answer: the task after the report, or the error that refused it."""

    task_id: UUID
    task: Task | None = None
    error: JobnikError | None = None


class BatchCommands(WorkCommands):
    """Batched worker commands: each task as its own command would treat it, in one
    transaction."""

    @command
    def dequeue_batch(
        self,
        stage_type: str,
        count: int,
        lease_seconds: int | None = None,
        *,
        by: Principal = Actor.WORKER,
    ) -> list[Task]:
        """Claim up to `count` eligible tasks of `stage_type` (fewer when fewer are queued,
        none when none is): each gets its own attempt, lease and TaskDequeued event."""
        if count < 1:
            raise InvalidRequest("count must be at least 1")
        self._check_batch(count)
        by.check_stage_type(stage_type)
        now = self.clock()
        with self._write() as s:
            tasks = s.claim_batch(stage_type, count)
            order: list[Entity] = []
            for task in tasks:
                stage, job = s.stage(task.stage_id), s.job(task.job_id)
                task.dequeue(now, by, lease_seconds or self.lease_seconds)
                if stage.start(now, Actor.SYSTEM):
                    job.start(now, Actor.SYSTEM)
                order += (task, stage, job)  # the events in a single dequeue's order
            s.save(*order)
        return tasks

    @command
    def report_batch(
        self, reports: Sequence[Report], *, by: Principal = Actor.WORKER
    ) -> list[Outcome]:
        """Each report as `report_task` with its attempt would make it, every cascade
        included; an item's refusal is its answer (a stale attempt's is recorded). An error
        after an item changed something (a bug, a database fault) fails the whole batch and
        changes nothing."""
        self._check_batch(len(reports))
        now = self.clock()
        with self._write() as s:
            s.read_ahead([r.task_id for r in reports])  # before the first write: one lock turn
            for job_id in self._may_fail(s, reports):
                s.hold_queue(job_id)  # before the first write, as a single failing report does
            outcomes = []
            later: list[Task] = []  # outcomes saved together, then cascaded
            for r in reports:
                task: Task | None = None
                version = None
                try:
                    task = s.task(r.task_id)
                    version = task.version
                    by.check_stage_type(task.stage_type)
                    refused = self._fenced_report(
                        s, task, r.status, r.attempt, now, r.reason, r.fatal, r.result, by, later
                    )
                except ITEM_ERRORS as exc:
                    if task is not None and task.version != version:
                        raise  # the item changed something already: all or nothing
                    outcomes.append(Outcome(r.task_id, error=exc))
                    continue
                outcomes.append(Outcome(r.task_id, task=task, error=refused))
            s.save(*later)
            for task in {t.id: t for t in later}.values():
                self._cascade(s, task, s.stage(task.stage_id), s.job(task.job_id), now)
        return outcomes

    def _check_batch(self, size: int) -> None:
        if size > self.max_batch:
            raise BatchTooLarge(f"a batch of {size} tasks; at most {self.max_batch} per request")

    @staticmethod
    def _may_fail(s: Session, reports: Sequence[Report]) -> list[UUID]:
        """The jobs whose stage a report may fail (a last attempt's failure, a fatal one, or a
        completion a failure pattern may refuse): their queue rows are held first."""
        jobs: dict[UUID, None] = {}
        for r in reports:
            try:
                task = s.task(r.task_id)
            except NotFound:
                continue
            last = task.attempts + 1 >= task.max_attempts
            if (r.status == TaskStatus.FAILED and (r.fatal or last)) or (
                r.status == TaskStatus.COMPLETED
                and last
                and s.stage(task.stage_id).failure_patterns
            ):
                jobs[task.job_id] = None
        return list(jobs)
