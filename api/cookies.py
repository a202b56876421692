"""The console's token cookie, and the cross-site check on writes it authenticates.

`jobnik_token` holds a token (NAME.SECRET) set by the console's login page: HttpOnly (no script
reads it), SameSite=Strict (no other site's page sends it), Secure when served over TLS. The API
takes it where a request has no Authorization header. A write (any method but GET, HEAD and
OPTIONS) authenticated by the cookie must also carry the `X-Jobnik-Console` header, which a
page of another origin cannot add without a CORS preflight that jobnik does not grant (unless
JOBNIK_CORS_ORIGINS names it), and an `Origin` header, when the browser sends one, naming this
server: else 403 FORBIDDEN, and nothing is written.
"""

from __future__ import annotations

from collections.abc import Mapping
from http.cookies import CookieError, SimpleCookie
from typing import Final

from starlette.responses import Response
from starlette.types import Scope

COOKIE: Final = "jobnik_token"
CONSOLE_HEADER: Final = "X-Jobnik-Console"
SAFE_METHODS: Final = frozenset({"GET", "HEAD", "OPTIONS"})
MAX_AGE: Final = 12 * 3600  # a login lasts a working day at most (the token may expire sooner)


def cookie_token(headers: Mapping[bytes, bytes]) -> str | None:
    """The token the request's cookie holds, if any."""
    raw = headers.get(b"cookie")
    if not raw:
        return None
    jar: SimpleCookie = SimpleCookie()
    try:
        jar.load(raw.decode("latin-1"))
    except CookieError:
        return None
    morsel = jar.get(COOKIE)
    return morsel.value if morsel is not None and morsel.value else None


def _origin_of(scope: Scope, headers: Mapping[bytes, bytes]) -> str:
    host = headers.get(b"host", b"").decode("latin-1")
    return f"{scope.get('scheme', 'http')}://{host}"


def cross_site_refusal(scope: Scope, headers: Mapping[bytes, bytes]) -> str | None:
    """Why a cookie-authenticated request may not write, or None when it may."""
    if scope.get("method", "GET") in SAFE_METHODS:
        return None
    if CONSOLE_HEADER.lower().encode() not in headers:
        return (
            f"a write authenticated by the console's cookie needs the {CONSOLE_HEADER} header "
            "(other clients: Authorization: Bearer NAME.SECRET)"
        )
    origin = headers.get(b"origin")
    if origin is not None and origin.decode("latin-1") != _origin_of(scope, headers):
        return "a write authenticated by the console's cookie must come from this server's pages"
    return None


def same_origin(scope: Scope, headers: Mapping[bytes, bytes]) -> bool:
    """Whether a form post (login, logout) comes from this server's pages, as far as the
    browser says (an absent Origin is a browser that sends none on same-origin posts)."""
    origin = headers.get(b"origin")
    return origin is None or origin.decode("latin-1") == _origin_of(scope, headers)


def set_token_cookie(response: Response, token: str, secure: bool) -> None:
    response.set_cookie(
        COOKIE,
        token,
        max_age=MAX_AGE,
        path="/",
        httponly=True,
        samesite="strict",
        secure=secure,
    )


def clear_token_cookie(response: Response, secure: bool) -> None:
    response.delete_cookie(COOKIE, path="/", httponly=True, samesite="strict", secure=secure)
