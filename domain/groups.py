"""Group commit: worker commands that arrive together share one transaction.

Workers dequeue and report one task at a time. With `group_commit`, when several threads of a
process call `dequeue` or `report_task` at once (an API server's requests), the calls that arrive
while one transaction is under way wait for it, then run together in the next: one writer-lock
turn, one commit and set-based writes for all of them, as a batch's tasks share them. A call that
finds no transaction under way runs at once, alone: nothing waits for a deadline or for company.
That costs the server and the database less CPU per task; in exchange a process runs one such
transaction at a time. An API server gains (its event loop goes on reading and answering other
requests meanwhile); a few worker threads of one process that call the engine directly would all
wait through each group's round trips with nothing else to run, so `Jobnik` leaves it off unless
asked (the API server's `JOBNIK_GROUP_COMMIT` turns it on by default). A DELEGATED report, and a
call made inside another command or write session, runs on its own as always.

Each caller still gets its own answer: its task, or its own error (none queued, a stale attempt,
a refused transition), with its own attempt, lease, events and trace. Within the shared
transaction the dequeues run first, then the reports, which is one order the calls could have
taken one by one. When the shared transaction fails as a whole (a database fault, or a report
that failed after it changed something), each of its calls runs again on its own, so a fault is
its own caller's alone.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from jobnik.domain.base import REQUEST_TRACE
from jobnik.domain.batches import BatchCommands, Reporting
from jobnik.domain.commands import command, running, utcnow
from jobnik.domain.errors import TaskNotFound
from jobnik.domain.ports import Session, Store
from jobnik.domain.principals import Actor, Principal
from jobnik.domain.statuses import DEFAULT_LEASE_SECONDS, DEFAULT_MAX_BATCH, TaskStatus
from jobnik.domain.tasks import Task
from jobnik.domain.work import FirstRead, Report

log = logging.getLogger(__name__)


@dataclass(eq=False)
class Call:
    """One caller's dequeue (`reporting` None) or report, waiting for its group."""

    by: Principal
    trace: str | None  # the trace its events carry where its principal names none
    stage_type: str = ""
    lease_seconds: int | None = None
    reporting: Reporting | None = None
    answer: Task | Exception | None = None
    position: int | None = None  # where its group committed, when it wrote
    lead: bool = False  # woken to run the next group
    alone: bool = False  # woken to run on its own: its group failed
    done: threading.Event = field(default_factory=threading.Event)


class Grouper:
    """Runs calls in groups: the first caller leads (runs every call waiting when it starts,
    up to `limit`, by `run`), then hands the lead to the first caller still waiting."""

    def __init__(self, run: Callable[[list[Call]], None], limit: int) -> None:
        self._run, self._limit = run, limit
        self._lock = threading.Lock()
        self._waiting: list[Call] = []
        self._busy = False  # a group is under way

    @property
    def waiting(self) -> int:
        """How many calls wait for the group under way to end."""
        with self._lock:
            return len(self._waiting)

    def submit(self, call: Call) -> None:
        """Return once `call` has its answer, or must run alone (`call.alone`)."""
        with self._lock:
            lead = not self._busy
            if lead:
                self._busy = True
            else:
                self._waiting.append(call)
        if not lead:
            try:
                call.done.wait()
            except BaseException:
                self._leave(call)
                raise
            if not call.lead:
                return
        with self._lock:
            rest = self._limit - 1
            group, self._waiting = [call, *self._waiting[:rest]], self._waiting[rest:]
        try:
            self._run(group)
        except BaseException:
            for c in group:
                c.alone = True
            raise
        finally:
            for c in group[1:]:
                c.done.set()
            with self._lock:
                self._hand_over()

    def _hand_over(self) -> None:
        """(Holding the lock.) The lead to the first call waiting, or the grouper free."""
        if self._waiting:
            after = self._waiting.pop(0)
            after.lead = True
            after.done.set()
        else:
            self._busy = False

    def _leave(self, call: Call) -> None:
        """`call`'s caller stopped waiting (interrupted): it leaves the line, and hands on the
        lead if it was handed it. A call already in a running group is answered to no one."""
        with self._lock:
            if call in self._waiting:
                self._waiting.remove(call)
            elif call.lead:
                call.lead = False
                self._hand_over()


