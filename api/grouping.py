"""Group commit: single-task worker requests that arrive together share one transaction.

Workers dequeue and report one task per request. The worker routes hand each such command to
one committer thread per API process and await its answer on the event loop. The committer
runs what waits for it together (`Jobnik.run_together`): one writer-lock turn, one commit and
set-based writes for all of them, as a batch's tasks share them. A command that finds the
committer idle runs at once, alone: nothing waits for a deadline or for company. While a group
is being written the event loop goes on reading requests, and those that arrive meanwhile make
the next group. So the server and the database spend less CPU per task, and a request crosses
from the event loop to a thread and back once.

Each request still gets its own answer (its task, or its own error), its own events and trace,
and its own `X-Jobnik-Position` (the group's commit when its own command wrote, none when it did
not). When the shared transaction fails as a whole (a database fault, a report that failed after
it changed something), each of its commands runs again alone, as if no group had been.
DELEGATED reports (they read the task's child jobs) always run alone. With group commit off
(`limit` 1) every command runs alone, in turn.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from contextvars import Context, copy_context
from dataclasses import dataclass, field
from typing import Final
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

# How long an idle committer thread waits for a command before it ends (the next command
# starts another): an API process that serves no worker keeps no thread for them.
IDLE_SECONDS: Final = 5.0


@dataclass(eq=False)
class Call:
    """One request's dequeue (`claiming`) or report (`reporting`): what the committer runs, in
    the request's `context`, and the future its answer and log position go to."""

    claiming: Claiming | None = None
    reporting: Reporting | None = None
    context: Context = field(default_factory=copy_context)
    future: Future[tuple[Task, int | None]] = field(default_factory=Future)

    @property
    def groups(self) -> bool:
        """Whether it may share a transaction (a DELEGATED report reads child jobs: alone)."""
        return self.reporting is None or self.reporting.report.status != TaskStatus.DELEGATED


