"""Authentication: who a request's bearer token names, from a per-process copy of the tokens.

Each server process keeps every token row in memory (a deployment has tens of them) and reads
them again when its copy is older than `REFRESH_SECONDS`, so a token revoked on one process is
refused by every process within a second; expiry is checked against the clock on each request.

Modes (`JOBNIK_AUTH`): `off` serves everyone as the built-in actors (`api`, `worker`); `tokens`
requires a token on every request but the public paths; unset is `tokens` once any token has
been issued (revoked ones count: revoking every token never opens the server), and open before
that. `jobnik serve` refuses to start off loopback when it would run open without an explicit
`JOBNIK_AUTH=off` (`check_exposure`).
"""

from __future__ import annotations

import ipaddress
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Final

from starlette.concurrency import run_in_threadpool
from starlette.responses import RedirectResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from jobnik.api import errors
from jobnik.api.cookies import cookie_token, cross_site_refusal
from jobnik.api.permissions import PRINCIPAL_KEY
from jobnik.domain.errors import Exposed, Forbidden, Unauthenticated
from jobnik.domain.principals import Principal, token_principal
from jobnik.domain.tokens import secret_matches, split_bearer
from jobnik.projections.queries.tokens import TokenRow

REFRESH_SECONDS: Final = 0.5  # at most this old: a revocation is seen within a second
# Paths served without a token: liveness probes and the API's own description.
PUBLIC_PATHS: Final = frozenset(
    {"/liveness", "/openapi.json", "/docs", "/docs/oauth2-redirect", "/ui/login", "/ui/logout"}
)
# Folders served without a token: the static files of the API docs and of the console.
PUBLIC_PREFIXES: Final = ("/docs/assets/", "/ui/static/")
LOGIN_PAGE: Final = "/ui/login"


def is_public(path: str) -> bool:
    return path in PUBLIC_PATHS or path.startswith(PUBLIC_PREFIXES)


def _is_console_page(scope: Scope) -> bool:
    path: str = scope["path"]
    return (path == "/ui" or path.startswith("/ui/")) and scope.get("method") == "GET"


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:  # a host name: it may resolve anywhere
        return False


def check_exposure(mode: str | None, host: str, any_token: bool) -> None:
    """Exposed when the server would run open on a non-loopback `host` without `off` said."""
    if mode is None and not any_token and not is_loopback(host):
        raise Exposed(
            f"refusing to serve on {host} with no access control: create a token first "
            "(jobnik tokens create NAME --role admin), or set JOBNIK_AUTH=off to serve "
            "everyone (behind a trusted network only)"
        )


class TokenTable:
    """This process's copy of every token row, read again once older than `refresh` seconds."""

    def __init__(
        self,
        load: Callable[[], list[TokenRow]],
        refresh: float = REFRESH_SECONDS,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.load, self.refresh, self.monotonic = load, refresh, monotonic
        self._rows: Mapping[str, TokenRow] = {}
        self._read_at: float | None = None
        self._lock = threading.Lock()

    @property
    def stale(self) -> bool:
        return self._read_at is None or self.monotonic() - self._read_at >= self.refresh

    def reload(self) -> None:
        """Read the rows again, unless another thread just did."""
        with self._lock:
            if self.stale:
                started = self.monotonic()
                self._rows = {r.name: r for r in self.load()}
                self._read_at = started  # (as of when the read began: never younger than it)

    @property
    def rows(self) -> Mapping[str, TokenRow]:
        if self.stale:
            self.reload()
        return self._rows


class Access:
    """Decides who a request is: None (access control off or not yet on), or a token's
    principal; Unauthenticated when a token is needed and the request has no valid one."""

    def __init__(
        self,
        mode: str | None,
        tokens: TokenTable,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.mode, self.tokens, self.clock = mode, tokens, clock

    @property
    def needs_reload(self) -> bool:
        return self.mode != "off" and self.tokens.stale

    def enforced(self) -> bool:
        if self.mode == "off":
            return False
        return self.mode == "tokens" or bool(self.tokens.rows)

    def authenticate(self, authorization: str | None) -> Principal | None:
        if not self.enforced():
            return None
        scheme, _, credentials = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not credentials.strip():
            raise Unauthenticated("a bearer token is required (Authorization: Bearer NAME.SECRET)")
        parts = split_bearer(credentials.strip())
        row = self.tokens.rows.get(parts[0]) if parts else None
        # One answer for every failure: an unknown name tells a guesser nothing.
        if parts is None or row is None or not secret_matches(parts[1], row.secret_hash):
            raise Unauthenticated("the bearer token is not valid")
        now = self.clock()
        if row.revoked_at is not None:
            raise Unauthenticated(f"token '{row.name}' was revoked")
        if row.expires_at is not None and now >= row.expires_at:
            raise Unauthenticated(f"token '{row.name}' expired")
        return token_principal(row.name, row.role, row.stage_types)

    def still_valid(self, principal: Principal) -> bool:
        """Whether a principal authenticated earlier (a stream's) is still active now."""
        if not principal.authenticated:
            return True
        row = self.tokens.rows.get(principal.name)
        return row is not None and row.active(self.clock())


class Authenticate:
    """Who the request is (api/access.py), before anything reads its body: the principal goes
    in the scope for `permissions.authorize`; a request that needs a token and has no valid one
    gets 401 UNAUTHENTICATED with `WWW-Authenticate: Bearer` (a console page: a redirect to the
    login page). The token is the Authorization header's, else the console's cookie's, whose
    writes must pass `cookies.cross_site_refusal` (403 FORBIDDEN). The token copy is read again
    off the event loop when it is due."""

    def __init__(self, app: ASGIApp, access: Access) -> None:
        self.app, self.access = app, access

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or is_public(scope["path"]):
            await self.app(scope, receive, send)
            return
        if self.access.needs_reload:
            await run_in_threadpool(self.access.tokens.reload)
        headers: dict[bytes, bytes] = dict(scope.get("headers") or [])
        authorization = headers.get(b"authorization")
        cookie = cookie_token(headers) if authorization is None else None
        try:
            principal = self.access.authenticate(
                authorization.decode("latin-1")
                if authorization
                else (f"Bearer {cookie}" if cookie else None)
            )
        except Unauthenticated as exc:
            if _is_console_page(scope):
                target = LOGIN_PAGE + ("?expired=1" if cookie else "")
                await RedirectResponse(target, status_code=303)(scope, receive, send)
            else:
                await errors.unauthenticated(exc)(scope, receive, send)
            return
        refusal = cross_site_refusal(scope, headers) if cookie and principal else None
        if refusal is not None:
            await errors.response_for(Forbidden(refusal))(scope, receive, send)
            return
        scope[PRINCIPAL_KEY] = principal
        await self.app(scope, receive, send)
