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
the stage types, stages and jobs cost, the same at a million tasks as at a hundred. Their series
by stage type are those of the JOBNIK_METRICS_STAGE_TYPES types with the most tasks and of
`__other__`, the others' aggregate (stage_types.py): a scrape's size has a bound, however many
stage types clients name.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable, Iterable, Set
from datetime import datetime
from typing import Final, Generic, TypeVar

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample

from jobnik.api.telemetry.stage_types import OTHER, fold, shown
from jobnik.domain.errors import JobnikError
from jobnik.domain.statuses import JobStatus, StageStatus, TaskStatus
from jobnik.projections.queries.operations import OperationsViews, Queue, Thresholds

log = logging.getLogger(__name__)

STUCK_KINDS: Final = (
    "LEASE_EXPIRED_REPEATEDLY",
    "DELEGATION_NOT_REDISPATCHED",
    "JOB_IDLE",
    "QUEUE_NOT_DEQUEUED",
    "SCHEDULE_RUNS_FAILING",
)
JOB_STATUSES: Final = tuple(s.value for s in JobStatus)
STAGE_STATUSES: Final = tuple(s.value for s in StageStatus)
TASK_STATUSES: Final = tuple(s.value for s in TaskStatus)
# Jobnik's manager's task statuses: the ones it serves at zero too. (Jobnik's own, ABORTED and
# DELEGATED, are served where a stage type has such tasks.)
MANAGER_TASK_STATUSES: Final = frozenset(TASK_STATUSES) - {"ABORTED", "DELEGATED"}
# The operations projection's counters of retries and of failures, by cause.
RETRIES: Final = {"retried_error": "error", "retried_timeout": "timeout"}
FAILURES: Final = {
    "failed_error": "error",
    "failed_timeout": "timeout",
    "failed_fatal": "fatal",
    "failed_expired": "expired",
}
CAUSES: Final = RETRIES | FAILURES

Labels = dict[str, str]
K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


def db_spelling(value: str) -> str:
    """Jobnik's database spelling of a status or priority: `IN_PROGRESS` → `In-Progress`."""
    return "-".join(word.capitalize() for word in value.split("_"))


class Kept(Generic[K, V]):
    """Label dicts made from their key (a stage type, say), kept from one scrape to the next
    while the key is scraped: a scrape builds only its samples, with the values it has just
    read, and a key no longer scraped is let go. (A scrape has a few thousand samples, whose
    labels change only when the stage types served do.)"""

    def __init__(self, make: Callable[[K], V]) -> None:
        self.make = make
        self.kept: dict[K, V] = {}

    def __call__(self, keys: Iterable[K]) -> list[V]:
        """What `make` makes of each key (`keys` are distinct), in the keys' order."""
        kept, make = self.kept, self.make
        now = {k: kept[k] if k in kept else make(k) for k in keys}
        self.kept = now  # one assignment: a concurrent scrape sees one whole dict or the other
        return list(now.values())


def _fill(family: Metric, samples: Iterable[tuple[Labels, float]]) -> None:
    """`family.add_metric(...)` for each (labels, value), without its per-call label checks:
    the labels are built here, complete."""
    name = _sample_name(family)
    family.samples.extend(Sample(name, labels, value) for labels, value in samples)


def _sample_name(family: Metric) -> str:
    return family.name + "_total" if family.type == "counter" else family.name


def guarded(name: str, collect: Callable[[], list[Metric]]) -> list[Metric]:
    """The metrics `collect` reads, or none when the database fails meanwhile: the rest of the
    scrape (HTTP and process metrics) is still served, and the failure is logged."""
    try:
        return collect()
    except JobnikError:
        log.warning("%s: could not read the read models", name, exc_info=True)
        return []


class JobnikServiceGauges(Collector):
    """`jobnik_jobs_by_status`, `jobnik_stages_by_status`, `jobnik_tasks_by_status`,
    `jobnik_tasks_count`, as Jobnik's manager serves them, for the `limit` stage types with the
    most tasks and the aggregate of the others (stage_types.py). Every job status, and every
    stage and task status of the manager's for each of those stage types, is present at zero
    too (the manager's dashboards chart each status); jobnik's own task statuses are present
    where they count tasks, and `jobnik_tasks_count` lists non-zero counts only."""

    def __init__(self, views: OperationsViews, limit: int) -> None:
        self.views, self.limit = views, limit
        self.stage_labels = Kept(_by_status("stage_status", STAGE_STATUSES))
        self.task_labels = Kept(_by_status("task_status", TASK_STATUSES))
        self.count_labels = Kept(_count_labels)

    def collect(self) -> Iterable[Metric]:
        return guarded("service gauges", self._collect)

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
        _fill(jobs, (({"job_status": s}, counts.jobs.get(s, 0)) for s in JOB_STATUSES))
        totals = dict.fromkeys((t for t, _ in counts.stages), 0)
        for (t, _, _), n in counts.tasks.items():
            totals[t] = totals.get(t, 0) + n
        label = shown(totals, self.limit)
        by_stage = fold(counts.stages, lambda k: (label(k[0]), k[1]))
        by_task = fold(counts.tasks, lambda k: (label(k[0]), k[1], k[2]))
        types = sorted({label(t) for t in totals})
        by_status: dict[tuple[str, str], int] = {}
        for (t, _, status), n in by_task.items():
            by_status[t, status] = by_status.get((t, status), 0) + n
        stage_rows, task_rows = self.stage_labels(types), self.task_labels(types)
        _matrix(stages, STAGE_STATUSES, types, stage_rows, by_stage, set(STAGE_STATUSES))
        _matrix(tasks, TASK_STATUSES, types, task_rows, by_status, MANAGER_TASK_STATUSES)
        keys = sorted(by_task)
        count.samples = [
            Sample(count.name, labels, by_task[key])
            for key, labels in zip(keys, self.count_labels(keys), strict=True)
        ]
        return [jobs, stages, tasks, count]


