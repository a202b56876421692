"""The one place where errors become HTTP responses: `{message, code}` with Jobnik's statuses."""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match
from starlette.types import Scope

from jobnik.api.middleware import REQUEST_ID_HEADER, REQUEST_ID_KEY
from jobnik.api.schemas import ErrorBody
from jobnik.domain.errors import (
    ArchiveUnreachable,
    Busy,
    DatabaseError,
    Forbidden,
    HeadersTooLarge,
    IdempotencyKeyReused,
    IllegalJobTransition,
    IllegalTransition,
    InvalidRequest,
    JobnikError,
    JobNotEnded,
    JobNotFound,
    LastAdminToken,
    NotFound,
    PayloadTooLarge,
    RequestTimeout,
    ScheduleExists,
    StageNotFound,
    TaskNotFound,
    TokenExists,
    TooManyChildJobs,
    TooManyLimits,
    TooManyRetentionPeriods,
    Unauthenticated,
    UpdateConflict,
)

log = logging.getLogger(__name__)

HTTP_STATUS: Final[Mapping[type[JobnikError], int]] = {
    Unauthenticated: 401,
    Forbidden: 403,
    TokenExists: 409,
    ScheduleExists: 409,
    LastAdminToken: 409,
    TooManyRetentionPeriods: 409,
    TooManyChildJobs: 409,
    TooManyLimits: 409,
    PayloadTooLarge: 413,
    RequestTimeout: 408,
    HeadersTooLarge: 431,
    NotFound: 404,
    IllegalTransition: 400,
    InvalidRequest: 400,
    UpdateConflict: 409,
    IdempotencyKeyReused: 422,
    DatabaseError: 500,
    Busy: 503,
    ArchiveUnreachable: 410,
    JobNotEnded: 409,
}

# Where Jobnik's manager answers a route's error with another status, as it does.
ROUTE_STATUS: Final[Mapping[tuple[str, type[JobnikError]], int]] = {
    ("dequeue_task", TaskNotFound): 404,
    ("dequeue_task", NotFound): 500,
    ("dequeue_task", IllegalTransition): 500,
    ("update_task_status", StageNotFound): 400,
    ("update_task_status", JobNotFound): 400,
    ("update_stage_status", IllegalJobTransition): 500,
}

# Starlette's own errors, named: 404 is a path no route (nor file) serves, where Jobnik's
# manager answers UNKNOWN_ERROR (docs/compatibility.md).
HTTP_CODES: Final[Mapping[int, str]] = {
    400: "VALIDATION_ERROR",
    404: "ROUTE_NOT_FOUND",
    405: "METHOD_NOT_ALLOWED",
    413: "PAYLOAD_TOO_LARGE",
}

SHOWN_PATH: Final = 200  # the longest path an error message repeats
_WHERE: Final = {"path": "params", "query": "query", "body": "body", "header": "headers"}


def status_for(route: str | None, exc: JobnikError) -> int:
    for cls in type(exc).__mro__:
        if route is not None and (route, cls) in ROUTE_STATUS:
            return ROUTE_STATUS[route, cls]
        if cls in HTTP_STATUS:
            return HTTP_STATUS[cls]
    return 500


def error_answers(
    *errors: type[JobnikError] | tuple[type[JobnikError], str],
) -> dict[int | str, dict[str, Any]]:
    """A route's documented error answers (its OpenAPI `responses`): for each HTTP status, the
    `code`s the route answers with it and what each means (the error's own message, or the
    text paired with it)."""
    by_status: dict[int, list[str]] = {}
    for item in errors:
        cls, meaning = item if isinstance(item, tuple) else (item, None)
        exc = cls()
        line = f"- `{exc.code}`: {meaning or exc.message}"
        by_status.setdefault(status_for(None, exc), []).append(line)
    return {
        status: {"model": ErrorBody, "description": "\n".join(lines)}
        for status, lines in sorted(by_status.items())
    }


def error_response(
    status: int, message: str, code: str, headers: Mapping[str, str] | None = None
) -> JSONResponse:
    if status >= 500 and status != 503:
        message = "Internal Server Error"
    # a message may quote the request (a key, a value); what is not Unicode text is escaped
    message = message.encode("utf-8", "backslashreplace").decode("utf-8")
    return JSONResponse(
        {"message": message, "code": code}, status_code=status, headers=dict(headers or {})
    )


def response_for(exc: JobnikError, route: str | None = None) -> JSONResponse:
    """The response for a domain error (raised by a route named `route`, if any)."""
    headers = {"Retry-After": str(exc.retry_after)} if isinstance(exc, Busy) else None
    return error_response(status_for(route, exc), exc.message, exc.code, headers)


def unauthenticated(exc: Unauthenticated) -> JSONResponse:
    """401 with the challenge RFC 6750 asks for."""
    return error_response(401, exc.message, exc.code, {"WWW-Authenticate": "Bearer"})


def domain_response(scope: Scope, exc: JobnikError) -> JSONResponse:
    """The answer to a domain error raised while serving the route `scope` matched."""
    if isinstance(exc, Unauthenticated):
        return unauthenticated(exc)
    return response_for(exc, getattr(scope.get("route"), "name", None))


