"""Group commit: single-task worker requests that arrive together share one transaction.

Workers dequeue and report one task per request. While one such request's transaction is being
written, the ones that arrive meanwhile wait for it, then run together in the next
(`Jobnik.run_together`): one writer-lock turn, one commit and set-based writes for all of them,
as a batch's tasks share them. A request that finds no transaction under way runs at once,
alone: nothing waits for a deadline or for company. The server and the database spend less CPU
per task; the event loop goes on reading and answering other requests meanwhile.

Each request still gets its own answer (its task, or its own error), its own events and trace,
and its own `X-Jobnik-Position` (the group's commit when its own command wrote, none when it did
not). When the shared transaction fails as a whole (a database fault, a report that failed after
it changed something), each of its requests runs again alone, as if no group had been.
DELEGATED reports (they read the task's child jobs) always run alone.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from uuid import UUID

from jobnik.api import positions
from jobnik.domain.application import Jobnik
from jobnik.domain.base import REQUEST_TRACE
from jobnik.domain.batches import Claiming
from jobnik.domain.principals import Actor, Principal
from jobnik.domain.statuses import TaskStatus
from jobnik.domain.tasks import Task
from jobnik.domain.work import Report, Reporting

log = logging.getLogger(__name__)


@dataclass(eq=False)
class Call:
    """One request's dequeue (`claiming`) or report (`reporting`), waiting for its group."""

    claiming: Claiming | None = None
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


class GroupCommit:
    """`dequeue` and `report_task` of `jobnik`, as the single-task worker routes call them,
    run in groups (see the module). `observe` hears the number of commands of each
    transaction: a group's once it ran, 1 for each call of a failed group, run alone."""

    def __init__(self, jobnik: Jobnik, observe: Callable[[int], None] | None = None) -> None:
        self.jobnik = jobnik
        self.observe = observe
        self.grouper = Grouper(self._run_group, jobnik.max_batch)

    def dequeue(
        self, stage_type: str, lease_seconds: int | None = None, *, by: Principal = Actor.WORKER
    ) -> Task:
        """`Jobnik.dequeue`, grouped."""
        by.check_stage_type(stage_type)
        call = Call(claiming=Claiming(stage_type, by, lease_seconds, _trace(by)))
        if self._grouped(call):
            return self._answer(call)
        return self.jobnik.dequeue(stage_type, lease_seconds, by=by)

    def report_task(
        self,
        task_id: UUID,
        status: TaskStatus,
        *,
        attempt: int | None = None,
        reason: str | None = None,
        fatal: bool = False,
        result: dict[str, object] | None = None,
        by: Principal = Actor.WORKER,
    ) -> Task:
        """`Jobnik.report_task`, grouped unless DELEGATED."""
        report = Report(task_id, attempt, status, reason, fatal, result)
        if status != TaskStatus.DELEGATED:
            call = Call(reporting=Reporting(report, by, report.first_read(by), _trace(by)))
            if self._grouped(call):
                return self._answer(call)
        return self._report_alone(report, by)

    def _grouped(self, call: Call) -> bool:
        """Whether `call` ran in a group (False: it must run alone)."""
        try:
            self.grouper.submit(call)
        except Exception:
            if not call.alone:
                raise
        if call.alone:
            self._observe(1)  # (its group's transaction was not counted: it failed)
            return False
        return True

    @staticmethod
    def _answer(call: Call) -> Task:
        if call.position is not None:
            positions.note_written(call.position)
        if isinstance(call.answer, Exception):
            raise call.answer
        assert call.answer is not None
        return call.answer

    def _run_group(self, calls: list[Call]) -> None:
        """Run `calls`, the first of which is the leader's own, in the leader's thread."""
        with _untold():
            if len(calls) == 1:
                self._run_alone(calls[0])
            else:
                self._together(calls)
        self._observe(len(calls))

    def _run_alone(self, call: Call) -> None:
        """The leader's own call, as if it were not grouped (a group of one)."""
        box: dict[str, int] = {}
        positions.REQUEST_POSITIONS.set(box)
        try:
            if call.claiming is not None:
                c = call.claiming
                call.answer = self.jobnik.dequeue(c.stage_type, c.lease_seconds, by=c.by)
            elif call.reporting is not None:
                call.answer = self._report_alone(call.reporting.report, call.reporting.by)
        except Exception as exc:  # noqa: BLE001 - its caller's answer, raised in its thread
            call.answer = exc
        call.position = box.get(positions.WRITTEN)

    def _report_alone(self, r: Report, by: Principal) -> Task:
        return self.jobnik.report_task(
            r.task_id,
            r.status,
            attempt=r.attempt,
            reason=r.reason,
            fatal=r.fatal,
            result=r.result,
            by=by,
        )

    def _together(self, calls: list[Call]) -> None:
        dequeues = [c for c in calls if c.claiming is not None]
        reports = [c for c in calls if c.reporting is not None]
        token = REQUEST_TRACE.set(None)  # each call's events carry its own trace
        try:
            done = self.jobnik.run_together(
                [c.claiming for c in dequeues if c.claiming is not None],
                [c.reporting for c in reports if c.reporting is not None],
            )
        finally:
            REQUEST_TRACE.reset(token)
        for c, task in zip(dequeues, done.dequeued, strict=True):
            c.answer = task
            if isinstance(task, Task):
                c.position = done.position
        for c, outcome in zip(reports, done.reported, strict=True):
            c.answer = outcome.error if outcome.error is not None else outcome.task
            if outcome.task is not None:  # it wrote (a refusal is recorded too)
                c.position = done.position

    def _observe(self, commands: int) -> None:
        """Tell the observer (once the group ran: an observer's error is logged, not raised,
        or the calls of a group that committed would run again)."""
        if self.observe is None:
            return
        try:
            self.observe(commands)
        except Exception:
            log.exception(
                "a group commit observer failed", extra={"action": "group_observer_failed"}
            )


def _trace(by: Principal) -> str | None:
    """The trace a call's events carry: its principal's, else its request's."""
    return by.trace_id or REQUEST_TRACE.get()


@contextmanager
def _untold() -> Iterator[None]:
    """Meanwhile, commits note their position in no request's box: the leader's group runs in
    its own request's context, and each call notes its own position (`_answer`)."""
    token = positions.REQUEST_POSITIONS.set(None)
    try:
        yield
    finally:
        positions.REQUEST_POSITIONS.reset(token)