def _by_status(label: str, statuses: tuple[str, ...]) -> Callable[[str], tuple[Labels, ...]]:
    """What makes a stage type's labels under each of `statuses` (`label`: the status label)."""

    def labels(stage_type: str) -> tuple[Labels, ...]:
        return tuple({label: s, "stage_type": stage_type} for s in statuses)

    return labels


def _matrix(
    family: Metric,
    statuses: tuple[str, ...],
    types: list[str],
    rows: list[tuple[Labels, ...]],
    counts: dict[tuple[str, str], int],
    zero_filled: Set[str],
) -> None:
    """`family`'s samples: each status of each stage type, the `zero_filled` ones at zero too
    (`rows`: each type's labels by status; `counts`: by (type, status))."""
    name, get = family.name, counts.get
    family.samples = [
        Sample(name, row[i], n)
        for i, status in enumerate(statuses)
        for t, row in zip(types, rows, strict=True)
        if (n := get((t, status), 0)) or status in zero_filled
    ]


def _count_labels(key: tuple[str, str, str]) -> Labels:
    """`jobnik_tasks_count`'s labels for (stage type, priority, task status)."""
    stage_type, priority, status = key
    return {
        "stage_type": stage_type,
        "priority": db_spelling(priority),
        "task_status": db_spelling(status),
    }


class QueueMetrics(Collector):
    """The queue operator's metrics (see the module); `clock` is now, `thresholds` what stuck
    work is. Per stage type, the `limit` types with the most tasks and the aggregate of the
    others (stage_types.py), non-zero values only."""

    def __init__(
        self,
        views: OperationsViews,
        clock: Callable[[], datetime],
        thresholds: Callable[[], Thresholds],
        limit: int,
    ) -> None:
        self.views, self.clock, self.thresholds, self.limit = views, clock, thresholds, limit
        self.type_labels = Kept(_queue_labels)

    def collect(self) -> Iterable[Metric]:
        return guarded("queue metrics", self._collect)

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
                "jobnik_queue_tasks_delayed",
                "Of the tasks waiting, those waiting for their not-before time (a delay or a "
                "retry's backoff), by stage type",
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
                "jobnik_ended_failed",
                "Jobs and stages that ended FAILED, by what (job or stage) and cause: task (a task "
                "failed for good), stage (a job's stage failed), deadline (its deadline passed), "
                "expired (a task of it expired in the queue)",
                labels=["of", "cause"],
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
        every = self.views.queues(now, every_type=True)
        label = shown({q.stage_type: q.total for q in every}, self.limit)
        queues = [q for q in every if q.stage_type in label.types]
        others = [q for q in every if q.stage_type not in label.types]
        if others:
            queues.append(Queue.merged(OTHER, others))
        families = self.families()
        (
            queued,
            delayed,
            oldest,
            leased,
            dequeues,
            expired,
            retries,
            failures,
            ended_failed,
            events,
            lag_events,
            lag_seconds,
            stuck,
        ) = families
        rows = self.type_labels(q.stage_type for q in queues)
        for family, value in (
            (queued, lambda q: q.queued),
            (delayed, lambda q: q.delayed),
            (oldest, lambda q: _age(now, q.oldest_queued_at)),
            (leased, lambda q: q.in_progress),
            (dequeues, lambda q: q.counters["dequeues"]),
            (expired, lambda q: q.counters["leases_expired"]),
        ):
            pairs = zip(queues, rows, strict=True)
            _fill(family, ((row[""], v) for q, row in pairs if (v := value(q))))
        for family, counters in ((retries, RETRIES), (failures, FAILURES)):
            pairs = zip(queues, rows, strict=True)
            _fill(
                family, ((row[c], v) for q, row in pairs for c in counters if (v := q.counters[c]))
            )
        for (of, cause), n in sorted(self.views.failures().items()):
            ended_failed.add_metric([of, cause], n)
        for name, n in sorted(self.views.events_appended().items()):
            events.add_metric([name], n)
        for lag in self.views.lags(now):
            lag_events.add_metric([lag.projection], lag.events)
            lag_seconds.add_metric([lag.projection], lag.seconds)
        found = self.views.stuck(self.thresholds(), now, every)
        for kind in STUCK_KINDS:
            stuck.add_metric([kind], sum(1 for s in found if s.kind == kind))
        return list(families)


def _queue_labels(stage_type: str) -> dict[str, Labels]:
    """A stage type's labels in the queue metrics: under "" alone, under a counter of retries
    or failures with its cause."""
    by_cause = {c: {"stage_type": stage_type, "cause": cause} for c, cause in CAUSES.items()}
    return {"": {"stage_type": stage_type}, **by_cause}


def _age(now: datetime, since: datetime | None) -> float:
    return max(0.0, (now - since).total_seconds()) if since else 0.0
