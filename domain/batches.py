"""Worker commands on many tasks in one transaction: a batched dequeue and a batched report.

Each task keeps its own attempt, lease, events and fencing, exactly as one request per task
would; what the batch shares is the transaction (one writer-lock turn, one commit). A report's
items are answered one by one: a stale attempt, a token that does not hold the attempt or an
illegal transition is that item's answer, recorded like a single request's, and the others go
on.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

from jobnik.domain.base import REQUEST_TRACE, Entity
from jobnik.domain.commands import command
from jobnik.domain.errors import (
    BatchTooLarge,
    Forbidden,
    IllegalTransition,
    InvalidRequest,
    JobnikError,
    NotFound,
    StaleAttempt,
    TaskNotFound,
    TaskStatusUpdateFailed,
)
from jobnik.domain.ports import Session
from jobnik.domain.principals import Actor, Principal
from jobnik.domain.statuses import TaskStatus
from jobnik.domain.tasks import Task
from jobnik.domain.turns import Turns
from jobnik.domain.work import Report, Reporting, WorkCommands

# What refuses one item of a batched report without touching the others: each is raised
# before the item changes anything.
ITEM_ERRORS = (
    NotFound,
    IllegalTransition,
    InvalidRequest,
    Forbidden,
    StaleAttempt,
    TaskStatusUpdateFailed,
)


@contextmanager
def traced(trace: str | None) -> Iterator[None]:
    """Events made meanwhile carry `trace` (when their actor names none), as the events of a
    command run for that request would; None keeps the command's."""
    if trace is None:
        yield
        return
    token = REQUEST_TRACE.set(trace)
    try:
        yield
    finally:
        REQUEST_TRACE.reset(token)


@dataclass(frozen=True)
class Claiming:
    """A dequeue with who asks for it: `trace`, as `Reporting`'s."""

    stage_type: str
    by: Principal
    lease_seconds: int | None = None
    trace: str | None = None


@dataclass(frozen=True)
class Together:
    """What `run_together` answers: each dequeue's task (or TaskNotFound), each report's
    outcome, and the log position their transaction committed (None: it wrote nothing)."""

    dequeued: list[Task | TaskNotFound]
    reported: list[Outcome]
    position: int | None


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
            tasks = s.claim_batch(stage_type, count, now)
            self._dequeue_each(s, [(task, by, lease_seconds, None) for task in tasks], now)
        return tasks

    def _dequeue_each(
        self,
        s: Session,
        claims: Sequence[tuple[Task, Principal, int | None, str | None]],
        now: datetime,
    ) -> None:
        """Dequeue each claimed task for its principal, with its lease (None: the default)
        and trace (as `traced`), and save them together."""
        order: list[Entity] = []
        for task, by, lease_seconds, trace in claims:
            stage, job = s.stage(task.stage_id), s.job(task.job_id)
            with traced(trace):
                task.dequeue(now, by, lease_seconds or self.lease_seconds)
                if stage.start(now, Actor.SYSTEM):
                    job.start(now, Actor.SYSTEM)
            order += (task, stage, job)  # the events in a single dequeue's order
        s.save(*order)

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
        items = [Reporting(r, by) for r in reports]
        with self._write() as s:
            self._before_reports(s, items)
            return self._report_each(s, items, now)

    def _before_reports(self, s: Session, items: Sequence[Reporting]) -> None:
        """Before the first write (one lock turn): read the tasks ahead, and hold the queue
        rows of the jobs whose stage a report may fail, as a single failing report does."""
        s.read_ahead([i.report.task_id for i in items])
        s.hold_queue(*self._may_fail(s, [i.report for i in items]))

    def _report_each(self, s: Session, items: Sequence[Reporting], now: datetime) -> list[Outcome]:
        """Report each item (`_before_reports` first): the outcomes are saved together, then
        cascaded; an item's refusal is its outcome."""
        outcomes = []
        later: list[Task] = []  # outcomes saved together, then cascaded
        turns = Turns(s)  # (two tasks of a stage queued again take two turns)
        accepted: dict[UUID, str | None] = {}  # the tasks a report changed, with its trace
        for item in items:
            r = item.report
            task: Task | None = None
            version = None
            try:
                with traced(item.trace):
                    task = s.task(r.task_id)
                    version = task.version
                    item.by.check_stage_type(task.stage_type)
                    if item.seen is not None:
                        item.seen.check(version)
                    refused = self._fenced_report(s, task, r, now, item.by, later, turns)
            except ITEM_ERRORS as exc:
                if task is not None and task.version != version:
                    raise  # the item changed something already: all or nothing
                outcomes.append(Outcome(r.task_id, error=exc))
                continue
            if refused is None:
                accepted.setdefault(task.id, item.by.trace_id or item.trace)
            outcomes.append(Outcome(r.task_id, task=task, error=refused))
        s.save(*later)
        # Cascaded as one by one: a refused report cascades nothing, and a stage whose last
        # tasks complete together completes at the turn of the last of them.
        saved = {t.id: t for t in later}
        cascading = [saved[i] for i in accepted if i in saved]
        last_completed = {t.stage_id: t.id for t in cascading if t.status == TaskStatus.COMPLETED}
        for task in cascading:
            if task.status == TaskStatus.COMPLETED and last_completed[task.stage_id] != task.id:
                continue
            with traced(accepted[task.id]):
                self._cascade(s, task, s.stage(task.stage_id), s.job(task.job_id), now)
        return outcomes

    @command
    def run_together(self, dequeues: Sequence[Claiming], reports: Sequence[Reporting]) -> Together:
        """Dequeues and reports of several workers in one transaction: the dequeues first (by
        stage type, in their order), then the reports, one order they could have had one by
        one. Each is answered as its own command would be: a dequeue with its own task,
        attempt, lease and trace, or TaskNotFound when the claims ran out; a report as a
        batch's item. An error after a report changed something fails them all, and changes
        nothing."""
        now = self.clock()
        with self._write() as s:
            self._before_reports(s, reports)  # (row locks that wait come before the claims)
            dequeued = self._claim_each(s, dequeues, now)
            reported = self._report_each(s, reports, now)
        return Together(dequeued, reported, s.position)

    def _claim_each(
        self, s: Session, dequeues: Sequence[Claiming], now: datetime
    ) -> list[Task | TaskNotFound]:
        """Claim a task for each dequeue (by stage type, in their order) and dequeue it; one
        left without gets TaskNotFound."""
        by_type: dict[str, list[int]] = {}
        for i, d in enumerate(dequeues):
            by_type.setdefault(d.stage_type, []).append(i)
        answers: list[Task | TaskNotFound] = [TaskNotFound() for _ in dequeues]
        claims = []
        for stage_type, waiting in by_type.items():
            for i, task in zip(waiting, s.claim_batch(stage_type, len(waiting), now), strict=False):
                d = dequeues[i]
                answers[i] = task
                claims.append((task, d.by, d.lease_seconds, d.trace))
        self._dequeue_each(s, claims, now)
        return answers

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
