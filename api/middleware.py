"""The API's ASGI middleware: request ids, authentication, body limits and the log positions a
request reached."""

from __future__ import annotations

import re
import uuid
from contextvars import ContextVar
from typing import Final

from starlette.concurrency import run_in_threadpool
from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from jobnik.api import errors, positions
from jobnik.api.access import PUBLIC_PATHS, Access
from jobnik.api.permissions import PRINCIPAL_KEY
from jobnik.domain.errors import PayloadTooLarge, Unauthenticated

MAX_BODY: Final = 1024 * 1024  # request bodies up to 1 MB, as Jobnik's manager takes

REQUEST_ID_HEADER: Final = "X-Request-Id"
# A caller's own request id is kept when it is short printable ASCII, else a new one is made.
_GOOD_ID: Final = re.compile(rb"^[\x21-\x7e]{1,128}$")
REQUEST_ID: ContextVar[str | None] = ContextVar("jobnik_request_id", default=None)


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

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                MutableHeaders(scope=message)[REQUEST_ID_HEADER] = rid
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            REQUEST_ID.reset(token)


class Authenticate:
    """Who the request is (api/access.py), before anything reads its body: the principal goes
    in the scope for `permissions.authorize`; a request that needs a token and has no valid one
    gets 401 UNAUTHENTICATED with `WWW-Authenticate: Bearer`. The token copy is read again off
    the event loop when it is due."""

    def __init__(self, app: ASGIApp, access: Access) -> None:
        self.app, self.access = app, access

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in PUBLIC_PATHS:
            await self.app(scope, receive, send)
            return
        if self.access.needs_reload:
            await run_in_threadpool(self.access.tokens.reload)
        authorization = dict(scope.get("headers") or []).get(b"authorization")
        try:
            principal = self.access.authenticate(
                authorization.decode("latin-1") if authorization else None
            )
        except Unauthenticated as exc:
            await errors.unauthenticated(exc)(scope, receive, send)
            return
        scope[PRINCIPAL_KEY] = principal
        await self.app(scope, receive, send)


class BodyLimit:
    """Refuse request bodies over `limit` bytes, declared or streamed (413 with a JSON body)."""

    def __init__(self, app: ASGIApp, limit: int = MAX_BODY) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            await errors.error_response(413, _too_large(self.limit), "PAYLOAD_TOO_LARGE")(
                scope, receive, send
            )
            return
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.limit:
                raise PayloadTooLarge(_too_large(self.limit))
            return message

        await self.app(scope, counted, send)


def _too_large(limit: int) -> str:
    return f"request body is larger than {limit} bytes"


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
