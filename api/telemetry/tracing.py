"""The server's traces: with OpenTelemetry's standard variables set (OTEL_EXPORTER_OTLP_ENDPOINT,
OTEL_TRACES_EXPORTER, ...) a span per request (the FastAPI instrumentation: route template,
status), a span per command (commands.py) and a span per database call (the psycopg and sqlite3
instrumentations), exported by a batch processor. Unset, none of this is loaded."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from fastapi import FastAPI

from jobnik.api.schemas import TRACEPARENT_RE
from jobnik.api.settings import Settings
from jobnik.workers import tracing

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider

SERVICE_NAME = "jobnik"
QUIET_URLS = "/metrics,/liveness"  # probes and scrapes: no spans


def otel_env(settings: Settings) -> dict[str, str]:
    """The OpenTelemetry variables among `settings`, under their own names."""
    return {
        key: value
        for key, value in settings.as_env().items()
        if key.startswith("OTEL_") and value.lower() != "false"
    }


def provider_from(settings: Settings) -> TracerProvider | None:
    """The provider to export with when the settings ask for traces, else None; it becomes
    the process's global one (the store's own database spans use that)."""
    return tracing.export_from_env(otel_env(settings), SERVICE_NAME)


def instrument_database(provider: TracerProvider) -> None:
    """Spans for the database calls of this process's connections, opened from now on."""
    from opentelemetry.instrumentation.psycopg import PsycopgInstrumentor
    from opentelemetry.instrumentation.sqlite3 import SQLite3Instrumentor

    for instrumentor in (PsycopgInstrumentor(), SQLite3Instrumentor()):
        if not instrumentor.is_instrumented_by_opentelemetry:
            instrumentor.instrument(tracer_provider=provider, skip_dep_check=True)


def instrument_app(app: FastAPI, provider: TracerProvider) -> Any:
    """A span per request; returns the tracer the command spans use."""
    from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor

    FastAPIInstrumentor.instrument_app(
        app,
        tracer_provider=provider,
        excluded_urls=QUIET_URLS,
        exclude_spans=["receive", "send"],  # one span per request, not per ASGI message
    )
    return provider.get_tracer("jobnik.api")


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


NO_TRACE_ID: Final = "0" * 32


def causing_trace(traceparent_header: str | None) -> str | None:
    """The trace id the events of a request record: its span's when the server traces, else
    the caller's `traceparent` header's (a well-formed one, not all zeros), else None."""
    traced = current_traceparent()
    parent = traced[0] if traced is not None else traceparent_header
    if parent is None or not TRACEPARENT_RE.match(parent):
        return None
    trace_id = parent.split("-")[1]
    return None if trace_id == NO_TRACE_ID else trace_id
