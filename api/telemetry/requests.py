"""One observation and one log line per HTTP request, which the request middleware
(api/middleware.py) records with `record` once the request ended.

A request is recorded in `http_request_duration_seconds` under its route template, and logged
in one line on the `jobnik.access` logger: request id, method, route template, status, duration,
the token's name when access control is on, and the job, stage and task ids the request touched
(its path parameters, and the ids of what its command returned, which `note_touched` records).
Never headers, query strings or bodies: tokens and payloads stay out.
"""

from __future__ import annotations

import logging
from contextvars import ContextVar
from typing import Final

from prometheus_client import Histogram
from starlette.types import Scope

from jobnik.api.permissions import PRINCIPAL_KEY
from jobnik.api.telemetry.metrics import HTTP_REQUEST_DURATION, UNMATCHED

access_log = logging.getLogger("jobnik.access")

# Path parameters that name an entity, and the log field each becomes.
ID_PARAMS: Final = {
    "jobId": "job_id",
    "stageId": "stage_id",
    "taskId": "task_id",
    "stageType": "stage_type",
}
QUIET_ROUTES: Final = frozenset({"/metrics"})  # scraped every few seconds: not logged
REQUEST_ID: ContextVar[str | None] = ContextVar("jobnik_request_id", default=None)
TOUCHED: ContextVar[dict[str, str] | None] = ContextVar("jobnik_touched", default=None)
# The duration histogram's child per (method, route, status): `labels` takes a lock and builds
# its key on every call.
_DURATIONS: dict[tuple[str, str, int], Histogram] = {}


def request_id() -> str | None:
    """The id of the request being served in this context (None outside a request)."""
    return REQUEST_ID.get()


def note_touched(**ids: str) -> None:
    """Record entity ids the current request touched (first one of each kind wins)."""
    box = TOUCHED.get()
    if box is not None:
        for key, value in ids.items():
            box.setdefault(key, value)


def record(
    scope: Scope,
    status: int,
    elapsed: float,
    touched: dict[str, str],
    rid: str,
    metrics: bool,
) -> None:
    """A request that ended with `status` after `elapsed` seconds: its duration (with
    `metrics`) and its access log line."""
    route = getattr(scope.get("route"), "path_format", UNMATCHED)
    if metrics:
        key = (scope["method"], route, status)
        child = _DURATIONS.get(key)
        if child is None:
            child = _DURATIONS[key] = HTTP_REQUEST_DURATION.labels(key[0], route, str(status))
        child.observe(elapsed)
    if route not in QUIET_ROUTES and access_log.isEnabledFor(logging.INFO):
        _log(scope, route, status, elapsed, touched, rid)


def _log(
    scope: Scope, route: str, status: int, elapsed: float, touched: dict[str, str], rid: str
) -> None:
    fields: dict[str, object] = {
        "action": "request",
        "request_id": rid,
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