class GroupCommands(BatchCommands):
    """`dequeue` and `report_task` with group commit (see the module), unless `group_commit`
    is off, or the call runs inside another command or write session (it joins that one)."""

    def __init__(
        self,
        store: Store,
        clock: Callable[[], datetime] = utcnow,
        *,
        lease_seconds: int = DEFAULT_LEASE_SECONDS,
        max_batch: int = DEFAULT_MAX_BATCH,
        group_commit: bool = False,
    ) -> None:
        super().__init__(store, clock, lease_seconds=lease_seconds, max_batch=max_batch)
        self.group_commit = group_commit
        self.grouper = Grouper(self._run_group, max_batch)
        # Called with the number of commands each transaction ran: by a group's leader once
        # its group has run, and with 1 by each call of a failed group, which runs on its own.
        self.on_group: list[Callable[[int], None]] = []

    def _grouped(self, call: Call) -> Task | None:
        """The call's task (or its error, raised), or None when it must run on its own."""
        try:
            self.grouper.submit(call)
        except Exception:
            if not call.alone:
                raise
        if call.alone:
            self._observe(1)  # (its group's transaction was not counted: it failed)
            return None
        if call.position is not None:
            self.store.committed_elsewhere(call.position)
        if isinstance(call.answer, Exception):
            raise call.answer
        assert call.answer is not None
        return call.answer

    def _groups(self) -> bool:
        return self.group_commit and not running() and not self.store.in_write_session()

    def dequeue(
        self, stage_type: str, lease_seconds: int | None = None, *, by: Principal = Actor.WORKER
    ) -> Task:
        if self._groups():
            by.check_stage_type(stage_type)
            call = Call(by, by.trace_id or REQUEST_TRACE.get(), stage_type, lease_seconds)
            task = self._grouped(call)
            if task is not None:
                return task
        return super().dequeue(stage_type, lease_seconds, by=by)

    def _report_one(self, report: Report, seen: FirstRead | None, *, by: Principal) -> Task:
        if self._groups() and report.status != TaskStatus.DELEGATED:
            trace = by.trace_id or REQUEST_TRACE.get()
            task = self._grouped(Call(by, trace, reporting=Reporting(report, by, seen, trace)))
            if task is not None:
                return task
        return super()._report_one(report, seen, by=by)

    def _run_group(self, calls: list[Call]) -> None:
        """Run `calls`; the first is the caller's own, in its own thread. Alone, it runs as its
        own command would; several run in one transaction, with no trace of their own."""
        if len(calls) == 1:
            self._run_alone(calls[0])
        else:
            token = REQUEST_TRACE.set(None)
            try:
                self._together(calls)
            finally:
                REQUEST_TRACE.reset(token)
        self._observe(len(calls))

    def _observe(self, commands: int) -> None:
        """Tell the observers (once the group ran: an observer's error is logged, not raised,
        or the calls of a group that committed would run again)."""
        for observe in self.on_group:
            try:
                observe(commands)
            except Exception:
                log.exception(
                    "a group commit observer failed", extra={"action": "group_observer_failed"}
                )

    def _run_alone(self, call: Call) -> None:
        try:
            if call.reporting is None:
                call.answer = super().dequeue(call.stage_type, call.lease_seconds, by=call.by)
                return
            reporting = call.reporting
            call.answer = super()._report_one(reporting.report, reporting.seen, by=call.by)
        except Exception as exc:  # noqa: BLE001 - its caller's answer, raised in its thread
            call.answer = exc

    @command
    def _together(self, calls: Sequence[Call]) -> None:
        """The dequeues, then the reports, in one transaction."""
        now = self.clock()
        dequeues = [c for c in calls if c.reporting is None]
        reports = [c for c in calls if c.reporting is not None]
        items = [c.reporting for c in reports if c.reporting is not None]
        with self.store.commits_untold(), self._write() as s:  # each call's context is told
            self._before_reports(s, items)  # (row locks that wait come before the claims)
            wrote = self._claim_each(s, dequeues, now)
            outcomes = self._report_each(s, items, now)
            position = s.position
        for c in wrote:
            c.position = position
        for c, outcome in zip(reports, outcomes, strict=True):
            c.answer = outcome.error if outcome.error is not None else outcome.task
            if outcome.task is not None:  # it wrote (a refusal is recorded too)
                c.position = position

    def _claim_each(self, s: Session, calls: Sequence[Call], now: datetime) -> list[Call]:
        """Claim a task for each dequeue (by stage type, in arrival order) and dequeue it; a
        call left without one gets TaskNotFound. Returns the calls that got a task."""
        by_type: dict[str, list[Call]] = {}
        for c in calls:
            by_type.setdefault(c.stage_type, []).append(c)
        got: list[Call] = []
        claims = []
        for stage_type, waiting in by_type.items():
            tasks = s.claim_batch(stage_type, len(waiting))
            for c in waiting[len(tasks) :]:
                c.answer = TaskNotFound()
            for c, task in zip(waiting, tasks, strict=False):
                c.answer = task
                got.append(c)
                claims.append((task, c.by, c.lease_seconds, c.trace))
        self._dequeue_each(s, claims, now)
        return got
