"""The input gate: every request's host, path, query and body checked once, before any route
(the checks themselves: api/input_values.py); what it refuses is a 400 (413 for the body size)
with its own code, and nothing after the gate runs, so nothing is written.

The gate also keeps the event loop free while it parses: a body over INLINE_BYTES is parsed in a
worker thread, one such body at a time (a parse holds the interpreter while it runs, so two at
once would only take turns), and a route's bounded arrays (api/bodies.py) are counted on the
parsed value, before anything validates their items.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Final, Protocol
from urllib.parse import parse_qsl

import anyio
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from jobnik.api import errors
from jobnik.api.input_values import Limits, check_text, parse_json, quoted
from jobnik.domain.errors import HostNotAllowed, InvalidRequest, JobnikError, PayloadTooLarge

_BODY_METHODS: Final = frozenset({"POST", "PUT", "PATCH", "DELETE"})
# The console's sign-in and sign-out: HTML forms, whose bodies are form-encoded, not JSON.
FORM_PATHS: Final = frozenset({"/ui/login", "/ui/logout"})
PARSED_BODY: Final = "jobnik.parsed_body"  # the gate's (body, value), in the ASGI scope
# The largest body parsed on the event loop: a few milliseconds at most, whatever it holds (the
# walked parse of a 4 KiB body of empty objects); a larger one is parsed in a worker thread.
INLINE_BYTES: Final = 4 * 1024


def header(scope: Scope, name: bytes) -> bytes | None:
    """The request's first header `name` (lower case), or None."""
    for key, value in scope.get("headers") or ():
        if key == name:
            return bytes(value)
    return None


def check_host(scope: Scope, hosts: tuple[str, ...]) -> None:
    """The Host header names one of `hosts` (or, for `*.example.com`, a name under example.com),
    its port aside; any host when there are none. What a DNS-rebinding page cannot fake: its
    browser sends the attacker's host name, whatever address that name resolves to."""
    if not hosts:
        return
    host = (header(scope, b"host") or b"").decode("latin-1").strip().lower()
    name = host[: host.index("]") + 1] if host.startswith("[") and "]" in host else host
    name = name if name.startswith("[") else name.partition(":")[0]
    for allowed in hosts:
        if name == allowed or (allowed.startswith("*.") and name.endswith(allowed[1:])):
            return
    raise HostNotAllowed(
        f"request/headers/host {quoted(host)!r} is not a host this server answers to"
    )


def check_target(scope: Scope, limits: Limits) -> None:
    """The path and the query's names and values pass check_text."""
    check_text("request/path", scope.get("path", ""), None)
    query = scope.get("query_string") or b""
    if query:
        # decoded as the routes' parser does it: percent-escapes as UTF-8
        for name, value in parse_qsl(query.decode("latin-1"), keep_blank_values=True):
            check_text(f"request/query/{quoted(name)}", value, limits)
            check_text("request/query", name, None)


def check_form(body: bytes, limits: Limits) -> None:
    """A form-encoded body's names and values pass check_text."""
    try:
        text = body.decode("ascii")
        fields = parse_qsl(text, keep_blank_values=True, errors="strict")
    except (UnicodeDecodeError, ValueError):
        raise InvalidRequest("request/body is not a valid form") from None
    for name, value in fields:
        check_text(f"request/body/{quoted(name)}", value, limits)


class BodyCheck(Protocol):
    """What a request's body must pass besides the JSON checks, before it is parsed and after
    (api/bodies.py: the routes' bounded arrays)."""

    def unparsed(self, scope: Scope, body: bytes) -> None: ...

    def parsed(self, scope: Scope, value: Any) -> None: ...


class InputGate:
    """ASGI middleware: check_host and check_target on every request; a body is read whole (up
    to the body limit), checked as JSON when there is one (and by `check`, before the parse
    and after), and handed on unchanged."""

    def __init__(self, app: ASGIApp, limits: Limits, check: BodyCheck | None = None) -> None:
        self.app, self.limits, self.check = app, limits, check
        self._parsing: anyio.CapacityLimiter | None = None  # made in the loop, on first use

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        try:
            check_host(scope, self.limits.hosts)
            check_target(scope, self.limits)
            if scope["method"] not in _BODY_METHODS:
                await self.app(scope, receive, send)
                return
            body = await self._read(scope, receive)
            if scope["path"] in FORM_PATHS:
                check_form(body, self.limits)
            elif body.strip():
                scope[PARSED_BODY] = (body, await self._parse(scope, body))
        except JobnikError as exc:
            await errors.response_for(exc)(scope, receive, send)
            return
        except ClientDisconnect:
            return
        await self.app(scope, replay(body, receive), send)

    async def _parse(self, scope: Scope, body: bytes) -> Any:
        if len(body) <= INLINE_BYTES:
            return self._checked(scope, body)
        if self._parsing is None:
            self._parsing = anyio.CapacityLimiter(1)
        return await anyio.to_thread.run_sync(self._checked, scope, body, limiter=self._parsing)

    def _checked(self, scope: Scope, body: bytes) -> Any:
        """`body` parsed and checked (in the thread that parses it, where a refused value is
        also freed)."""
        if self.check is not None:
            self.check.unparsed(scope, body)
        value = parse_json(body, self.limits)
        if self.check is not None:
            self.check.parsed(scope, value)
        return value

    async def _read(self, scope: Scope, receive: Receive) -> bytes:
        limit = self.limits.body_bytes
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise PayloadTooLarge(_too_large(limit))
        return await read_body(receive, limit)


async def read_body(receive: Receive, limit: int | None = None) -> bytes:
    """The request's whole body; PayloadTooLarge past `limit` bytes, ClientDisconnect when the
    client leaves before its end (nothing may run on a part of a body)."""
    chunks: list[bytes] = []
    seen = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":  # the client left before its body ended
            raise ClientDisconnect()
        chunk = message.get("body", b"")
        seen += len(chunk)
        if limit is not None and seen > limit:
            raise PayloadTooLarge(_too_large(limit))
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


def parsed_body(scope: Scope, body: bytes) -> Any:
    """`body` as JSON: the value the gate parsed from it, else parsed now (json's errors)."""
    parsed = scope.get(PARSED_BODY)
    if parsed is not None and parsed[0] == body:
        return parsed[1]
    return json.loads(body)


def _too_large(limit: int) -> str:
    return f"request body is larger than {limit} bytes"


def replay(body: bytes, receive: Receive) -> Callable[[], Any]:
    """A `receive` that hands `body` on again, whole, then the rest of `receive`."""
    sent = False

    async def replayed() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed
