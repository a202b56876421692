"""The trace context of a request: what a created entity stores as its `traceparent`, and
whose trace id every event the request causes records."""

from __future__ import annotations

from fastapi import Request

from jobnik.api.schemas import TRACEPARENT_RE, TRACESTATE_RE
from jobnik.domain.work import NO_TRACE
from jobnik.workers import tracing


def current_traceparent() -> tuple[str, str | None] | None:
    """The W3C context of the span being recorded now (the request's, when the server traces),
    or None: what a created job, stage or task stores, so work done for it joins this trace."""
    if not tracing.in_trace():
        return None
    from opentelemetry import propagate

    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    parent = carrier.get("traceparent")
    return (parent, carrier.get("tracestate")) if parent else None


def request_trace(request: Request) -> tuple[str, str | None]:
    """The request's trace context (traceparent, tracestate): its own span when the server
    traces, else the caller's W3C headers, else NO_TRACE."""
    traced = current_traceparent()
    if traced is not None:
        return traced
    parent = request.headers.get("traceparent")
    if parent is None or not TRACEPARENT_RE.match(parent):
        return NO_TRACE, None
    state = request.headers.get("tracestate")
    return parent, state if state and TRACESTATE_RE.match(state) else None
