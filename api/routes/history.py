"""History: a job's audit trail, the global event feed, and both as live server-sent events."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Callable
from enum import StrEnum
from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Depends, Header, Path, Query, Request, Response
from sse_starlette import EventSourceResponse
from starlette.concurrency import run_in_threadpool

from jobnik.api.access import Access
from jobnik.api.deps import AuditDep, reject_unknown_query
from jobnik.api.history_schemas import EventPage
from jobnik.api.pages import event_page, render_event
from jobnik.api.permissions import PrincipalDep, authorize, needs
from jobnik.api.schemas import INT64_MAX
from jobnik.domain.principals import Permission, Principal
from jobnik.projections.queries.audit import TOPICS, Page

P = Permission
router = APIRouter(
    prefix="/v1", tags=["history"], dependencies=[Depends(authorize), Depends(reject_unknown_query)]
)

JobId = Annotated[UUID, Path(alias="jobId")]
After = Annotated[int, Query(ge=0, le=INT64_MAX, description="the last position seen (cursor)")]
Limit = Annotated[int, Query(ge=1, le=1000)]
LastEventId = Annotated[str | None, Header(alias="Last-Event-ID")]
POLL_SECONDS = 0.25
_POSITION = re.compile("[0-9]{1,19}")


EventType = StrEnum("EventType", {name: name for name in TOPICS})  # type: ignore[misc]


@router.get("/jobs/{jobId}/history", response_model=EventPage, openapi_extra=needs(P.READ))
def job_history(audit: AuditDep, job_id: JobId, after: After = 0, limit: Limit = 100) -> Response:
    """Every event of the job, its stages and its tasks, in order; kept after deletion."""
    return event_page(audit.job_history(job_id, after, limit))


@router.get("/events", response_model=EventPage, openapi_extra=needs(P.READ))
def events(
    audit: AuditDep,
    after: After = 0,
    limit: Limit = 100,
    type: Annotated[
        list[EventType] | None, Query(description="event type, e.g. TaskCompleted")
    ] = None,
    job_id: UUID | None = None,
) -> Response:
    """The global event feed after a position, optionally filtered by event type and job."""
    return event_page(audit.feed(after, limit, [str(t) for t in type or ()], job_id))


def _start(after: int, last_event_id: str | None) -> int:
    text = (last_event_id or "").strip()
    if _POSITION.fullmatch(text) and int(text) <= INT64_MAX:
        return max(after, int(text))
    return after


async def _stream(
    request: Request,
    read: Callable[[int], Page],
    after: int,
    by: Principal,
    terminal: Callable[[], int | None] | None = None,
) -> AsyncIterator[dict[str, Any]]:
    """Poll `read(after)`; each event is an SSE message whose id is its log position. With
    `terminal` (the position of the job's latest terminal event while the job is ended) the
    stream ends after that event, and at once when it resumes at or past it; a rerun's events
    may follow a terminal event, and are streamed up to the next end. The stream also ends once
    `by`'s token is revoked or expires (checked at every poll)."""
    access: Access = request.app.state.access

    async def ended() -> bool:  # the job has ended at or before what was streamed
        end = await run_in_threadpool(terminal) if terminal is not None else None
        return end is not None and end <= after

    while not await request.is_disconnected():
        if not await run_in_threadpool(access.still_valid, by):
            return
        page = await run_in_threadpool(read, after)
        for e in page.items:
            yield {"id": str(e.position), "event": e.type, "data": render_event(e)}
            after = e.position
            if e.terminal and await ended():
                return
        if not page.items:
            if await ended():
                return
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
    """The job's events live (SSE); resumes after Last-Event-ID; ends once the job's latest
    event is a terminal one (COMPLETED, FAILED, ABORTED; a rerun reopens it: stream again)."""
    await run_in_threadpool(audit.job_history, job_id, 0, 1)  # 404 before the stream starts
    start = _start(after, last_event_id)
    return EventSourceResponse(
        _stream(
            request,
            lambda a: audit.job_history(job_id, a, 500),
            start,
            by,
            lambda: audit.terminal_position(job_id),
        )
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
    return EventSourceResponse(_stream(request, lambda a: audit.feed(a, 500), start, by))
