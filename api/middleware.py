"""The API's request middleware: one pure-ASGI layer that gives every request its id, carries
the log positions it reached to its response, and records its metrics and access log line (the
input gate, with the body limits, is in api/input_gate.py; authentication in api/access.py)."""

from __future__ import annotations

import re
import time
import uuid
from typing import Final

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from jobnik.api import positions
from jobnik.api.telemetry import requests
from jobnik.api.telemetry.metrics import HTTP_REQUESTS_IN_FLIGHT

REQUEST_ID_HEADER: Final = "X-Request-Id"
# A caller's own request id is kept when it is short printable ASCII, else a new one is made.
_GOOD_ID: Final = re.compile(rb"^[\x21-\x7e]{1,128}$")
REQUEST_ID_KEY: Final = "jobnik.request_id"  # the id in the ASGI scope, for the 500 handler


def _given_id(scope: Scope) -> bytes | None:
    """The request's `X-Request-Id` (the last one, when it has several)."""
    given = None
    for name, value in scope.get("headers") or ():
        if name == b"x-request-id":
            given = bytes(value)
    return given


class RequestMiddleware:
    """What every HTTP request gets, in one layer (one wrapped `send`, not one per concern):

    - an id: the caller's `X-Request-Id` when it is sane, else a new one; it is in
      `requests.REQUEST_ID` while the request is served (logs read it) and on the response;
    - the log positions it reached on its response: `X-Jobnik-Position` (the last event its
      writes committed) and `X-Jobnik-Projection-Position` (the tracking position of the
      catch-up projection it read), which the store and the catch-up reads note in a dict put in
      a ContextVar (api/positions.py), error responses included;
    - its duration in `http_request_duration_seconds` under its route template (and
      `http_requests_in_flight` while it runs), unless `metrics` is off, and its access log
      line (api/telemetry/requests.py).
    """

    def __init__(self, app: ASGIApp, metrics: bool = True) -> None:
        self.app, self.metrics = app, metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = _given_id(scope)
        rid = given.decode() if given and _GOOD_ID.match(given) else uuid.uuid4().hex
        scope[REQUEST_ID_KEY] = rid
        box: dict[str, int] = {}
        touched: dict[str, str] = {}
        id_token = requests.REQUEST_ID.set(rid)
        box_token = positions.REQUEST_POSITIONS.set(box)
        touched_token = requests.TOUCHED.set(touched)
        status = 500  # what the client gets if the application raises

        async def send_with_headers(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = MutableHeaders(scope=message)
                headers[REQUEST_ID_HEADER] = rid
                if positions.WRITTEN in box:
                    headers["X-Jobnik-Position"] = str(box[positions.WRITTEN])
                if positions.SERVED in box:
                    headers["X-Jobnik-Projection-Position"] = str(box[positions.SERVED])
            await send(message)

        metrics = self.metrics
        start = time.perf_counter()
        if metrics:
            HTTP_REQUESTS_IN_FLIGHT.inc()
        try:
            await self.app(scope, receive, send_with_headers)
        finally:
            elapsed = time.perf_counter() - start
            if metrics:
                HTTP_REQUESTS_IN_FLIGHT.dec()
            requests.record(scope, status, elapsed, touched, rid, metrics)
            requests.TOUCHED.reset(touched_token)
            positions.REQUEST_POSITIONS.reset(box_token)
            requests.REQUEST_ID.reset(id_token)