def _path(loc: Sequence[Any]) -> str:
    parts = [_WHERE.get(str(loc[0]), str(loc[0])) if loc else "body"]
    parts += [str(p) for p in loc[1:]]
    return "request/" + "/".join(parts)


def describe(error: Mapping[str, Any]) -> str:
    """One pydantic error in the validator's words, naming the field."""
    loc, kind, ctx = list(error.get("loc", ())), error.get("type", ""), error.get("ctx") or {}
    if kind == "missing":
        return f"{_path(loc[:-1])} must have required property '{loc[-1]}'"
    if kind == "json_invalid":
        return "request/body is not valid JSON"
    if kind == "extra_forbidden":
        return f"{_path(loc[:-1])} must NOT have additional properties ('{_short(loc[-1])}')"
    if kind == "additional_property":
        return f"{_path(loc)} must NOT have additional properties ('{_short(ctx.get('key'))}')"
    where = _path(loc)
    messages = {
        "uuid_parsing": 'must match format "uuid"',
        "uuid_type": 'must match format "uuid"',
        "string_too_short": f"must NOT have fewer than {ctx.get('min_length')} characters",
        "string_too_long": f"must NOT have more than {ctx.get('max_length')} characters",
        "too_short": f"must NOT have fewer than {ctx.get('min_length')} items",
        "string_pattern_mismatch": f'must match pattern "{ctx.get("pattern")}"',
        "enum": f"must be equal to one of the allowed values: {_allowed(ctx)}",
        "literal_error": f"must be equal to one of the allowed values: {_allowed(ctx)}",
        "dict_type": "must be object",
        "model_type": "must be object",
        "model_attributes_type": "must be object",
        "list_type": "must be array",
        "string_type": "must be string",
        "int_type": "must be integer",
        "int_parsing": "must be integer",
        "int_from_float": "must be integer",
        "greater_than_equal": f"must be >= {ctx.get('ge')}",
        "bool_type": "must be boolean",
        "bool_parsing": "must be boolean",
        "datetime_parsing": 'must match format "date-time"',
        "datetime_from_date_parsing": 'must match format "date-time"',
        "datetime_type": 'must match format "date-time"',
        "json_invalid": "is not valid JSON",
    }
    return f"{where} {messages.get(kind, error.get('msg', 'is invalid'))}"


def _short(key: Any) -> str:
    """A key for a message: at most 50 characters."""
    text = str(key)
    return text if len(text) <= 50 else text[:50] + "..."


def _allowed(ctx: Mapping[str, Any]) -> str:
    """pydantic's `expected` (quoted values, enum reprs too) as the validator lists them."""
    return ", ".join(re.findall(r"'([^']*)'", str(ctx.get("expected", ""))))


def install(app: FastAPI) -> None:
    """Register the handlers: domain errors, validation, unknown routes, anything else."""

    @app.exception_handler(JobnikError)
    async def domain_error(request: Request, exc: JobnikError) -> JSONResponse:
        return domain_response(request.scope, exc)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        message = ", ".join(describe(e) for e in exc.errors()[:5]) or "invalid request"
        return error_response(400, message, "VALIDATION_ERROR")

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        path = request.url.path
        path = path if len(path) <= SHOWN_PATH else path[:SHOWN_PATH] + "…"
        message = (
            f"not found: no route {request.method} {path} (/docs lists them)"
            if exc.status_code == 404
            else str(exc.detail).lower()
        )
        code = HTTP_CODES.get(exc.status_code, "UNKNOWN_ERROR")
        headers = dict(exc.headers or {})
        if exc.status_code == 405:  # every route of the path, not only the one that matched
            headers["Allow"] = ", ".join(_methods_of(request))
        return error_response(exc.status_code, message, code, headers)

    @app.exception_handler(Exception)
    async def crash(request: Request, exc: Exception) -> JSONResponse:
        # Starlette runs this handler outside every middleware, RequestMiddleware included: the
        # request's id is read from the scope it left, and set on the response here.
        rid = str(request.scope.get(REQUEST_ID_KEY) or "-")
        log.exception(
            "unhandled error in %s %s (request id %s)",
            request.method,
            request.url.path,
            rid,
            extra={"action": "unhandled_error", "request_id": rid},
        )
        return error_response(
            500, "Internal Server Error", "UNKNOWN_ERROR", {REQUEST_ID_HEADER: rid}
        )


def _methods_of(request: Request) -> list[str]:
    """The methods the routes of this request's path answer (a route whose path parameter the
    path does not fill with a value of its type serves another resource: `GET
    /v1/tasks/{taskId}` is not one of `/v1/tasks/status`)."""
    methods: set[str] = set()
    for route in request.app.router.routes:
        match, child = route.matches({**request.scope, "method": "_"})
        if match != Match.NONE and _fits(route, child.get("path_params", {})):
            methods.update(getattr(route, "methods", None) or ())
    return sorted(methods)


def _fits(route: object, values: Mapping[str, Any]) -> bool:
    """Whether `values` are of the types of the route's path parameters."""
    dependant = getattr(route, "dependant", None)
    for field in dependant.path_params if dependant is not None else ():
        if field.validate(values.get(field.alias), loc=("path",))[1]:
            return False
    return True
