"""Gauges and counters read from the read models at scrape time: the same in every server
process, and they survive restarts (they are the log's, not a process's).

- `JobnikServiceGauges`: Jobnik's manager's service gauges under its names and labels
  (`GET /service-metrics`, and in `GET /metrics`): jobs by status, stages and tasks by status and
  stage type, and tasks by stage type, job priority and status (`jobnik_tasks_count`, whose
  labels are the manager's database spellings: `Very-High`, `In-Progress`).
- `QueueMetrics`: what a queue operator alerts on: per stage type the queued tasks and the age
  of the oldest, tasks leased, leases expired, retries and failures by cause; events appended
  by type; catch-up lag; stuck work by kind.

Both read summaries and small tables (projections/queries/operations.py): a scrape costs what
the stage types, stages and jobs cost, the same at a million tasks as at a hundred.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Final

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample

from jobnik.domain.errors import JobnikError
from jobnik.domain.statuses import JobStatus, StageStatus, TaskStatus
from jobnik.projections.queries.operations import OperationsViews, Thresholds

log = logging.getLogger(__name__)

STUCK_KINDS: Final = (
    "LEASE_EXPIRED_REPEATEDLY",
    "DELEGATION_NOT_REDISPATCHED",
    "JOB_IDLE",
    "QUEUE_NOT_DEQUEUED",
)


def db_spelling(value: str) -> str:
    """Jobnik's database spelling of a status or priority: `IN_PROGRESS` → `In-Progress`."""
    return "-".join(word.capitalize() for word in value.split("_"))


def _add(family: Metric, labels: dict[str, str], value: float) -> None:
    """`family.add_metric(...)` without its per-call label checks: the labels are built here,
    complete. (A scrape over a thousand stage types adds tens of thousands of samples.)"""
    name = family.name + "_total" if family.type == "counter" else family.name
    family.samples.append(Sample(name, labels, float(value)))


def _guarded(name: str, collect: Callable[[], list[Metric]]) -> list[Metric]:
    """The metrics `collect` reads, or none when the database fails meanwhile: the rest of the
    scrape (HTTP and process metrics) is still served, and the failure is logged."""
    try:
        return collect()
    except JobnikError:
        log.warning("%s: could not read the read models", name, exc_info=True)
        return []


class JobnikServiceGauges(Collector):
    """`jobnik_jobs_by_status`, `jobnik_stages_by_status`, `jobnik_tasks_by_status`,
    `jobnik_tasks_count`, as Jobnik's manager serves them. Every status is present (at zero)
    for every stage type that has a stage; `jobnik_tasks_count` lists non-zero counts only."""

    def __init__(self, views: OperationsViews) -> None:
        self.views = views

    def collect(self) -> Iterable[Metric]:
        return _guarded("service gauges", self._collect)

    def describe(self) -> Iterable[Metric]:
        return list(self.families())

    @staticmethod
    def families() -> tuple[GaugeMetricFamily, ...]:
        """The four gauges, without samples."""
        return (
            GaugeMetricFamily(
                "jobnik_jobs_by_status", "Current number of jobs by status", labels=["job_status"]
            ),
            GaugeMetricFamily(
                "jobnik_stages_by_status",
                "Current number of stages by status",
                labels=["stage_status", "stage_type"],
            ),
            GaugeMetricFamily(
                "jobnik_tasks_by_status",
                "Current number of tasks by status",
                labels=["task_status", "stage_type"],
            ),
            GaugeMetricFamily(
                "jobnik_tasks_count",
                "Current number of entire tasks by stage type and priority",
                labels=["stage_type", "priority", "task_status"],
            ),
        )

    def _collect(self) -> list[Metric]:
        counts = self.views.status_counts()
        jobs, stages, tasks, count = self.families()
        for s in JobStatus:
            _add(jobs, {"job_status": s.value}, counts.jobs.get(s.value, 0))
        types = sorted({t for t, _ in counts.stages})
        for st in StageStatus:
            for t in types:
                n = counts.stages.get((t, st.value), 0)
                _add(stages, {"stage_status": st.value, "stage_type": t}, n)
        by_status: dict[tuple[str, str], int] = {}
        for (t, _, status), n in counts.tasks.items():
            by_status[t, status] = by_status.get((t, status), 0) + n
        for ts in TaskStatus:
            for t in types:
                n = by_status.get((t, ts.value), 0)
                _add(tasks, {"task_status": ts.value, "stage_type": t}, n)
        for (t, priority, status), n in sorted(counts.tasks.items()):
            labels = {"stage_type": t, "priority": db_spelling(priority)}
            _add(count, {**labels, "task_status": db_spelling(status)}, n)
        return [jobs, stages, tasks, count]


