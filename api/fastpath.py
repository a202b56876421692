"""The worker's hot routes (single dequeue, status report, heartbeat) served without FastAPI's
per-request dependency machinery.

Each stays the FastAPI route it is (its path, method, OpenAPI operation and permission); only its
ASGI `app` is replaced by one that, for the plain request a worker sends (no query string, a
JSON body), validates the path parameter and the body with the same pydantic types, checks the
permission with the same `authorize`, and calls the route's own function with them in a thread
of its own pool (asyncio's executor hand-off, with the request's context: half the CPU of
AnyIO's), under Starlette's exception handling (so errors answer as FastAPI's would). Any
other request (a query string, a body that does not validate, another content type) goes to
the FastAPI handler unchanged, which answers it as it always has.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Final
from uuid import UUID

from fastapi import FastAPI
from fastapi.routing import APIRoute
from pydantic import BaseModel, TypeAdapter, ValidationError
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import request_response
from starlette.types import ASGIApp, Receive, Scope, Send

from jobnik.api.limits import read_body, replay
from jobnik.api.permissions import authorize
from jobnik.api.routes import stages, tasks
from jobnik.api.schemas import AttemptBody, StageType, TaskStatusChange

_CALL_KEY: Final = "jobnik.fast_call"  # the route's call, validated, for the endpoint
_JSON_TYPES: Final = frozenset({b"application/json", b"application/json; charset=utf-8"})
# The hot routes' commands block on the database: as many threads as AnyIO's default limit.
_THREADS: Final = ThreadPoolExecutor(max_workers=40, thread_name_prefix="jobnik-command")


@dataclass(frozen=True)
class Shape:
    """What a hot route takes: one path parameter (its alias, the function's argument and its
    type) and the body's model, if any."""

    alias: str
    argument: str
    adapter: TypeAdapter[Any]
    body: type[BaseModel] | None


_TASK_ID: Final = TypeAdapter(UUID)
SHAPES: Final[dict[Callable[..., Any], Shape]] = {
    stages.dequeue_task: Shape("stageType", "stage_type", TypeAdapter(StageType), None),
    tasks.update_task_status: Shape("taskId", "task_id", _TASK_ID, TaskStatusChange),
    tasks.heartbeat: Shape("taskId", "task_id", _TASK_ID, AttemptBody),
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
        if scope.get("query_string"):
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
        """The route's function with its path parameter and body bound, or None when either
        does not validate (or the body is not the JSON FastAPI would parse)."""
        shape = self.shape
        try:
            arguments = {
                shape.argument: shape.adapter.validate_python(scope["path_params"][shape.alias])
            }
            if shape.body is not None:
                if not body or not _is_json(scope):
                    return None
                arguments["body"] = shape.body.model_validate(
                    json.loads(body), from_attributes=True
                )
        except (ValidationError, ValueError, KeyError):
            return None
        return functools.partial(self.function, **arguments)

    async def _endpoint(self, request: Request) -> Response:
        call = request.scope.pop(_CALL_KEY)
        bound = functools.partial(
            call, jobnik=request.app.state.jobnik, by=await authorize(request)
        )
        context = contextvars.copy_context()  # the request's id, positions, trace in the thread
        response: Response = await asyncio.get_running_loop().run_in_executor(
            _THREADS, context.run, bound
        )
        return response


def _is_json(scope: Scope) -> bool:
    """The content type is JSON's, or absent (FastAPI then parses the body as JSON too)."""
    for name, value in scope.get("headers") or ():
        if name == b"content-type":
            return value.lower() in _JSON_TYPES
    return True
