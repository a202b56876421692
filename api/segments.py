"""Routes whose path parameter is a name that may hold "/" (a stage type, a job name), sent as %2F.

The server decodes a request's path before routing, so `/v1/limits/tiles%2Fv2` would be matched as
`/v1/limits/tiles/v2`: no route, or the wrong one (`/v1/limits/x%2Frate` would be the rate of the
type `x`). A `SegmentRoute` matches the path as sent, split at its "/" only: each segment decoded,
its own "/" and "%" then escaped again (%2F, %25), and each parameter it took decoded: a `%2F` is
a character of its segment.

A trailing slash is redirected away as on every route, except after a name that holds "/" or "%":
the router would send the client to the decoded path, another name's (`/v1/limits/x%2Frate/` to
`/v1/limits/x/rate`), so such a path matches no route.
"""

from __future__ import annotations

from urllib.parse import unquote, unquote_to_bytes

from fastapi.routing import APIRoute
from starlette.routing import Match
from starlette.types import Scope


def _segment(raw: bytes) -> str:
    """One segment of a path as sent, decoded, then its "%" and "/" escaped again."""
    text = unquote_to_bytes(raw).decode("utf-8", "replace")
    return text.replace("%", "%25").replace("/", "%2F")


def routed_path(raw_path: bytes) -> str:
    """The path a SegmentRoute matches: `raw_path`'s segments decoded, but a "/" or "%" within
    one as %2F or %25."""
    return "/".join(_segment(s) for s in raw_path.split(b"/"))


class SegmentRoute(APIRoute):
    """An APIRoute matched on the path as sent, a `%2F` within a segment (its parameter's
    value holds the `/`)."""

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        raw = scope.get("raw_path")
        if scope.get("type") != "http" or not isinstance(raw, bytes):
            return super().matches(scope)
        routed = routed_path(raw)
        decoded = unquote(routed)  # (the path as the server decoded it)
        # The router tries the path with or without a trailing slash, to redirect there: to the
        # decoded path, which names another name if one held an escaped "/" or "%".
        slash = scope.get("path", "").endswith("/")
        if slash != decoded.endswith("/"):
            if decoded != routed:
                return Match.NONE, {}
            routed = routed + "/" if slash else routed.rstrip("/")
        match, child = super().matches({**scope, "path": routed})
        if match is not Match.NONE:
            params = child["path_params"]
            child["path_params"] = {
                k: unquote(v) if isinstance(v, str) else v for k, v in params.items()
            }
        return match, child
