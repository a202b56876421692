"""The worker runtime: N threads poll one stage type, run the handler, heartbeat, report."""

from __future__ import annotations

import asyncio
import inspect
import logging
import math
import signal
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry

from jobnik.workers import tracing
from jobnik.workers.backoff import Backoff
from jobnik.workers.batch import Outcome, as_result, report_batch
from jobnik.workers.client import JobnikClient
from jobnik.workers.consumer import Consumer
from jobnik.workers.context import TaskContext
from jobnik.workers.errors import (
    AccessRefused,
    ApiError,
    FatalTaskError,
    TransportError,
    UnsendableBody,
    access_refusal,
)
from jobnik.workers.metrics import WorkerMetrics
from jobnik.workers.models import Delegated, Task
from jobnik.workers.producer import Producer

REASON_MAX = 2000  # the longest failure reason the server keeps
HANDED_BACK = "HANDED_BACK"  # an outcome reported as a hand-back (no attempt spent)

log = logging.getLogger(__name__)

Handler = Callable[[Task, TaskContext], Any | Awaitable[Any]]


@dataclass
class WorkerStats:
    """Counters a status line shows."""

    done: int = 0
    failed: int = 0
    cancelled: int = 0  # reported, but the job had been aborted: recorded, moved nothing
    delegated: int = 0  # waiting for child jobs
    refused: int = 0
    running: int = 0


@dataclass
class _Attempt:
    """One task attempt this worker holds. `lock` serialises its heartbeats with its end (the
    report or the hand-back), so no heartbeat reaches the server after the attempt ended."""

    task: Task
    context: TaskContext
    trace: Any = None  # the handler span's tracing context, for its heartbeats
    lock: threading.Lock = field(default_factory=threading.Lock)
    ended: bool = False

    def end(self) -> bool:
        """Mark the attempt ended, after any heartbeat in flight; False if it already was."""
        with self.lock:
            first, self.ended = not self.ended, True
            return first


