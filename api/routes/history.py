"""History: a job's audit trail, the global event feed, and both as live server-sent events."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, Final
from uuid import UUID

from fastapi import APIRouter, Depends, Header, Path, Query, Request, Response
from sse_starlette import EventSourceResponse, ServerSentEvent

from jobnik.api.access import Access
from jobnik.api.archives import Archiver
from jobnik.api.deps import AuditDep, reject_unknown_query
from jobnik.api.errors import error_answers
from jobnik.api.history_schemas import EventPage
from jobnik.api.pages import event_page, render_event, rendered_event_page
from jobnik.api.permissions import PrincipalDep, authorize, needs
from jobnik.api.schemas import INT64_MAX
from jobnik.api.streams import POLL_SECONDS, StreamResponse, Streams
from jobnik.domain.errors import ArchiveUnreachable, JobNotFound, TooManyStreams
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
# A stream's read: at most PAGE events and READ_BYTES of stored events (or the smaller
# JOBNIK_EVENT_PAGE_BYTES); what a stream holds between its reads is about that much.
PAGE: Final = 500
READ_BYTES: Final = 128 * 1024
CHUNK_BYTES: Final = 64 * 1024
_POSITION = re.compile("[0-9]{1,19}")


EventType = StrEnum("EventType", {name: name for name in TOPICS})  # type: ignore[misc]


@router.get(
    "/jobs/{jobId}/history",
    response_model=EventPage,
    responses=error_answers(
        (JobNotFound, "no such job, in the log nor in the archives"),
        (ArchiveUnreachable, "the job is archived where this server cannot read it"),
    ),
    openapi_extra=needs(P.READ),
)
def job_history(
    audit: AuditDep, request: Request, job_id: JobId, after: After = 0, limit: Limit = 100
) -> Response:
    """Every event of the job, its stages and its tasks, in order; kept after deletion, and
    read from its archive once archived (410 ARCHIVED, naming the archive, when this server
    cannot read it)."""
    try:
        return event_page(audit.job_history(job_id, after, limit))
    except JobNotFound:
        archiver: Archiver = request.app.state.archiver
        return rendered_event_page(*archiver.page(job_id, after, limit))


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


@dataclass(frozen=True)
class _Chunk:
    """Events as SSE messages, one piece of a stream: `last` is the last one's position;
    `ends`: the last one is a terminal event of its job."""

    body: bytes
    last: int
    ends: bool


def _rendered(read: Callable[[int], Page], after: int) -> tuple[list[_Chunk], bool]:
    """`read(after)` as SSE messages (each event's id its log position) in chunks of about
    CHUNK_BYTES, cut after each terminal event; and whether the page did not reach the end of
    what was read. (A chunk is written to its connection whole: small ones keep what the
    connections buffer small.)"""
    page = read(after)
    chunks, parts, size = [], list[bytes](), 0
    for i, e in enumerate(page.items):
        parts.append(ServerSentEvent(render_event(e), event=e.type, id=str(e.position)).encode())
        size += len(parts[-1])
        if e.terminal or size >= CHUNK_BYTES or i == len(page.items) - 1:
            chunks.append(_Chunk(b"".join(parts), e.position, e.terminal))
            parts, size = [], 0
    return chunks, page.next is not None


async def _stream(
    request: Request,
    read: Callable[[int], Page],
    after: int,
    by: Principal,
    terminal: Callable[[], int | None] | None = None,
) -> AsyncIterator[bytes]:
    """Read `read(after)` whenever the log moved; each event is an SSE message whose id is its
    log position. With `terminal` (the position of the job's latest terminal event while the
    job is ended) the stream ends after that event, and at once when it resumes at or past it;
    a rerun's events may follow a terminal event, and are streamed up to the next end. The
    stream also ends once `by`'s token is revoked or expires (checked at every poll). Reads and
    rendering run on the streams' own threads (api/streams.py)."""
    access: Access = request.app.state.access
    streams: Streams = request.app.state.streams

    async def ended() -> bool:  # the job has ended at or before what was streamed
        end = await streams.run(terminal) if terminal is not None else None
        return end is not None and end <= after

    seen = -1  # the log's head when a read last reached the end of what it reads
    while not await request.is_disconnected():
        if not await streams.run(access.still_valid, by):
            return
        head = await streams.head()
        if head > seen:
            chunks, more = await streams.run(_rendered, read, after)
            for chunk in chunks:
                yield chunk.body
                after = chunk.last
                if chunk.ends and await ended():
                    return
            if more:
                continue
            if await ended():
                return
            seen = head
        await asyncio.sleep(POLL_SECONDS)


STREAM_ERRORS: Final = error_answers(
    (
        TooManyStreams,
        "JOBNIK_MAX_STREAMS streams are open in this process, or JOBNIK_MAX_STREAMS_PER_TOKEN "
        "of this token's; retry after Retry-After",
    )
)


@router.get(
    "/jobs/{jobId}/stream",
    response_class=EventSourceResponse,
    responses=STREAM_ERRORS,
    openapi_extra=needs(P.READ),
)
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
    streams: Streams = request.app.state.streams
    admission = streams.admit(by)
    try:
        await streams.run(audit.job_history, job_id, 0, 1)  # 404 before the stream starts
    except BaseException:
        admission.release()
        raise
    start = _start(after, last_event_id)
    return StreamResponse(
        _stream(
            request,
            lambda a: audit.job_history(job_id, a, PAGE, READ_BYTES),
            start,
            by,
            lambda: audit.terminal_position(job_id),
        ),
        admission,
    )


@router.get(
    "/events/stream",
    response_class=EventSourceResponse,
    responses=STREAM_ERRORS,
    openapi_extra=needs(P.READ),
)
async def events_stream(
    request: Request,
    audit: AuditDep,
    by: PrincipalDep,
    last_event_id: LastEventId = None,
    after: After = 0,
) -> EventSourceResponse:
    """The global feed live (SSE); resumes after Last-Event-ID."""
    streams: Streams = request.app.state.streams
    admission = streams.admit(by)
    start = _start(after, last_event_id)
    return StreamResponse(
        _stream(request, lambda a: audit.feed(a, PAGE, max_bytes=READ_BYTES), start, by), admission
    )
