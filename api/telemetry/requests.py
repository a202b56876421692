"""One observation and one log line per HTTP request: `RequestTelemetry`, the ASGI middleware.

It notes the request's trace for the events its command makes (`domain.base.CAUSING_TRACE`),
times the request, records it in `http_request_duration_seconds` under its route template (and
`http_requests_in_flight` while it runs), and logs one line on the `jobnik.access` logger:
request id, method, route template, status, duration, the token's name when access control is
on, and the job, stage and task ids the request touched (its path parameters, and the ids of
what its command returned, which `note_touched` records). Never headers, query strings or
bodies: tokens and payloads stay out.
"""

from __future__ import annotations

import logging
import time
from contextvars import ContextVar
from typing import Final

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from jobnik.api.middleware import request_id
from jobnik.api.permissions import PRINCIPAL_KEY
from jobnik.api.telemetry.metrics import HTTP_REQUEST_DURATION, HTTP_REQUESTS_IN_FLIGHT, UNMATCHED
from jobnik.api.telemetry.tracing import causing_trace
from jobnik.domain.base import CAUSING_TRACE

access_log = logging.getLogger("jobnik.access")

# Path parameters that name an entity, and the log field each becomes.
ID_PARAMS: Final = {
    "jobId": "job_id",
    "stageId": "stage_id",
    "taskId": "task_id",
    "stageType": "stage_type",
}
QUIET_ROUTES: Final = frozenset({"/metrics"})  # scraped every few seconds: not logged
_TOUCHED: ContextVar[dict[str, str] | None] = ContextVar("jobnik_touched", default=None)


def note_touched(**ids: str) -> None:
    """Record entity ids the current request touched (first one of each kind wins)."""
    box = _TOUCHED.get()
    if box is not None:
        for key, value in ids.items():
            box.setdefault(key, value)


class RequestTelemetry:
    """Metrics and the access log line of every HTTP request; `metrics=False` logs only."""

    def __init__(self, app: ASGIApp, metrics: bool = True) -> None:
        self.app, self.metrics = app, metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 500  # what the client gets if the application raises
        touched: dict[str, str] = {}
        token = _TOUCHED.set(touched)
        # The trace the events of the request's command record (the history shows it).
        traced = CAUSING_TRACE.set(causing_trace(_header(scope, b"traceparent")))

        async def send_observed(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        start = time.perf_counter()
        if self.metrics:
            HTTP_REQUESTS_IN_FLIGHT.inc()
        try:
            await self.app(scope, receive, send_observed)
        finally:
            elapsed = time.perf_counter() - start
            _TOUCHED.reset(token)
            CAUSING_TRACE.reset(traced)
            route = getattr(scope.get("route"), "path_format", UNMATCHED)
            if self.metrics:
                HTTP_REQUESTS_IN_FLIGHT.dec()
                HTTP_REQUEST_DURATION.labels(scope["method"], route, str(status)).observe(elapsed)
            if route not in QUIET_ROUTES and access_log.isEnabledFor(logging.INFO):
                _log(scope, route, status, elapsed, touched)


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key == name:
            return str(value.decode("latin-1"))
    return None


def _log(scope: Scope, route: str, status: int, elapsed: float, touched: dict[str, str]) -> None:
    fields: dict[str, object] = {
        "action": "request",
        "request_id": request_id(),
        "method": scope["method"],
        "route": route,
        "status": status,
        "duration_ms": round(elapsed * 1000, 3),
    }
    principal = scope.get(PRINCIPAL_KEY)
    if principal is not None:
        fields["principal"] = principal.name
    for param, value in (scope.get("path_params") or {}).items():
        if param in ID_PARAMS:
            fields[ID_PARAMS[param]] = str(value)
    for key, value in touched.items():
        fields.setdefault(key, value)
    ids = "".join(f" {k}={fields[k]}" for k in _TEXT_FIELDS if fields.get(k) is not None)
    access_log.info(
        "%s %s %s %.1fms%s", scope["method"], route, status, elapsed * 1000, ids, extra=fields
    )


_TEXT_FIELDS: Final = ("request_id", "principal", *ID_PARAMS.values(), "task_count")
