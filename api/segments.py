"""Routes whose path parameter is a name that may hold "/" (a stage type, a job name), sent as %2F.

The server decodes a request's path before routing, so `/v1/limits/tiles%2Fv2` would be matched as
`/v1/limits/tiles/v2`: no route, or the wrong one (`/v1/limits/x%2Frate` would be the rate of the
type `x`). A `SegmentRoute` matches the path as sent, with every escape decoded but `%2F` and
`%25`, and then decodes each parameter it took: a `%2F` is a character of its segment.
"""

from __future__ import annotations

import re
from typing import Final
from urllib.parse import unquote

from fastapi.routing import APIRoute
from starlette.routing import Match
from starlette.types import Scope

ESCAPE: Final = re.compile(rb"%([0-9A-Fa-f]{2})")
KEPT: Final = frozenset(b"/%")  # escapes that stay in the path matched: decoded in a parameter


def _decoded(escape: re.Match[bytes]) -> bytes:
    byte = int(escape.group(1), 16)
    return escape.group(0) if byte in KEPT else bytes([byte])


def routed_path(raw_path: bytes) -> str:
    """The path a SegmentRoute matches: `raw_path` decoded, except its %2F and %25."""
    return ESCAPE.sub(_decoded, raw_path).decode("utf-8", "replace")


class SegmentRoute(APIRoute):
    """An APIRoute matched on the path as sent, a `%2F` within a segment (its parameter's
    value holds the `/`)."""

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        raw = scope.get("raw_path")
        if scope.get("type") != "http" or not isinstance(raw, bytes):
            return super().matches(scope)
        routed = routed_path(raw)
        # (the router tries the path with or without a trailing slash, to redirect there)
        slash = scope.get("path", "").endswith("/")
        if slash and not unquote(routed).endswith("/"):
            routed += "/"
        elif not slash and routed.endswith("/"):
            routed = routed[:-1]
        match, child = super().matches({**scope, "path": routed})
        if match is not Match.NONE:
            params = child["path_params"]
            child["path_params"] = {
                k: unquote(v) if isinstance(v, str) else v for k, v in params.items()
            }
        return match, child
