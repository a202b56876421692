"""The trace context of a request: what a created entity stores as its `traceparent`, and
whose trace id every event the request causes records."""

from __future__ import annotations

import secrets
from typing import Final

from fastapi import Request

from jobnik.api.schemas import TRACEPARENT_RE, TRACESTATE_RE
from jobnik.workers import tracing

CREATION_TRACE_KEY: Final = "jobnik.creation_trace"  # the request scope's key for it
ZERO_TRACE_ID: Final = "0" * 32  # W3C: all-zero trace and span ids are invalid
ZERO_SPAN_ID: Final = "0" * 16


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


def request_trace(request: Request) -> tuple[str, str | None] | None:
    """The request's trace context (traceparent, tracestate): its own span when the server
    traces, else the caller's valid W3C headers, else None."""
    traced = current_traceparent()
    if traced is not None:
        return traced
    parent = request.headers.get("traceparent")
    if parent is None or not TRACEPARENT_RE.match(parent):
        return None
    if parent[3:35] == ZERO_TRACE_ID or parent[36:52] == ZERO_SPAN_ID:
        return None
    state = request.headers.get("tracestate")
    return parent, state if state and TRACESTATE_RE.match(state) else None


def creation_trace(request: Request) -> tuple[str, str | None]:
    """What the entities a request creates store as their trace context when its body names
    none: the request's (`request_trace`), else a new one made for the request (a fresh trace
    id, sampled, the same for all it creates), so that the work done for them shares a trace
    a tracing worker continues, and every entity holds a valid W3C `traceparent`."""
    made: tuple[str, str | None] | None = request.scope.get(CREATION_TRACE_KEY)
    if made is None:
        made = request_trace(request)
        if made is None:
            made = (f"00-{secrets.token_hex(16)}-{secrets.token_hex(8)}-01", None)
        request.scope[CREATION_TRACE_KEY] = made
    return made
