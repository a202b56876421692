"""Security headers of what a browser opens: the console's pages (api/console/render.py), and
the API's documentation page (/docs, Swagger UI), its assets and the OpenAPI document.

Every such answer may not be framed (`frame-ancestors 'none'`, `X-Frame-Options: DENY`) nor
sniffed as another type; a page runs scripts and loads styles, images and data from this server
only. The documentation page's own inline script (Swagger UI's start-up) is allowed by its
hash, computed on the page as it is served.
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Iterable
from typing import Final

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

BROWSER: Final = {
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}
PAGE_POLICY: Final = (
    "default-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'"
)
# An answer that is no page (a script, a style sheet, the OpenAPI document): nothing it may load.
FILE_POLICY: Final = "default-src 'none'; frame-ancestors 'none'"
_INLINE_SCRIPT: Final = re.compile(rb"<script>(.*?)</script>", re.DOTALL)


def page_policy(scripts: Iterable[bytes] = ()) -> str:
    """A page's Content-Security-Policy, with these inline scripts allowed by their hashes."""
    hashes = [
        "'sha256-" + base64.b64encode(hashlib.sha256(s).digest()).decode() + "'" for s in scripts
    ]
    return PAGE_POLICY + (f"; script-src 'self' {' '.join(hashes)}" if hashes else "")


class DocsHeaders:
    """ASGI middleware: the security headers on the answers under `docs` (the page, its
    assets, its OAuth2 redirect page) and on the OpenAPI `document`. An HTML answer is held
    until its body is whole (a page of a few kilobytes), for its inline scripts' hashes."""

    def __init__(self, app: ASGIApp, docs: str = "/docs", document: str = "/openapi.json") -> None:
        self.app, self.docs, self.document = app, docs, document

    def _covers(self, path: str) -> bool:
        return path in (self.docs, self.document) or path.startswith(self.docs + "/")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self._covers(scope["path"]):
            await self.app(scope, receive, send)
            return
        start: Message | None = None
        body: list[bytes] = []

        async def secured(message: Message) -> None:
            nonlocal start
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                headers.update(BROWSER)
                if headers.get("content-type", "").startswith("text/html"):
                    start = message  # sent with the body, once its scripts are known
                    return
                headers["Content-Security-Policy"] = FILE_POLICY
            elif start is not None and message["type"] == "http.response.body":
                body.append(message.get("body", b""))
                if message.get("more_body", False):
                    return
                page = b"".join(body)
                scripts = _INLINE_SCRIPT.findall(page)
                MutableHeaders(scope=start)["Content-Security-Policy"] = page_policy(scripts)
                await send(start)
                message = {"type": "http.response.body", "body": page}
            await send(message)

        await self.app(scope, receive, secured)
