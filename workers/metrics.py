"""A worker's Prometheus metrics (`jobnik worker run --metrics-port P` serves them).

The names and labels Jobnik's own SDK uses where it has them (`jobnik_sdk_*`), so its workers'
dashboards read jobnik's workers too; jobnik's own (`jobnik_worker_*`) for what it adds: every
task's outcome, heartbeats, and how long ago the last poll got an answer. Each worker records
into its own registry (several workers may share a process); serve it, or pass the process's
`prometheus_client.REGISTRY` to expose a worker beside an application's own metrics.
"""

from __future__ import annotations

import time
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

TASK_BUCKETS: Final = (0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 240.0, 300.0, 600.0)
API_BUCKETS: Final = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
OUTCOMES: Final = ("completed", "failed", "delegated", "cancelled", "refused")
FAILURES: Final = ("handler_error", "fatal", "api_error")


class WorkerMetrics:
    """The metrics of one worker of `stage_type`, in `registry` (a new one by default)."""

    def __init__(self, stage_type: str, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.stage_type = stage_type
        r = self.registry
        self.task_duration = Histogram(
            "jobnik_sdk_worker_task_duration_seconds",
            "How long the handler ran, by stage type and outcome",
            ["stage_type", "status"],
            buckets=TASK_BUCKETS,
            registry=r,
        )
        self.completed = Counter(
            "jobnik_sdk_worker_tasks_completed_total",
            "Tasks the handler completed",
            ["stage_type"],
            registry=r,
        )
        self.failed = Counter(
            "jobnik_sdk_worker_tasks_failed_total",
            "Tasks that failed: the handler raised (handler_error), raised FatalTaskError "
            "(fatal), or the report was refused or lost (api_error)",
            ["stage_type", "error_type"],
            registry=r,
        )
        self.active = Gauge(
            "jobnik_sdk_worker_tasks_active",
            "Tasks being handled now",
            ["stage_type"],
            registry=r,
        )
        self.dequeue_duration = Histogram(
            "jobnik_sdk_consumer_dequeue_duration_seconds",
            "Dequeue requests, by answer (success, not_found, error), and their latency",
            ["stage_type", "status"],
            buckets=API_BUCKETS,
            registry=r,
        )
        self.http_duration = Histogram(
            "jobnik_sdk_http_request_duration_seconds",
            "Requests to the API (retries included), by method, status code (error: no "
            "answer) and whether they were retried",
            ["method", "status_code", "retried"],
            buckets=API_BUCKETS,
            registry=r,
        )
        self.handled = Counter(
            "jobnik_worker_tasks_handled_total",
            "Tasks handled, by outcome: completed, failed, delegated (waiting for child jobs), "
            "cancelled (the job was aborted meanwhile), refused (the report was refused)",
            ["stage_type", "outcome"],
            registry=r,
        )
        self.heartbeats_sent = Counter(
            "jobnik_worker_heartbeats_sent_total",
            "Heartbeats the API accepted",
            ["stage_type"],
            registry=r,
        )
        self.heartbeats_failed = Counter(
            "jobnik_worker_heartbeats_failed_total",
            "Heartbeats refused (lease lost) or unanswered",
            ["stage_type"],
            registry=r,
        )
        self.poll_age = Gauge(
            "jobnik_worker_last_poll_age_seconds",
            "Seconds since a dequeue last got an answer (a task or none); since the worker "
            "started when none has yet",
            ["stage_type"],
            registry=r,
        )
        self._last_poll = time.monotonic()
        self.poll_age.labels(stage_type).set_function(lambda: time.monotonic() - self._last_poll)
        # every series present from the start, at zero (a rate over it is then defined)
        self.completed.labels(stage_type)
        self.active.labels(stage_type)
        for error_type in FAILURES:
            self.failed.labels(stage_type, error_type)
        for outcome in OUTCOMES:
            self.handled.labels(stage_type, outcome)
        self.heartbeats_sent.labels(stage_type)
        self.heartbeats_failed.labels(stage_type)

    def polled(self, status: str, seconds: float) -> None:
        """A dequeue ended: `status` success, not_found or error."""
        self.dequeue_duration.labels(self.stage_type, status).observe(seconds)
        if status != "error":
            self._last_poll = time.monotonic()

    def http(self, method: str, status_code: str, retried: bool, seconds: float) -> None:
        self.http_duration.labels(method, status_code, "true" if retried else "false").observe(
            seconds
        )

    def handler_ran(self, outcome: str, seconds: float) -> None:
        """The handler returned or raised: `outcome` completed, failed or delegated."""
        self.task_duration.labels(self.stage_type, outcome).observe(seconds)

    def reported(self, outcome: str, error_type: str | None = None) -> None:
        """The task's end: an OUTCOMES value, and for a failure its FAILURES cause."""
        self.handled.labels(self.stage_type, outcome).inc()
        if outcome == "completed":
            self.completed.labels(self.stage_type).inc()
        if error_type is not None:
            self.failed.labels(self.stage_type, error_type).inc()

    def heartbeat(self, ok: bool) -> None:
        (self.heartbeats_sent if ok else self.heartbeats_failed).labels(self.stage_type).inc()
