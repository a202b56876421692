"""The console's templates (Jinja2, autoescaped) and the filters they use."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final
from urllib.parse import quote
from uuid import UUID

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.requests import Request
from starlette.responses import HTMLResponse

from jobnik.api.cookies import COOKIE
from jobnik.api.headers import BROWSER, PAGE_POLICY
from jobnik.api.pages import render_event
from jobnik.api.permissions import PRINCIPAL_KEY
from jobnik.domain.principals import Actor, Permission, Principal
from jobnik.projections.queries.audit import TOPICS, Entry

HERE: Final = Path(__file__).parent
# Every page: scripts, styles, streams and fetches from this server only; never framed.
HEADERS: Final = {"Cache-Control": "no-store", "Content-Security-Policy": PAGE_POLICY, **BROWSER}
STATIC: Final = HERE / "static"


def when(value: datetime | None) -> str:
    """A time as the console shows it: UTC, to the second."""
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S") if value else "—"


def short(value: UUID | str | None) -> str:
    return str(value)[:8] if value else "—"


def payload(entry: Entry) -> str:
    """The event's payload, as `GET /v1/jobs/{jobId}/history` renders it, indented."""
    return json.dumps(json.loads(render_event(entry))["payload"], indent=2, sort_keys=True)


def as_json(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, default=str)


def segment(value: str) -> str:
    """A name as one segment of a URL's path: its "/" too escaped (%2F), where Jinja's
    `urlencode` keeps it."""
    return quote(value, safe="")


ENV: Final = Environment(
    loader=FileSystemLoader(HERE / "templates"),
    autoescape=select_autoescape(default=True),
    trim_blocks=True,
    lstrip_blocks=True,
)
ENV.filters.update(when=when, short=short, payload=payload, as_json=as_json, segment=segment)
ENV.globals["event_types"] = sorted(TOPICS)  # the names a stream's SSE events carry


def page(request: Request, template: str, status: int = 200, **context: Any) -> HTMLResponse:
    """`template` rendered with `context`, the requester's name and what its role may do."""
    principal: Principal = request.scope.get(PRINCIPAL_KEY) or Actor.API
    html = ENV.get_template(template).render(
        principal=principal,
        signed_in=principal.authenticated and COOKIE in request.cookies,
        may_produce=principal.may(Permission.PRODUCE),
        may_operate=principal.may(Permission.OPERATE),
        **context,
    )
    return HTMLResponse(html, status_code=status, headers=HEADERS)
