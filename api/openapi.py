"""The OpenAPI document tells every status an operation answers, with its `{message, code}`.

FastAPI documents the 2xx answers the routes declare and a 422 for validation; jobnik answers
validation errors with 400 and may answer any of the statuses below. Each operation gets them
from what it is: every one may be refused by the input gate or a validator (400) and may fail
(500); one that names an entity may not find it (404); one with a body may send too large a
body (413); a write may lose a race (409); a creating write with an Idempotency-Key may reuse it
(422); a read that waits for a projection may find too many waiting, a live stream too many
open (503).
"""

from __future__ import annotations

from typing import Any, Final

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from jobnik.api.schemas import ErrorBody

WRITES: Final = frozenset({"post", "put", "patch", "delete"})
ERROR_REF: Final = {"$ref": "#/components/schemas/ErrorBody"}
STATUSES: Final[dict[int, str]] = {
    400: "refused: VALIDATION_ERROR (a value out of the contract, an unknown query parameter), "
    "JSON_TOO_DEEP, STRING_TOO_LONG, INVALID_CHARACTER (NUL or a lone surrogate), "
    "RESERVED_OBJECT (an object of only the keys `_type_` and `_data_`), "
    "NUMBER_OUT_OF_RANGE (NaN, Infinity, beyond a double or 64-bit integers), TOO_MANY_TASKS, "
    "INVALID_FAILURE_PATTERN, HOST_NOT_ALLOWED, or a state rule of the operation (e.g. "
    "ILLEGAL_*_STATUS_TRANSITION, JOB_NOT_IN_FINITE_STATE); nothing was written",
    404: "JOB_NOT_FOUND, STAGE_NOT_FOUND or TASK_NOT_FOUND (dequeue: no task to hand out)",
    409: "TASK_STATUS_UPDATE_FAILED, STALE_ATTEMPT or CONCURRENCY_CONFLICT: the entity changed "
    "since it was read (another worker, the lease sweeper); read it again",
    413: "PAYLOAD_TOO_LARGE: the body is over JOBNIK_MAX_BODY_BYTES",
    422: "IDEMPOTENCY_KEY_REUSED: the key was used with another body or endpoint",
    500: "UNKNOWN_ERROR or DATABASE_RELATED_ERROR; the answer's X-Request-Id names the log entry",
    503: "TOO_MANY_WAITERS: JOBNIK_MAX_WAITERS reads already wait; retry after Retry-After",
}


def statuses_of(method: str, path: str, operation: dict[str, Any]) -> list[int]:
    """The error statuses `operation` (`method` on `path`) can answer."""
    params = operation.get("parameters", [])
    names = {(p["in"], p["name"]) for p in params}
    out = [400, 500]
    if any(where == "path" for where, _ in names) or method in WRITES:
        out.append(404)
    if method in WRITES:
        out += [409, 413]
    if ("header", "Idempotency-Key") in names:
        out.append(422)
    if ("query", "min_position") in names or "503" in operation.get("responses", {}):
        out.append(503)
    return sorted(out)


def document_errors(app: FastAPI) -> None:
    """Make `app.openapi()` list every error status of every operation (see the module)."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema:
            return app.openapi_schema
        schema = get_openapi(
            title=app.title,
            version=app.version,
            description=app.description,
            routes=app.routes,
        )
        max_page_size = app.state.settings.max_page_size
        for path, operations in schema.get("paths", {}).items():
            for method, operation in operations.items():
                for param in operation.get("parameters", []):
                    if param["name"] == "page_size":  # the setting, not the type's bound
                        param["schema"]["maximum"] = max_page_size
                responses = operation.setdefault("responses", {})
                responses.pop("422", None)  # FastAPI's; validation answers 400 here
                for status in statuses_of(method, path, operation):
                    declared = responses.get(str(status))  # the route's own codes, if it says
                    responses[str(status)] = {
                        "description": declared["description"] if declared else STATUSES[status],
                        "content": {"application/json": {"schema": ERROR_REF}},
                    }
                if "503" in responses:
                    responses["503"]["headers"] = {
                        "Retry-After": {"schema": {"type": "integer"}, "description": "seconds"}
                    }
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        components.pop("HTTPValidationError", None)
        components.pop("ValidationError", None)
        components["ErrorBody"] = ErrorBody.model_json_schema()
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]