class GroupCommit:
    """`dequeue` and `report_task` of `jobnik`, as the single-task worker routes await them,
    run by one committer thread in groups of up to `limit` (see the module). `observe` hears
    the number of commands of each transaction: a group's once it ran, 1 for each call run
    alone."""

    def __init__(
        self,
        jobnik: Jobnik,
        observe: Callable[[int], None] | None = None,
        limit: int | None = None,
    ) -> None:
        self.jobnik = jobnik
        self.observe = observe
        self.limit = jobnik.max_batch if limit is None else limit
        self._line: queue.SimpleQueue[Call] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._serving = False  # a committer thread is running

    @property
    def waiting(self) -> int:
        """How many calls wait for the committer."""
        return self._line.qsize()

    @property
    def serving(self) -> bool:
        """Whether a committer thread runs (it ends once idle for IDLE_SECONDS)."""
        return self._serving

    async def dequeue(
        self, stage_type: str, lease_seconds: int | None = None, *, by: Principal = Actor.WORKER
    ) -> Task:
        """`Jobnik.dequeue`, grouped."""
        by.check_stage_type(stage_type)
        return await self._answer(
            Call(claiming=Claiming(stage_type, by, lease_seconds, _trace(by)))
        )

    async def report_task(
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
        return await self._answer(
            Call(reporting=Reporting(report, by, report.first_read(by), _trace(by)))
        )

    def submit(self, call: Call) -> Future[tuple[Task, int | None]]:
        """Put `call` in line for the committer (started if none runs); its future."""
        with self._lock:
            self._line.put(call)
            if not self._serving:
                self._serving = True
                threading.Thread(
                    target=self._serve, name="jobnik-group-commit", daemon=True
                ).start()
        return call.future

    async def _answer(self, call: Call) -> Task:
        task, position = await asyncio.wrap_future(self.submit(call))
        if position is not None:
            positions.note_written(position)
        return task

    def _serve(self) -> None:
        """The committer: runs the calls in line, up to `limit` at a time, until none came for
        IDLE_SECONDS. A call whose request was cancelled meanwhile is left out."""
        while True:
            try:
                group = [self._line.get(timeout=IDLE_SECONDS)]
            except queue.Empty:
                with self._lock:
                    if self._line.empty():
                        self._serving = False
                        return
                continue
            while len(group) < self.limit:
                try:
                    group.append(self._line.get_nowait())
                except queue.Empty:
                    break
            running = [c for c in group if c.future.set_running_or_notify_cancel()]
            try:
                self._run(running)
            except Exception as exc:  # (a fault of this module: answered, not left waiting)
                log.exception("group commit failed", extra={"action": "group_commit_failed"})
                for c in running:
                    if not c.future.done():
                        c.future.set_exception(exc)

    def _run(self, calls: list[Call]) -> None:
        """Run `calls`: those that may share a transaction together (in the first one's
        context: its trace holds the group's database calls), then the rest, and those of a
        group that failed as a whole, alone."""
        together = [c for c in calls if c.groups]
        alone = [c for c in calls if not c.groups]
        if len(together) > 1:
            answers = together[0].context.run(self._run_together, together)
            if answers is None:
                alone = together + alone
            else:
                self._observe(len(together))
                for c, (answer, position) in zip(together, answers, strict=True):
                    _settle(c, answer, position)
        else:
            alone = together + alone
        for c in alone:
            self._run_alone(c)

    def _run_together(
        self, calls: list[Call]
    ) -> list[tuple[Task | Exception | None, int | None]] | None:
        """Each call's answer and position, the calls run in one transaction (None: it
        failed as a whole)."""
        dequeues = [c for c in calls if c.claiming is not None]
        reports = [c for c in calls if c.reporting is not None]
        trace = REQUEST_TRACE.set(None)  # each call's events carry its own trace
        untold = positions.REQUEST_POSITIONS.set(None)  # each call notes its own position
        try:
            done = self.jobnik.run_together(
                [c.claiming for c in dequeues if c.claiming is not None],
                [c.reporting for c in reports if c.reporting is not None],
            )
        except Exception:  # noqa: BLE001 - each call runs again alone
            return None
        finally:
            positions.REQUEST_POSITIONS.reset(untold)
            REQUEST_TRACE.reset(trace)
        answers: dict[Call, tuple[Task | Exception | None, int | None]] = {}
        for c, task in zip(dequeues, done.dequeued, strict=True):
            answers[c] = (task, done.position if isinstance(task, Task) else None)
        for c, outcome in zip(reports, done.reported, strict=True):
            # (a report refused is recorded too: it wrote when it has a task)
            written = done.position if outcome.task is not None else None
            answers[c] = (outcome.error if outcome.error is not None else outcome.task, written)
        return [answers[c] for c in calls]

    def _run_alone(self, call: Call) -> None:
        """`call` in its own transaction, in its request's context."""
        answer, position = call.context.run(self._alone, call)
        self._observe(1)
        _settle(call, answer, position)

    def _alone(self, call: Call) -> tuple[Task | Exception, int | None]:
        box: dict[str, int] = {}
        positions.REQUEST_POSITIONS.set(box)
        try:
            if call.claiming is not None:
                c = call.claiming
                answer: Task | Exception = self.jobnik.dequeue(
                    c.stage_type, c.lease_seconds, by=c.by
                )
            else:
                assert call.reporting is not None
                r, by = call.reporting.report, call.reporting.by
                answer = self.jobnik.report_task(
                    r.task_id,
                    r.status,
                    attempt=r.attempt,
                    reason=r.reason,
                    fatal=r.fatal,
                    result=r.result,
                    by=by,
                )
        except Exception as exc:  # noqa: BLE001 - its caller's answer, raised in its request
            answer = exc
        return answer, box.get(positions.WRITTEN)

    def _observe(self, commands: int) -> None:
        """Tell the observer (once the commands ran: an observer's error is logged, not
        raised, or the calls of a group that committed would run again)."""
        if self.observe is None:
            return
        try:
            self.observe(commands)
        except Exception:
            log.exception(
                "a group commit observer failed", extra={"action": "group_observer_failed"}
            )


def _settle(call: Call, answer: Task | Exception | None, position: int | None) -> None:
    if isinstance(answer, Exception):
        call.future.set_exception(answer)
    else:
        assert answer is not None
        call.future.set_result((answer, position))


def _trace(by: Principal) -> str | None:
    """The trace a call's events carry: its principal's, else its request's."""
    return by.trace_id or REQUEST_TRACE.get()
