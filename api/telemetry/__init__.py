"""What the server tells its operators: Prometheus metrics (metrics.py), one structured log line
per request (requests.py, logs.py), and OpenTelemetry traces (tracing.py, commands.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from jobnik.api.telemetry.metrics import ServerMetrics

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider


@dataclass
class Telemetry:
    """What an app records: `metrics` (None: no /metrics, no HTTP metrics) and a tracer
    `provider` (None: no spans)."""

    metrics: ServerMetrics | None = field(default_factory=ServerMetrics)
    provider: TracerProvider | None = None
    tracer: Any = None  # the command spans' tracer, once the app is instrumented

    def close(self) -> None:
        """At shutdown: export the spans still buffered, drop this process's live gauges."""
        if self.metrics is not None:
            self.metrics.close()
        if self.provider is not None:
            self.provider.shutdown()
