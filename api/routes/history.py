"""History: a job's audit trail, the global event feed, and both as live server-sent events."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Depends, Header, Path, Query, Request
from sse_starlette import EventSourceResponse
from starlette.concurrency import run_in_threadpool

from jobnik.api.access import Access
from jobnik.api.deps import AuditDep, reject_unknown_query
from jobnik.api.history_schemas import EventOut, EventPage
from jobnik.api.permissions import PrincipalDep, authorize, needs
from jobnik.domain.errors import InvalidRequest
from jobnik.domain.principals import Permission, Principal
from jobnik.projections.queries.audit import TOPICS, Page

P = Permission
router = APIRouter(
    prefix="/v1", tags=["history"], dependencies=[Depends(authorize), Depends(reject_unknown_query)]
)

JobId = Annotated[UUID, Path(alias="jobId")]
After = Annotated[int, Query(ge=0, description="the last position seen (cursor)")]
Limit = Annotated[int, Query(ge=1, le=1000)]
LastEventId = Annotated[str | None, Header(alias="Last-Event-ID")]
POLL_SECONDS = 0.25


def _types(types: list[str] | None) -> list[str]:
    unknown = [t for t in types or [] if t not in TOPICS]
    if unknown:
        raise InvalidRequest(f"request/query/type must be one of the event types, not {unknown}")
    return types or []


@router.get("/jobs/{jobId}/history", openapi_extra=needs(P.READ))
def job_history(audit: AuditDep, job_id: JobId, after: After = 0, limit: Limit = 100) -> EventPage:
    """Every event of the job, its stages and its tasks, in order; kept after deletion."""
    return EventPage.of(audit.job_history(job_id, after, limit))


@router.get("/events", openapi_extra=needs(P.READ))
def events(
    audit: AuditDep,
    after: After = 0,
    limit: Limit = 100,
    type: Annotated[list[str] | None, Query(description="event type, e.g. TaskCompleted")] = None,
    job_id: UUID | None = None,
) -> EventPage:
    """The global event feed after a position, optionally filtered by event type and job."""
    return EventPage.of(audit.feed(after, limit, _types(type), job_id))


def _start(after: int, last_event_id: str | None) -> int:
    if last_event_id and last_event_id.strip().isdigit():
        return max(after, int(last_event_id.strip()))
    return after


async def _stream(
    request: Request,
    read: Callable[[int], Page],
    after: int,
    until_terminal: bool,
    by: Principal,
) -> AsyncIterator[dict[str, Any]]:
    """Poll `read(after)`; each event is an SSE message whose id is its log position. The
    stream ends once `by`'s token is revoked or expires (checked at every poll)."""
    access: Access = request.app.state.access
    while not await request.is_disconnected():
        if not await run_in_threadpool(access.still_valid, by):
            return
        page = await run_in_threadpool(read, after)
        for e in page.items:
            data = EventOut.of(e).model_dump_json(by_alias=True)
            yield {"id": str(e.position), "event": e.type, "data": data}
            after = e.position
            if until_terminal and e.terminal:
                return
        if not page.items:
            await asyncio.sleep(POLL_SECONDS)


@router.get("/jobs/{jobId}/stream", response_class=EventSourceResponse, openapi_extra=needs(P.READ))
async def job_stream(
    request: Request,
    audit: AuditDep,
    job_id: JobId,
    by: PrincipalDep,
    last_event_id: LastEventId = None,
    after: After = 0,
) -> EventSourceResponse:
    """The job's events live (SSE); resumes after Last-Event-ID; ends after its terminal event."""
    await run_in_threadpool(audit.job_history, job_id, 0, 1)  # 404 before the stream starts
    start = _start(after, last_event_id)
    return EventSourceResponse(
        _stream(request, lambda a: audit.job_history(job_id, a, 500), start, True, by)
    )


@router.get("/events/stream", response_class=EventSourceResponse, openapi_extra=needs(P.READ))
async def events_stream(
    request: Request,
    audit: AuditDep,
    by: PrincipalDep,
    last_event_id: LastEventId = None,
    after: After = 0,
) -> EventSourceResponse:
    """The global feed live (SSE); resumes after Last-Event-ID."""
    start = _start(after, last_event_id)
    return EventSourceResponse(_stream(request, lambda a: audit.feed(a, 500), start, False, by))
