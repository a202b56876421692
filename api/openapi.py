"""The OpenAPI document tells every status an operation answers, with its `{message, code}`.

FastAPI documents the 2xx answers the routes declare and a 422 for validation; jobnik answers
validation errors with 400 and may answer any of the statuses below. Each operation gets them
from what it is: every one may be refused by the input gate or a validator (400) and may fail
(500); one that names an entity may not find it (404); one with a body may send too large a
body (413); a write may lose a race (409); a creating write with an Idempotency-Key may reuse it
(422); a read that waits for a projection may find too many waiting, a live stream too many
open (503).

It also states the limits the server enforces, from the settings the app is built with: a
parameter's maximum named by a setting (`setting_maximum`), a bounded array's `maxItems`
(api/bodies.py), and what a free-form JSON payload may hold (`JsonObject`, `JsonValue`: what the
input gate takes, api/input_values.py).
"""

from __future__ import annotations

from typing import Any, Final

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from fastapi.routing import APIRoute

from jobnik.api.bodies import declared
from jobnik.api.schemas import FREE_FORM, ErrorBody
from jobnik.api.settings import Settings

WRITES: Final = frozenset({"post", "put", "patch", "delete"})
SETTING_MAXIMUM: Final = "x-jobnik-maximum"
JSON_OBJECT: Final = "#/components/schemas/JsonObject"
JSON_VALUE: Final = "#/components/schemas/JsonValue"
ERROR_REF: Final = {"$ref": "#/components/schemas/ErrorBody"}
STATUSES: Final[dict[int, str]] = {
    400: "refused: VALIDATION_ERROR (a value out of the contract, an unknown query parameter), "
    "JSON_TOO_DEEP, STRING_TOO_LONG, INVALID_CHARACTER (NUL or a lone surrogate), "
    "RESERVED_OBJECT (an object of only the keys `_type_` and `_data_`), "
    "NUMBER_OUT_OF_RANGE (NaN, Infinity, beyond a double or 64-bit integers), TOO_MANY_TASKS, "
    "TOO_MANY_LOG_LINES, INVALID_FAILURE_PATTERN, HOST_NOT_ALLOWED, or a state rule of the "
    "operation (e.g. ILLEGAL_*_STATUS_TRANSITION, JOB_NOT_IN_FINITE_STATE); nothing was written",
    404: "JOB_NOT_FOUND, STAGE_NOT_FOUND or TASK_NOT_FOUND (dequeue: no task to hand out)",
    409: "TASK_STATUS_UPDATE_FAILED, STALE_ATTEMPT or CONCURRENCY_CONFLICT: the entity changed "
    "since it was read (another worker, the lease sweeper); read it again",
    413: "PAYLOAD_TOO_LARGE: the body is over JOBNIK_MAX_BODY_BYTES",
    422: "IDEMPOTENCY_KEY_REUSED: the key was used with another body or endpoint",
    500: "UNKNOWN_ERROR or DATABASE_RELATED_ERROR; the answer's X-Request-Id names the log entry",
    503: "TOO_MANY_WAITERS: JOBNIK_MAX_WAITERS reads already wait; retry after Retry-After",
}


def setting_maximum(setting: str) -> dict[str, Any]:
    """A parameter's `json_schema_extra`: its maximum is the `Settings` field `setting` (which
    the route enforces), stated in the document from the app's settings."""
    return {SETTING_MAXIMUM: setting}


def json_schemas(settings: Settings) -> dict[str, dict[str, Any]]:
    """`JsonObject` (every free-form payload) and `JsonValue` (what it holds): what the input
    gate takes under `settings`."""
    text = {"type": "string", "maxLength": settings.max_string_length}
    return {
        "JsonObject": {
            "type": "object",
            "additionalProperties": {"$ref": JSON_VALUE},
            "propertyNames": text,
            "description": "A JSON object, nested at most JOBNIK_MAX_JSON_DEPTH "
            f"({settings.max_json_depth}) levels deep in its request, in a body of at most "
            f"JOBNIK_MAX_BODY_BYTES ({settings.max_body_bytes}); its strings and keys hold no "
            "NUL (U+0000), its integers fit in 64 bits, and no object in it is one of only the "
            "keys `_type_` and `_data_` (400 otherwise: INVALID_CHARACTER, "
            "NUMBER_OUT_OF_RANGE, RESERVED_OBJECT, JSON_TOO_DEEP, STRING_TOO_LONG).",
        },
        "JsonValue": {
            "description": "Any JSON value of a JsonObject (an integer written without fraction "
            "or exponent fits in 64 bits).",
            "type": ["null", "boolean", "number", "string", "array", "object"],
            "maxLength": settings.max_string_length,
            "items": {"$ref": JSON_VALUE},
            "additionalProperties": {"$ref": JSON_VALUE},
            "propertyNames": text,
        },
    }


def document_limits(schema: dict[str, Any], app: FastAPI) -> None:
    """State in `schema` the limits `app` enforces under its settings (see the module)."""
    settings: Settings = app.state.settings
    paths = schema.get("paths", {})
    for operations in paths.values():
        for operation in operations.values():
            for param in operation.get("parameters", []):
                setting = param["schema"].pop(SETTING_MAXIMUM, None)
                if setting is not None:
                    param["schema"]["maximum"] = getattr(settings, setting)
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    for route in app.routes:
        if not isinstance(route, APIRoute) or route.path_format not in paths:
            continue
        for key, items in declared(route):
            for method in route.methods or ():
                body = paths[route.path_format][method.lower()]["requestBody"]
                array = body["content"]["application/json"]["schema"]
                if key is not None:  # (a field of the body's model)
                    model = array["$ref"].rsplit("/", 1)[-1]
                    array = components[model]["properties"][key]
                array["maxItems"] = items.most(settings)
    components.update(json_schemas(settings))
    _refer_free_forms(schema)


def _refer_free_forms(node: Any) -> None:
    """Every free-form payload's schema in `node` becomes a reference to `JsonObject`."""
    if isinstance(node, dict):
        for key, value in node.items():
            if isinstance(value, dict) and value.get(FREE_FORM):
                kept = {k: v for k, v in value.items() if k in ("title", "description")}
                node[key] = {"$ref": JSON_OBJECT, **kept}
            else:
                _refer_free_forms(value)
    elif isinstance(node, list):
        for i, value in enumerate(node):
            if isinstance(value, dict) and value.get(FREE_FORM):
                node[i] = {"$ref": JSON_OBJECT}
            else:
                _refer_free_forms(value)


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
            # one schema per model, its fields as declared: a response's serializer (which
            # leaves out the fields that are None) would show it as any object
            separate_input_output_schemas=False,
        )
        document_limits(schema, app)
        for path, operations in schema.get("paths", {}).items():
            for method, operation in operations.items():
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
