"""The schedules' counters, read from their read model at scrape time (like service_metrics.py:
the same in every server process, kept across restarts): runs fired, fires missed, fires
skipped because the previous run was still going, by schedule name: series of their own for the
JOBNIK_METRICS_SCHEDULES schedules that fired most (ties by name), the others' sums under
`schedule="__other__"`, so however many schedules producers make, a scrape's size is bounded."""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.core import CounterMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from jobnik.api.telemetry.service_metrics import guarded
from jobnik.api.telemetry.stage_types import fold, shown
from jobnik.projections.queries.schedules import ScheduleViews


class ScheduleMetrics(Collector):
    """`jobnik_schedule_fires_total`, `jobnik_schedule_misses_total`,
    `jobnik_schedule_overlaps_skipped_total`, by `schedule` (its name; see the module)."""

    def __init__(self, views: ScheduleViews, limit: int) -> None:
        self.views, self.limit = views, limit

    def collect(self) -> Iterable[Metric]:
        return guarded("schedule metrics", self._collect)

    def describe(self) -> Iterable[Metric]:
        return list(self.families())

    @staticmethod
    def families() -> tuple[CounterMetricFamily, ...]:
        by = ["schedule"]
        return (
            CounterMetricFamily(
                "jobnik_schedule_fires",
                "Runs a schedule started (by its clock, a buffered fire, a trigger or a backfill)",
                labels=by,
            ),
            CounterMetricFamily(
                "jobnik_schedule_misses",
                "Nominal times a schedule did not run: older than its catch-up window, or "
                "passed over by its catch-up policy latest",
                labels=by,
            ),
            CounterMetricFamily(
                "jobnik_schedule_overlaps_skipped",
                "Fires a schedule skipped because its previous run was still going",
                labels=by,
            ),
        )

    def _collect(self) -> list[Metric]:
        families = fires, misses, skipped = self.families()
        counters = self.views.counters()
        label = shown({c.name: c.fired for c in counters}, self.limit)
        for family, count in ((fires, "fired"), (misses, "missed"), (skipped, "skipped")):
            by_name = {c.name: int(getattr(c, count)) for c in counters}
            for name, n in sorted(fold(by_name, label).items()):
                family.add_metric([name], n)
        return list(families)
