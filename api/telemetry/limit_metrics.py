"""The concurrency limits' gauges, read from their read models at scrape time (like
service_metrics.py: the same in every server process): each limit, its use, and the queued
tasks held back by it, by stage type: series of their own for the JOBNIK_METRICS_STAGE_TYPES
limited types with the most tasks queued or in progress (stage_types.py), the held-back tasks
of the others summed under `__other__`."""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from jobnik.api.telemetry.service_metrics import guarded
from jobnik.api.telemetry.stage_types import OTHER, shown
from jobnik.projections.queries.limits import LimitViews

REASON = "limit"  # the `reason` label of the held-back tasks: a concurrency limit or rate
KEY = "key"  # ... and a per-key limit


class LimitMetrics(Collector):
    """`jobnik_limit_max_in_progress`, `jobnik_limit_in_progress`, `jobnik_rate_limit_tokens`
    by `stage_type`, and `jobnik_tasks_held_back` by `stage_type` and `reason`."""

    def __init__(self, views: LimitViews, most: int) -> None:
        self.views, self.most = views, most

    def collect(self) -> Iterable[Metric]:
        return guarded("limit metrics", self._collect)

    def describe(self) -> Iterable[Metric]:
        return list(self.families())

    @staticmethod
    def families() -> tuple[GaugeMetricFamily, ...]:
        by = ["stage_type"]
        return (
            GaugeMetricFamily(
                "jobnik_limit_max_in_progress",
                "A stage type's concurrency limit: at most this many tasks in progress at once",
                labels=by,
            ),
            GaugeMetricFamily(
                "jobnik_limit_in_progress",
                "Tasks in progress of a stage type that has a concurrency limit",
                labels=by,
            ),
            GaugeMetricFamily(
                "jobnik_rate_limit_tokens",
                "Task starts a stage type's rate limit allows now: the tokens in its bucket",
                labels=by,
            ),
            GaugeMetricFamily(
                "jobnik_tasks_held_back",
                "Queued tasks a limit holds back: beyond the room it leaves (by a limit or key)",
                labels=[*by, "reason"],
            ),
        )

    def _collect(self) -> list[Metric]:
        families = limit, running, tokens, held = self.families()
        found = self.views.all()
        label = shown({v.stage_type: v.in_progress + v.queued for v in found}, self.most)
        others, other_keys = 0, None  # (a series for the others' keys when one has a limit per key)
        for v in found:
            if label(v.stage_type) == OTHER:
                others += v.held_back
                if v.keyed:
                    other_keys = (other_keys or 0) + v.held_by_key
                continue
            if v.max_in_progress is not None:
                limit.add_metric([v.stage_type], v.max_in_progress)
                running.add_metric([v.stage_type], v.in_progress)
            if (left := v.rate_tokens) is not None:
                tokens.add_metric([v.stage_type], left)
            held.add_metric([v.stage_type, REASON], v.held_back)
            if v.keyed:
                held.add_metric([v.stage_type, KEY], v.held_by_key)
        if len(label.types) < len(found):
            held.add_metric([OTHER, REASON], others)
            if other_keys is not None:
                held.add_metric([OTHER, KEY], other_keys)
        return list(families)
