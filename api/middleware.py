"""The API's ASGI middleware: request ids and the log positions a request reached (the input
gate, with the body limits, is in api/limits.py; authentication in api/access.py)."""

from __future__ import annotations

import re
import uuid
from contextvars import ContextVar
from typing import Final

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from jobnik.api import positions

REQUEST_ID_HEADER: Final = "X-Request-Id"
# A caller's own request id is kept when it is short printable ASCII, else a new one is made.
_GOOD_ID: Final = re.compile(rb"^[\x21-\x7e]{1,128}$")
REQUEST_ID: ContextVar[str | None] = ContextVar("jobnik_request_id", default=None)
REQUEST_ID_KEY: Final = "jobnik.request_id"  # the id in the ASGI scope, for the 500 handler


def request_id() -> str | None:
    """The id of the request being served in this context (None outside a request)."""
    return REQUEST_ID.get()


class RequestIds:
    """Give every request an id: the caller's `X-Request-Id` when it is sane, else a new one.
    It is in `REQUEST_ID` while the request is served (logs read it) and on the response."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = dict(scope.get("headers") or []).get(b"x-request-id")
        rid = given.decode() if given and _GOOD_ID.match(given) else uuid.uuid4().hex
        token = REQUEST_ID.set(rid)
        scope[REQUEST_ID_KEY] = rid

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                MutableHeaders(scope=message)[REQUEST_ID_HEADER] = rid
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            REQUEST_ID.reset(token)


class RequestPositions:
    """Put the log positions a request reached on its response: `X-Jobnik-Position` (the last
    event its writes committed) and `X-Jobnik-Projection-Position` (the tracking position of the
    catch-up projection it read). The store and the catch-up reads note them in a dict this
    middleware puts in a ContextVar (api/positions.py), error responses included."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        box: dict[str, int] = {}
        token = positions.REQUEST_POSITIONS.set(box)

        async def send_with_positions(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                if positions.WRITTEN in box:
                    headers["X-Jobnik-Position"] = str(box[positions.WRITTEN])
                if positions.SERVED in box:
                    headers["X-Jobnik-Projection-Position"] = str(box[positions.SERVED])
            await send(message)

        try:
            await self.app(scope, receive, send_with_positions)
        finally:
            positions.REQUEST_POSITIONS.reset(token)
