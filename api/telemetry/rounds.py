"""Traces of the background loops (the lease sweeper, the catch-up runner): one trace per round
that did work, none for an idle round.

Each round runs in a root span (`round_spans`) that its database calls are children of, the
leader lock's included. `QuietRounds`, in front of the exporting span processor, holds a round's
spans until the round ends, then passes them on if the round did work (its span's
`jobnik.round.work` above 0) and drops them if not: an idle server, which looks at its leases
and its log several times a second, exports nothing. Rounds are sampled as requests are
(OTEL_TRACES_SAMPLER, OTEL_TRACES_SAMPLER_ARG).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Any, Final

try:
    from opentelemetry import context as otel_context
    from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
except ImportError:  # without the otel extra nothing here is used (tracing.py asks first)
    SpanProcessor = object  # type: ignore[assignment,misc]

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import Span, TracerProvider

ROUND: Final = "jobnik.round"  # the attribute that marks a round's span (its loop's name)
WORK: Final = "jobnik.round.work"  # what the round did: events applied, tasks taken back


class QuietRounds(SpanProcessor):
    """Passes spans on to `inner`, those of a background round once it ended with work done,
    and drops the spans of a round that did none."""

    def __init__(self, inner: SpanProcessor) -> None:
        self.inner = inner
        self._held: dict[int, list[ReadableSpan]] = {}  # by trace id, the open rounds' spans
        self._lock = threading.Lock()

    def on_start(self, span: Span, parent_context: otel_context.Context | None = None) -> None:
        if span.parent is None and span.attributes and ROUND in span.attributes:
            with self._lock:
                self._held[span.context.trace_id] = []
        self.inner.on_start(span, parent_context)

    def on_end(self, span: ReadableSpan) -> None:
        trace_id = span.context.trace_id if span.context else 0
        with self._lock:
            held = self._held.get(trace_id)
            if held is not None:
                if span.parent is not None:
                    held.append(span)  # a round's: its round decides
                    return
                del self._held[trace_id]
        if held is None:
            self.inner.on_end(span)
        elif int(str((span.attributes or {}).get(WORK, 0))) > 0:
            for child in held:
                self.inner.on_end(child)
            self.inner.on_end(span)

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)


def round_spans(
    provider: TracerProvider,
) -> Callable[[str], AbstractContextManager[Callable[[int], None]]]:
    """The `Round` (projections/store/leader.py) of a process that traces with `provider`: a
    root span per round, named for its loop, that records the work the round reports."""
    tracer = provider.get_tracer("jobnik.background")

    @contextmanager
    def round_span(name: str) -> Iterator[Callable[[int], None]]:
        with tracer.start_as_current_span(
            name, context=otel_context.Context(), attributes={ROUND: name}
        ) as span:
            yield lambda work: _record(span, work)

    return round_span


def _record(span: Any, work: int) -> None:
    span.set_attribute(WORK, work)
