"""OpenTelemetry for the SDK, optional: without the `otel` extra (no `opentelemetry` package)
every function here does nothing, at the cost of a test of one module-level name.

With it, the SDK traces under whatever tracer provider the process set (a no-op one unless it
set one): the handler of a task runs in a span whose parent is the traceparent the task was
created with, the HTTP calls made inside a trace get a client span and carry the W3C
`traceparent` header, so one trace shows a task's creation, dequeue, handling and report.
`export_from_env` sets up the provider a process exports with (the worker CLI and the server
call it)."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator, Mapping, MutableMapping
from typing import TYPE_CHECKING, Any, Final

try:
    from opentelemetry import context as otel_context
    from opentelemetry import propagate, trace
    from opentelemetry.trace import SpanKind, Status, StatusCode
except ImportError:  # the SDK works the same without OpenTelemetry
    trace = None  # type: ignore[assignment]

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import SpanProcessor, TracerProvider

    from jobnik.workers.models import Task

log = logging.getLogger(__name__)

INSTALL_HINT: Final = "install jobnik's otel extra from its checkout: pip install '.[otel]'"
SCOPE: Final = "jobnik.workers"


def available() -> bool:
    """Whether the OpenTelemetry API is installed."""
    return trace is not None


def wanted(env: Mapping[str, str]) -> bool:
    """Whether `env` (OpenTelemetry's standard variables) asks for exported traces."""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporter = env.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter:
        return exporter != "none"
    return bool(
        env.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()
        or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
    )


def tracer_provider(
    env: Mapping[str, str],
    service_name: str,
    wrap: Callable[[SpanProcessor], SpanProcessor] | None = None,
) -> TracerProvider:
    """A tracer provider that exports as `env` says: OTLP over HTTP to
    OTEL_EXPORTER_OTLP_TRACES_ENDPOINT (or OTEL_EXPORTER_OTLP_ENDPOINT + /v1/traces) unless
    OTEL_TRACES_EXPORTER=console (stdout). OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES name
    the service (default `service_name`); the libraries read the other OTEL_* variables
    (headers, timeouts, batching, sampling) themselves. `wrap`: a processor in front of the
    exporting one (it decides what reaches it). RuntimeError without the `otel` extra."""
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import (
            BatchSpanProcessor,
            ConsoleSpanExporter,
            SpanExporter,
        )
    except ImportError:
        raise RuntimeError(
            f"OpenTelemetry variables are set but OpenTelemetry is not installed: {INSTALL_HINT}"
        ) from None
    name = env.get("OTEL_SERVICE_NAME", "").strip() or service_name
    provider = TracerProvider(resource=Resource.create({"service.name": name}))
    exporter: SpanExporter
    if env.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "console":
        exporter = ConsoleSpanExporter()
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        endpoint = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip() or None
        if endpoint is None and env.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip():
            endpoint = env["OTEL_EXPORTER_OTLP_ENDPOINT"].strip().rstrip("/") + "/v1/traces"
        exporter = OTLPSpanExporter(endpoint=endpoint)
    exporting = BatchSpanProcessor(exporter)
    provider.add_span_processor(wrap(exporting) if wrap is not None else exporting)
    return provider


def export_from_env(
    env: Mapping[str, str],
    service_name: str,
    wrap: Callable[[SpanProcessor], SpanProcessor] | None = None,
) -> TracerProvider | None:
    """Make `tracer_provider(env, ...)` this process's global provider when `env` asks for
    traces (None otherwise); call its `shutdown()` at exit to flush the last spans."""
    if not wanted(env):
        return None
    provider = tracer_provider(env, service_name, wrap)
    trace.set_tracer_provider(provider)
    return provider


def _tracer() -> Any:
    return trace.get_tracer(SCOPE)


def in_trace() -> bool:
    """Whether a recording span is current (the only case in which HTTP calls are traced)."""
    return trace is not None and trace.get_current_span().is_recording()


@contextlib.contextmanager
def client_span(method: str, host: str, port: int, headers: dict[str, str]) -> Iterator[Any]:
    """A CLIENT span around one HTTP request, whose context goes into `headers` (traceparent);
    yields the span (None when not in a trace) for `finish_client_span`."""
    if not in_trace():
        yield None
        return
    with _tracer().start_as_current_span(
        method,
        kind=SpanKind.CLIENT,
        attributes={"http.request.method": method, "server.address": host, "server.port": port},
    ) as span:
        propagate.inject(headers)
        yield span


def finish_client_span(span: Any, status: int) -> None:
    if span is not None:
        span.set_attribute("http.response.status_code", status)
        if status >= 500:
            span.set_status(Status(StatusCode.ERROR))


def _task_context(task: Task) -> Any:
    carrier: MutableMapping[str, str] = {}
    if task.traceparent:
        carrier["traceparent"] = task.traceparent
        if task.tracestate:
            carrier["tracestate"] = task.tracestate
    return propagate.extract(carrier)


def task_attributes(task: Task, stage_type: str) -> dict[str, Any]:
    return {
        "messaging.system": "jobnik",
        "messaging.destination.name": stage_type,
        "messaging.message.id": task.id,
        "jobnik.task.id": task.id,
        "jobnik.stage.id": task.stage_id,
        "jobnik.task.attempts": task.attempts,
    }


def record_dequeue(task: Task, stage_type: str, started_ns: int) -> None:
    """A `receive` span, child of the task's stored traceparent, for the dequeue that began at
    `started_ns` (time.time_ns) and just returned `task`."""
    if trace is None:
        return
    span = _tracer().start_span(
        f"receive {stage_type}",
        context=_task_context(task),
        kind=SpanKind.CONSUMER,
        attributes=task_attributes(task, stage_type),
        start_time=started_ns,
    )
    span.end()


@contextlib.contextmanager
def task_span(task: Task, stage_type: str) -> Iterator[Any]:
    """The `process` span the handler runs in, child of the task's stored traceparent; yields
    an opaque context for `attached` (heartbeats sent from another thread join the trace)."""
    if trace is None:
        yield None
        return
    with _tracer().start_as_current_span(
        f"process {stage_type}",
        context=_task_context(task),
        kind=SpanKind.CONSUMER,
        attributes=task_attributes(task, stage_type),
    ):
        yield otel_context.get_current()


def set_outcome(outcome: str, error: BaseException | None = None) -> None:
    """Mark the current (`process`) span with the handler's outcome."""
    if trace is None:
        return
    span = trace.get_current_span()
    span.set_attribute("jobnik.task.outcome", outcome)
    if error is not None:
        span.record_exception(error)
        span.set_status(Status(StatusCode.ERROR, type(error).__name__))


@contextlib.contextmanager
def attached(ctx: Any) -> Iterator[None]:
    """Run the block in `ctx` (from `task_span`; None: as is)."""
    if ctx is None or trace is None:
        yield
        return
    token = otel_context.attach(ctx)
    try:
        yield
    finally:
        otel_context.detach(token)


def now_ns() -> int:
    return time.time_ns()
