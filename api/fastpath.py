"""The worker's hot routes (dequeue, alone or batched; status report, alone or batched;
heartbeat) served without FastAPI's per-request machinery: its exception middleware, router,
dependency solving and request and response wrappers.

Each stays the FastAPI route it is (its path, method, OpenAPI operation and permission). For the
plain request a worker sends (the route's own query parameters, a JSON body, no
`Idempotency-Key` on the batched report), `HotRoutes`, the innermost middleware, matches the
route as the router would, validates the path and query parameters and the body with the same
pydantic types, checks the permission with the same `authorize`, and calls the route's own
function with them in a thread of the commands' pool (api/threads.py), with the request's
context; a domain error answers as FastAPI's handler answers it. Any other request (an unknown
or repeated parameter, a body that does not validate, another content type) goes on to the
router and the route's FastAPI handler, which answers it as it always has.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final
from urllib.parse import parse_qsl
from uuid import UUID

from fastapi import FastAPI
from fastapi.routing import APIRoute
from pydantic import TypeAdapter, ValidationError
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Match
from starlette.types import ASGIApp, Receive, Scope, Send

from jobnik.api import errors
from jobnik.api.deps import Once
from jobnik.api.limits import header, parsed_body, read_body, replay
from jobnik.api.permissions import authorize
from jobnik.api.routes import stages, tasks
from jobnik.api.schemas import AttemptBody, StageType, TaskStatusChange
from jobnik.api.threads import COMMANDS
from jobnik.domain.errors import JobnikError

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


def hot_routes(app: FastAPI) -> list[APIRoute]:
    """The app's routes `SHAPES` describes."""
    return [r for r in app.router.routes if isinstance(r, APIRoute) and r.endpoint in SHAPES]


def install(app: FastAPI) -> None:
    """Serve the app's hot routes by `FastRoute` (their plain requests, once `create_app` has
    added `HotRoutes` as the innermost middleware, are answered there)."""
    for route in hot_routes(app):
        route.app = FastRoute(route.app, route.endpoint, SHAPES[route.endpoint])


class FastRoute:
    """A hot route's ASGI app: its FastAPI handler (`fallback`), which serves what reaches it
    through the router; and the route's function and shape, with which `HotRoutes` serves the
    route's plain requests before the router."""

    def __init__(self, fallback: ASGIApp, function: Callable[..., Any], shape: Shape) -> None:
        self.fallback, self.function, self.shape = fallback, function, shape

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.fallback(scope, receive, send)

    async def prepare(
        self, scope: Scope, receive: Receive
    ) -> tuple[Callable[..., Any] | None, Receive]:
        """The route's function bound to the request's path parameter and body, or None for a
        request the FastAPI handler must serve; and the `receive` that still gives the body."""
        if self.shape.once and header(scope, b"idempotency-key") is not None:
            return None, receive
        body = b""
        if self.shape.body is not None:
            body = await read_body(receive)
            receive = replay(body, receive)
        return self._validated(scope, body), receive

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
                arguments["body"] = shape.body.validate_python(parsed_body(scope, body))
        except (ValidationError, ValueError, KeyError):
            return None
        return functools.partial(self.function, **arguments)


async def answer(request: Request, call: Callable[..., Any], shape: Shape) -> Response:
    """`call` run with the request's principal (if it may) in a thread of the hot routes' pool,
    with the request's context (its id, positions and trace)."""
    if shape.once:  # (no Idempotency-Key here: the command just runs)
        call = functools.partial(call, once=Once(request.app.state.idempotency, None, "", 200))
    bound = functools.partial(call, jobnik=request.app.state.jobnik, by=await authorize(request))
    response: Response = await COMMANDS.run(bound)
    return response


class HotRoutes:
    """ASGI middleware, innermost: a plain request of a hot route (`FastRoute.prepare` binds it)
    is answered here, before FastAPI's exception middleware, router and request/response
    wrappers, which it would otherwise pass through for the same answer: the route is matched
    as the router matches it (the hot routes come first in its list), and a domain error is
    answered as FastAPI's handler answers it (`errors.domain_response`); any other exception
    goes on up to the server error handler, as from the route. Every other request (and any of
    a route whose app is no longer a `FastRoute`) goes on to the app."""

    def __init__(self, app: ASGIApp, routes: Sequence[APIRoute]) -> None:
        self.app, self.routes = app, list(routes)
        self.methods = frozenset(m for r in self.routes for m in r.methods or ())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] in self.methods:
            for route in self.routes:
                fast = route.app
                if not isinstance(fast, FastRoute):
                    continue
                match, child = route.matches(scope)
                if match is not Match.FULL:
                    continue
                scope.update(child)  # in place, as the router does: the middleware read it
                call, receive = await fast.prepare(scope, receive)
                if call is not None:
                    try:
                        response = await answer(Request(scope, receive), call, fast.shape)
                    except JobnikError as exc:
                        response = errors.domain_response(scope, exc)
                    await response(scope, receive, send)
                    return
                break
        await self.app(scope, receive, send)


def _is_json(scope: Scope) -> bool:
    """The content type is JSON's, or absent (FastAPI then parses the body as JSON too)."""
    kind = header(scope, b"content-type")
    return kind is None or kind.lower() in _JSON_TYPES
