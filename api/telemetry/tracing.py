"""The server's traces: with OpenTelemetry's standard variables set (OTEL_EXPORTER_OTLP_ENDPOINT,
OTEL_TRACES_EXPORTER, ...) a span per request (the FastAPI instrumentation: route template,
status), a span per command (commands.py), a span per database call (the psycopg and sqlite3
instrumentations) and one per background round that did work (rounds.py), exported by a batch
processor. Unset, none of this is loaded."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fastapi import FastAPI

from jobnik.api.settings import Settings
from jobnik.api.telemetry.rounds import QuietRounds, round_spans
from jobnik.projections.store.leader import Round, unobserved
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
    the process's global one (the store's own database spans use that). The background loops'
    idle rounds are not exported (rounds.py)."""
    return tracing.export_from_env(otel_env(settings), SERVICE_NAME, QuietRounds)


def background_rounds(provider: TracerProvider | None) -> Round:
    """What the background loops run each round in: a span when the process traces."""
    return unobserved if provider is None else round_spans(provider)


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
