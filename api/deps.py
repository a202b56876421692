"""Dependencies the routes declare: the command service, the views, request context.

They are `async def` although none awaits: FastAPI runs a plain `def` dependency in its thread
pool, a thread hop (about 0.2 ms of CPU here) per dependency per request for a lookup."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Annotated, Any, Final

from fastapi import Depends, Header, Query, Request, Response
from fastapi.encoders import jsonable_encoder
from pydantic import BaseModel

from jobnik.api.grouping import GroupCommit
from jobnik.api.idempotency import IdempotencyKeys, fingerprint
from jobnik.api.input_values import INT64_MAX
from jobnik.api.settings import Settings
from jobnik.api.telemetry.metrics import IDEMPOTENT_REPLAYS
from jobnik.api.traces import creation_trace
from jobnik.domain.application import Jobnik
from jobnik.domain.errors import InvalidRequest
from jobnik.projections.queries.audit import Audit
from jobnik.projections.queries.timetravel import AsOf
from jobnik.projections.queries.views import Views


async def get_jobnik(request: Request) -> Jobnik:
    jobnik: Jobnik = request.app.state.jobnik
    return jobnik


async def get_work(request: Request) -> GroupCommit:
    """The single-task worker commands, run by the committer thread (api/grouping.py): grouped
    unless JOBNIK_GROUP_COMMIT is off."""
    work: GroupCommit = request.app.state.work
    return work


async def get_views(request: Request) -> Views:
    views: Views = request.app.state.views
    return views


async def get_audit(request: Request) -> Audit:
    audit: Audit = request.app.state.audit
    return audit


async def get_settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


JobnikDep = Annotated[Jobnik, Depends(get_jobnik)]
WorkDep = Annotated[GroupCommit, Depends(get_work)]
SettingsDep = Annotated[Settings, Depends(get_settings)]
AuditDep = Annotated[Audit, Depends(get_audit)]
ViewsDep = Annotated[Views, Depends(get_views)]


async def incoming_trace(request: Request) -> tuple[str, str | None]:
    """The trace context a created entity stores when the body names none."""
    return creation_trace(request)


TraceDep = Annotated[tuple[str, str | None], Depends(incoming_trace)]


async def as_of(
    as_of: Annotated[
        str | None,
        Query(
            description="jobnik: a log position, or an RFC 3339 date-time (its offset "
            "included); the entity as it was then",
            json_schema_extra={
                "anyOf": [
                    {"type": "integer", "minimum": 0, "maximum": INT64_MAX},
                    {"type": "string", "format": "date-time"},
                ]
            },
        ),
    ] = None,
) -> AsOf | None:
    return AsOf.parse(as_of) if as_of is not None else None


AsOfQuery = Annotated[AsOf | None, Depends(as_of)]


def _known_query(route: Any) -> frozenset[str]:
    """The query parameters `route` declares, its dependencies' included (walked once, kept on
    the route: APIRoute is neither hashable nor reused across apps)."""
    known: frozenset[str] | None = getattr(route, "_jobnik_known_query", None)
    if known is None:
        names: set[str] = set()
        stack = [route.dependant]
        while stack:
            d = stack.pop()
            names.update(p.alias for p in d.query_params)
            stack.extend(d.dependencies)
        known = frozenset(names)
        route._jobnik_known_query = known
    return known


async def reject_unknown_query(request: Request) -> None:
    """Unknown query parameters are refused, as Jobnik's manager refuses them."""
    if not request.scope.get("query_string"):
        return
    route = request.scope.get("route")
    known = _known_query(route) if hasattr(route, "dependant") else frozenset()
    for name in request.query_params:
        if name not in known:
            raise InvalidRequest(f"Unknown query parameter '{name}'")


IDEMPOTENCY_KEY_RE: Final = r"^[\x21-\x7e]{1,255}$"  # printable ASCII, no spaces


class Once:
    """Runs a creating route's command at most once per `Idempotency-Key`.

    Without a key it just calls the command. With one, the command, the rendering of its
    response and the key's record share one transaction (api/idempotency.py); a retry
    gets the recorded status and body with `Idempotent-Replayed: true`.
    """

    def __init__(
        self, keys: IdempotencyKeys, key: str | None, fingerprint: str, status: int
    ) -> None:
        self.keys, self.key, self.fingerprint, self.status = keys, key, fingerprint, status

    def __call__(
        self, command: Callable[[], BaseModel | Sequence[BaseModel | Mapping[str, Any]]]
    ) -> Any:
        if self.key is None:
            return command()

        def run() -> tuple[int, str]:
            rendered = jsonable_encoder(command())
            return self.status, json.dumps(rendered, separators=(",", ":"), ensure_ascii=False)

        answer = self.keys.once(self.key, self.fingerprint, run)
        headers = {REPLAYED: "true"} if answer.replayed else {}
        if answer.replayed:
            IDEMPOTENT_REPLAYS.inc()
        return Response(
            answer.body,
            status_code=answer.status,
            media_type="application/json",
            headers=headers,
        )


REPLAYED: Final = "Idempotent-Replayed"


async def once(
    request: Request,
    idempotency_key: Annotated[
        str | None,
        Header(
            alias="Idempotency-Key",
            pattern=IDEMPOTENCY_KEY_RE,
            description="a retry with the same key and body returns the first answer and "
            "creates nothing; the key with another body or endpoint is refused (422)",
        ),
    ] = None,
) -> Once:
    if len(request.headers.getlist("Idempotency-Key")) > 1:  # (the header names one key)
        raise InvalidRequest("request/headers/Idempotency-Key must be given once, not repeated")
    keys: IdempotencyKeys = request.app.state.idempotency
    route = request.scope.get("route")
    status = int(getattr(route, "status_code", None) or 200)
    body = await request.body() if idempotency_key is not None else b""
    return Once(keys, idempotency_key, fingerprint(request.method, request.url.path, body), status)


OnceDep = Annotated[Once, Depends(once)]