class QueueMetrics(Collector):
    """The queue operator's metrics (see the module); `clock` is now, `thresholds` what stuck
    work is."""

    def __init__(
        self,
        views: OperationsViews,
        clock: Callable[[], datetime],
        thresholds: Callable[[], Thresholds],
    ) -> None:
        self.views, self.clock, self.thresholds = views, clock, thresholds

    def collect(self) -> Iterable[Metric]:
        return _guarded("queue metrics", self._collect)

    def describe(self) -> Iterable[Metric]:
        return list(self.families())

    @staticmethod
    def families() -> tuple[GaugeMetricFamily | CounterMetricFamily, ...]:
        """The metrics, without samples."""
        by_type = ["stage_type"]
        return (
            GaugeMetricFamily(
                "jobnik_queue_tasks",
                "Tasks waiting for a worker (PENDING or RETRIED), by stage type",
                labels=by_type,
            ),
            GaugeMetricFamily(
                "jobnik_queue_oldest_task_age_seconds",
                "How long the longest-waiting task a dequeue could take now has waited, by "
                "stage type (0: none waits)",
                labels=by_type,
            ),
            GaugeMetricFamily(
                "jobnik_tasks_leased",
                "Tasks IN_PROGRESS (leased to a worker), by stage type",
                labels=by_type,
            ),
            CounterMetricFamily(
                "jobnik_task_dequeues", "Tasks handed to workers, by stage type", labels=by_type
            ),
            CounterMetricFamily(
                "jobnik_task_leases_expired",
                "Leases that ran out before their worker reported (the sweeper took the task "
                "back), by stage type",
                labels=by_type,
            ),
            CounterMetricFamily(
                "jobnik_task_retries",
                "Tasks queued again after a failed attempt, by stage type and cause: error (the "
                "handler failed), timeout (the lease expired)",
                labels=["stage_type", "cause"],
            ),
            CounterMetricFamily(
                "jobnik_task_failures",
                "Tasks FAILED for good, by stage type and cause: error or timeout (attempts ran "
                "out), fatal (no retry asked)",
                labels=["stage_type", "cause"],
            ),
            CounterMetricFamily(
                "jobnik_events_appended",
                "Events appended to the log, by event type (as far as the catch-up runner has "
                "read)",
                labels=["event_type"],
            ),
            GaugeMetricFamily(
                "jobnik_projection_lag_events",
                "Events a catch-up projection has not applied yet",
                labels=["projection"],
            ),
            GaugeMetricFamily(
                "jobnik_projection_lag_seconds",
                "Age of the oldest event a catch-up projection has not applied yet (0: none)",
                labels=["projection"],
            ),
            GaugeMetricFamily(
                "jobnik_stuck_items",
                "Stuck work by kind, as GET /v1/stuck lists it",
                labels=["kind"],
            ),
        )

    def _collect(self) -> list[Metric]:
        now = self.clock()
        queues = self.views.queues(every_type=True)  # the same series whatever the tasks do
        families = self.families()
        (
            queued,
            oldest,
            leased,
            dequeues,
            expired,
            retries,
            failures,
            events,
            lag_events,
            lag_seconds,
            stuck,
        ) = families
        for q in queues:
            t, c = {"stage_type": q.stage_type}, q.counters
            _add(queued, t, q.queued)
            age = (now - q.oldest_queued_at).total_seconds() if q.oldest_queued_at else 0.0
            _add(oldest, t, max(0.0, age))
            _add(leased, t, q.in_progress)
            _add(dequeues, t, c["dequeues"])
            _add(expired, t, c["leases_expired"])
            for cause in ("error", "timeout"):
                _add(retries, {**t, "cause": cause}, c[f"retried_{cause}"])
            for cause in ("error", "timeout", "fatal"):
                _add(failures, {**t, "cause": cause}, c[f"failed_{cause}"])
        for name, n in sorted(self.views.events_appended().items()):
            events.add_metric([name], n)
        for lag in self.views.lags(now):
            lag_events.add_metric([lag.projection], lag.events)
            lag_seconds.add_metric([lag.projection], lag.seconds)
        found = self.views.stuck(self.thresholds(), now, queues)
        for kind in STUCK_KINDS:
            stuck.add_metric([kind], sum(1 for s in found if s.kind == kind))
        return list(families)
