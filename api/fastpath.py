"""The worker's hot routes (single dequeue, status report, heartbeat) served without FastAPI's
per-request dependency machinery.

Each stays the FastAPI route it is (its path, method, OpenAPI operation and permission); only its
ASGI `app` is replaced by one that, for the plain request a worker sends (no query string, a
JSON body), validates the path parameter and the body with the same pydantic types, checks the
permission with the same `authorize`, and calls the route's own function in the thread pool
with them, under Starlette's exception handling (so errors answer as FastAPI's would). Any
other request (a query string, a body that does not validate, another content type) goes to
the FastAPI handler unchanged, which answers it as it always has.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final
from urllib.parse import parse_qsl
from uuid import UUID

from fastapi import FastAPI
from fastapi.routing import APIRoute
from pydantic import TypeAdapter, ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import request_response
from starlette.types import ASGIApp, Receive, Scope, Send

from jobnik.api.deps import Once
from jobnik.api.limits import read_body, replay
from jobnik.api.permissions import authorize
from jobnik.api.routes import stages, tasks
from jobnik.api.schemas import AttemptBody, StageType, TaskStatusChange

_CALL_KEY: Final = "jobnik.fast_call"  # the route's call, validated, for the endpoint
_JSON_TYPES: Final = frozenset({b"application/json", b"application/json; charset=utf-8"})


@dataclass(frozen=True)
class Shape:
    """What a hot route takes: its path parameter, if any (its alias, the function's argument
    and its type), its query parameters (by name: the argument and its type), the body's type,
    if any, and whether it runs its command through `once` (api/deps.py: an Idempotency-Key)."""

    path: tuple[str, str, TypeAdapter[Any]] | None
    body: TypeAdapter[Any] | None = None
    query: Mapping[str, tuple[str, TypeAdapter[Any]]] = field(default_factory=dict)
    once: bool = False


def _adapter(kind: Any) -> TypeAdapter[Any]:
    return TypeAdapter(kind)


_TASK_ID: Final = ("taskId", "task_id", _adapter(UUID))
SHAPES: Final[dict[Callable[..., Any], Shape]] = {
    stages.dequeue_task: Shape(
        ("stageType", "stage_type", _adapter(StageType)),
        query={
            "count": ("count", _adapter(stages.BatchCount)),
            "lease_seconds": ("lease_seconds", _adapter(stages.LeaseSeconds)),
        },
    ),
    tasks.update_task_status: Shape(_TASK_ID, _adapter(TaskStatusChange)),
    tasks.update_task_statuses: Shape(None, _adapter(tasks.Reports), once=True),
    tasks.heartbeat: Shape(_TASK_ID, _adapter(AttemptBody)),
}


def install(app: FastAPI) -> None:
    """Serve the app's hot routes by `FastRoute`."""
    for route in app.router.routes:
        if isinstance(route, APIRoute) and route.endpoint in SHAPES:
            route.app = FastRoute(route.app, route.endpoint, SHAPES[route.endpoint])


class FastRoute:
    """A hot route's ASGI app: the plain request served directly, any other by `fallback`."""

    def __init__(self, fallback: ASGIApp, function: Callable[..., Any], shape: Shape) -> None:
        self.fallback, self.function, self.shape = fallback, function, shape
        self.serve = request_response(self._endpoint)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.shape.once and _header(scope, b"idempotency-key") is not None:
            await self.fallback(scope, receive, send)
            return
        body = b""
        if self.shape.body is not None:
            body = await read_body(receive)
        call = self._validated(scope, body)
        if call is None:
            await self.fallback(scope, replay(body, receive), send)
            return
        scope[_CALL_KEY] = call
        await self.serve(scope, receive, send)

    def _validated(self, scope: Scope, body: bytes) -> Callable[..., Any] | None:
        """The route's function with its path parameter, query parameters and body bound, or
        None when one does not validate, the query names another parameter or one twice, or
        the body is not the JSON FastAPI would parse."""
        shape = self.shape
        arguments: dict[str, Any] = {}
        try:
            if shape.path is not None:
                alias, argument, adapter = shape.path
                arguments[argument] = adapter.validate_python(scope["path_params"][alias])
            query = scope.get("query_string")
            if query:
                for name, value in parse_qsl(
                    query.decode("latin-1"), keep_blank_values=True, strict_parsing=True
                ):
                    argument, adapter = shape.query[name]
                    if argument in arguments:
                        return None
                    arguments[argument] = adapter.validate_python(value)
            if shape.body is not None:
                if not body or not _is_json(scope):
                    return None
                arguments["body"] = shape.body.validate_python(json.loads(body))
        except (ValidationError, ValueError, KeyError):
            return None
        return functools.partial(self.function, **arguments)

    async def _endpoint(self, request: Request) -> Response:
        call = request.scope.pop(_CALL_KEY)
        by = await authorize(request)
        if self.shape.once:  # (no Idempotency-Key here: the command just runs)
            call = functools.partial(call, once=Once(request.app.state.idempotency, None, "", 200))
        response: Response = await run_in_threadpool(call, jobnik=request.app.state.jobnik, by=by)
        return response


def _header(scope: Scope, name: bytes) -> bytes | None:
    for key, value in scope.get("headers") or ():
        if key == name:
            return bytes(value)
    return None


def _is_json(scope: Scope) -> bool:
    """The content type is JSON's, or absent (FastAPI then parses the body as JSON too)."""
    kind = _header(scope, b"content-type")
    return kind is None or kind.lower() in _JSON_TYPES