class Worker:
    """Runs `handler(task, context)` for tasks of `stage_type`, `concurrency` at a time.

    A plain function runs in a worker thread; a coroutine function runs in its own event loop in
    that thread. Returning reports COMPLETED, with the returned dict (or `{"value": ...}` for
    any other JSON value) as the task's result; returning `DELEGATED` after creating child jobs
    (`context.create_child_job`) reports DELEGATED: the task waits for them and comes back with
    `context.children`. Raising reports FAILED (the server retries while attempts remain);
    raising `FatalTaskError` fails without retry. While a handler runs, the
    worker heartbeats its lease every `heartbeat_interval` seconds (the lease is `lease_seconds`,
    three intervals by default); an aborted job or a lost lease sets `context.cancelled`.
    With `batch_size` > 1 each poller claims up to that many tasks in one request, runs their
    handlers one after another (heartbeating every task it holds meanwhile) and reports their
    outcomes in one request.
    `stop()` (or SIGTERM/SIGINT under `run()`) stops polling, waits up to `grace_period` seconds
    for running handlers, then hands unfinished tasks back to the queue.
    A 401 or 403 from the API, to the worker's own calls or to those its handler makes, is a
    configuration to fix, not the task's failure: the worker hands that task back (no attempt
    spent), stops polling as on `stop()`, and `run()` raises AccessRefused once it drained.

    Its client is `client`, else one to `base_url` with `token` (by default JOBNIK_API_URL and
    JOBNIK_TOKEN, as `jobnik worker run`). `metrics` (workers/metrics.py) records into
    `registry` (a registry of its own by default).
    With OpenTelemetry installed and a tracer provider set, the handler runs in a span whose
    parent is the task's stored traceparent (workers/tracing.py).
    """

    def __init__(
        self,
        stage_type: str,
        handler: Handler,
        *,
        base_url: str | None = None,
        token: str | None = None,
        client: JobnikClient | None = None,
        concurrency: int = 1,
        heartbeat_interval: float = 10.0,
        grace_period: float = 30.0,
        lease_seconds: int | None = None,
        backoff: Backoff | None = None,
        registry: CollectorRegistry | None = None,
        batch_size: int = 1,
    ) -> None:
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        if client is None:
            client = JobnikClient(base_url, pool_size=concurrency + 2, token=token)  # + heartbeats
        self.metrics = WorkerMetrics(stage_type, registry)
        if client.observe is None:
            client.observe = self.metrics.http
        self.stage_type = stage_type
        self.handler = handler
        self.batch_size = batch_size
        self.concurrency = concurrency
        self.heartbeat_interval = heartbeat_interval
        # three missed heartbeats and the task goes back to the queue
        self.lease_seconds = lease_seconds or max(1, math.ceil(3 * heartbeat_interval))
        self.grace_period = grace_period
        self.backoff = backoff or Backoff()
        self.consumer = Consumer(client)
        self.producer = Producer(client)
        self.stats = WorkerStats()
        self._stop = threading.Event()
        self._done = threading.Event()  # run() returned: the heartbeat thread ends
        self._lock = threading.Lock()
        self._active: dict[str, _Attempt] = {}
        self.access_refused: ApiError | None = None  # the first 401 or 403, which stopped it

    # -- lifecycle --------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop polling; `run()` then drains and returns."""
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def run(self, *, install_signal_handlers: bool = True) -> None:
        """Work until `stop()` or SIGTERM/SIGINT, then drain (grace period) and hand back."""
        if install_signal_handlers and threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, lambda *_: self.stop())
        log.info(
            "worker started",
            extra={
                "action": "worker_started",
                "stage_type": self.stage_type,
                "concurrency": self.concurrency,
            },
        )
        pollers = [
            threading.Thread(target=self._poll, name=f"jobnik-worker-{i}", daemon=True)
            for i in range(self.concurrency)
        ]
        beats = threading.Thread(target=self._heartbeats, name="jobnik-heartbeat", daemon=True)
        for t in [*pollers, beats]:
            t.start()
        self._stop.wait()
        log.info(
            "worker stopping", extra={"action": "worker_stopping", "running": self.stats.running}
        )
        deadline = threading.Event()
        timer = threading.Timer(self.grace_period, deadline.set)
        timer.start()
        for t in pollers:
            while t.is_alive() and not deadline.is_set():
                t.join(0.05)
        timer.cancel()
        self._hand_back()
        self._done.set()
        log.info("worker stopped", extra={"action": "worker_stopped", **vars(self.stats)})
        if self.access_refused is not None:
            raise AccessRefused(self.access_refused)

    def _refuse_access(self, error: ApiError) -> None:
        """Stop asking for work: the API refused this worker's token or role (`error`)."""
        with self._lock:
            first = self.access_refused is None
            if first:
                self.access_refused = error
        if first:
            log.error(
                "access refused (%s): the worker stops asking for work; check its token "
                "(JOBNIK_TOKEN), its role and its stage types",
                error,
                extra={"action": "access_refused", "code": error.code, "status": error.status},
            )
        self.stop()

    # -- polling ----------------------------------------------------------------------------

    def _poll(self) -> None:
        idle = 0
        while not self._stop.is_set():
            started, t0 = tracing.now_ns(), time.perf_counter()
            try:
                tasks = self._dequeue()
            except (ApiError, TransportError) as exc:
                self.metrics.polled("error", time.perf_counter() - t0)
                refusal = access_refusal(exc)
                if refusal is not None:
                    self._refuse_access(refusal)
                    return
                log.warning("dequeue failed: %s", exc, extra={"action": "dequeue_failed"})
                tasks = []
            else:
                self.metrics.polled("success" if tasks else "not_found", time.perf_counter() - t0)
            if not tasks:
                idle += 1
                self._stop.wait(self.backoff.delay(idle))
                continue
            idle = 0
            for task in tasks:
                tracing.record_dequeue(task, self.stage_type, started)
            if self.batch_size > 1:
                self._work_batch(tasks)
            else:
                self._work(tasks[0])

    def _dequeue(self) -> list[Task]:
        if self.batch_size > 1:
            return self.consumer.dequeue_batch(self.stage_type, self.batch_size, self.lease_seconds)
        task = self.consumer.dequeue(self.stage_type, self.lease_seconds)
        return [task] if task else []

    def _hold(self, task: Task, trace: Any = None) -> _Attempt:
        """The attempt, held: heartbeated (and handed back on shutdown) until `_release`."""
        attempt = _Attempt(task, TaskContext(task, self.consumer, self.producer), trace)
        with self._lock:
            self._active[task.id] = attempt
            self.stats.running += 1
        self.metrics.active.labels(self.stage_type).inc()
        return attempt

    def _release(self, attempt: _Attempt) -> None:
        self.metrics.active.labels(self.stage_type).dec()
        with self._lock:
            self._active.pop(attempt.task.id, None)
            self.stats.running -= 1

    def _work(self, task: Task) -> None:
        with tracing.task_span(task, self.stage_type) as trace:
            attempt = self._hold(task, trace)
            try:
                self._handle(attempt)
            finally:
                self._release(attempt)

    def _work_batch(self, tasks: list[Task]) -> None:
        """Run each task's handler in turn, then report every outcome in one request."""
        attempts = [self._hold(task) for task in tasks]
        try:
            ran: list[tuple[_Attempt, Outcome]] = []
            for attempt in attempts:
                if attempt.ended:  # handed back (shutdown) before its turn
                    continue
                with tracing.task_span(attempt.task, self.stage_type) as trace:
                    attempt.trace = trace
                    ran.append((attempt, self._run(attempt)))
            for attempt, o in ran:
                if o.status == HANDED_BACK and attempt.end():
                    self._give_back(attempt, o.reason)
            # (not those handed back meanwhile)
            ended = [(a.task, o) for a, o in ran if o.status != HANDED_BACK and a.end()]
            if ended:
                report_batch(self, ended)
        finally:
            for attempt in attempts:
                self._release(attempt)

    def _handle(self, attempt: _Attempt) -> None:
        """Run the handler on the attempt's task, then report its outcome."""
        outcome = self._run(attempt)
        if not attempt.end():  # handed back meanwhile
            return
        if outcome.status == HANDED_BACK:
            self._give_back(attempt, outcome.reason)
        else:
            self.report_one(attempt.task, outcome)

    def _run(self, attempt: _Attempt) -> Outcome:
        """Run the handler on the attempt's task: its outcome (COMPLETED, DELEGATED, FAILED, or
        HANDED_BACK when the API refused the handler's calls 401 or 403), the failure's reason,
        whether it is fatal, and the handler's result."""
        task, context = attempt.task, attempt.context
        extra = self._extra(task)
        outcome, reason, fatal, result = "COMPLETED", None, False, None
        error: BaseException | None = None
        started = time.perf_counter()
        try:
            result = self.handler(task, context)
            if inspect.isawaitable(result):
                result = asyncio.run(_await(result))
            if isinstance(result, Delegated):
                outcome = "DELEGATED"
        except FatalTaskError as exc:
            outcome, reason, fatal, error = "FAILED", f"{type(exc).__name__}: {exc}", True, exc
        except Exception as exc:  # reported, not a crash: the server decides RETRIED/FAILED
            refusal = access_refusal(exc)
            if refusal is not None:  # the configuration is wrong, not the task: not its failure
                self._refuse_access(refusal)
                outcome, reason, error = HANDED_BACK, f"access refused: {refusal}", exc
            else:
                log.warning(
                    "handler raised", exc_info=True, extra={"action": "task_failed", **extra}
                )
                outcome, reason, error = "FAILED", f"{type(exc).__name__}: {exc}", exc
        self.metrics.handler_ran(outcome.lower(), time.perf_counter() - started)
        tracing.set_outcome(outcome.lower(), error)
        return Outcome(outcome, reason, fatal, result)

    def report_one(self, task: Task, ran: Outcome) -> None:
        """Report one attempt's outcome (a refused report is counted and logged)."""
        outcome = ran.status
        try:
            if outcome == "COMPLETED":
                after = self._complete(task, ran.result, self._extra(task))
            elif outcome == "DELEGATED":
                after = self.consumer.delegate(task)
            else:
                after = self.consumer.fail(task, ran.reason, fatal=ran.fatal)
        except (ApiError, TransportError) as exc:  # e.g. 409: the lease was lost meanwhile
            self.refused(task, exc)
            return
        self.reported(task, ran, after.status)

    def _extra(self, task: Task) -> dict[str, Any]:
        return {"task_id": task.id, "attempt": task.attempt, "stage_type": self.stage_type}

    def refused(self, task: Task, exc: Exception) -> None:
        """Count and log a report the server refused or never answered (a 401 or 403 stops the
        worker)."""
        refusal = access_refusal(exc)
        if refusal is not None:
            self._refuse_access(refusal)
        with self._lock:
            self.stats.refused += 1
        self.metrics.reported("refused", "api_error")
        log.warning(
            "report refused: %s", exc, extra={"action": "report_refused", **self._extra(task)}
        )

    def reported(self, task: Task, ran: Outcome, after: str) -> None:
        """Count and log a report the server took; `after`: the task's status after it."""
        outcome, fatal = ran.status, ran.fatal
        with self._lock:
            if after == "ABORTED":
                self.stats.cancelled += 1
            elif outcome == "DELEGATED":
                self.stats.delegated += 1
            elif after == "COMPLETED":
                self.stats.done += 1
            else:
                self.stats.failed += 1
        if after == "ABORTED":
            self.metrics.reported("cancelled")
        elif outcome in ("DELEGATED", "COMPLETED") and after != "FAILED":
            self.metrics.reported(outcome.lower())
        else:
            cause = "api_error" if outcome != "FAILED" else "fatal" if fatal else "handler_error"
            self.metrics.reported("failed", cause)
        extra = {"action": "task_reported", "outcome": outcome, **self._extra(task)}
        log.info("task reported", extra=extra)

    def _complete(self, task: Task, result: Any, extra: dict[str, Any]) -> Task:
        """Report COMPLETED with the handler's result; a result the SDK cannot send or the
        server refuses (400, 413) reports FAILED with the reason instead, so the task does not
        stay IN_PROGRESS until its lease runs out."""
        try:
            return self.consumer.complete(task, as_result(result))
        except (UnsendableBody, ApiError) as exc:
            if isinstance(exc, ApiError) and exc.status not in (400, 413):
                raise
            reason = f"the handler's result could not be reported: {exc}"[:REASON_MAX]
            log.warning(reason, extra={"action": "result_refused", **extra})
            return self.consumer.fail(task, reason)

    # -- heartbeats and shutdown ------------------------------------------------------------

    def _heartbeats(self) -> None:
        while not self._done.wait(self.heartbeat_interval):
            with self._lock:
                active = list(self._active.values())
            for attempt in active:
                with attempt.lock:
                    if not attempt.ended:
                        self._heartbeat(attempt)

    def _heartbeat(self, attempt: _Attempt) -> None:
        try:
            with tracing.attached(attempt.trace):
                beat = self.consumer.heartbeat(attempt.task)
            self.metrics.heartbeat(ok=True)
            if beat.cancelled:
                attempt.context.cancel("job aborted")
        except ApiError as exc:
            self.metrics.heartbeat(ok=False)
            if exc.status in (404, 409):
                attempt.context.cancel("lease lost")
            elif access_refusal(exc) is not None:
                attempt.context.cancel("access refused")
                self._refuse_access(exc)
        except TransportError as exc:
            self.metrics.heartbeat(ok=False)
            log.warning("heartbeat failed: %s", exc, extra={"action": "heartbeat_failed"})

    def _hand_back(self) -> None:
        with self._lock:
            active = list(self._active.values())
        for attempt in active:
            # ended before cancelling: its handler may return at once, and must not report
            if not attempt.end():
                continue
            attempt.context.cancel("worker shutting down")
            self._give_back(attempt)

    def _give_back(self, attempt: _Attempt, reason: str | None = None) -> None:
        """Return an ended attempt's task to the queue, no attempt spent."""
        task = attempt.task
        try:
            self.consumer.give_back(task, *([reason[:REASON_MAX]] if reason else []))
            log.info("task handed back", extra={"action": "task_handed_back", "task_id": task.id})
        except (ApiError, TransportError) as exc:
            log.warning("hand-back failed: %s", exc, extra={"action": "hand_back_failed"})


async def _await(result: Awaitable[Any]) -> Any:
    return await result
