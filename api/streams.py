"""Live event streams (server-sent events): how many may be open, and where their reads run.

A process serves at most JOBNIK_MAX_STREAMS streams at once, and a token at most
JOBNIK_MAX_STREAMS_PER_TOKEN of them (with access control off, the process's bound alone); one
more is answered 503 TOO_MANY_STREAMS with Retry-After at once. A stream holds its place from
its admission until its response ends, however it ends.

A stream's database reads and the rendering of what it read run on THREADS threads of the
streams' own, never on the thread pool the routes use, and never on the event loop: however many
streams catch up at once, they queue for those threads, while every other request finds its
thread and connection free. Streams that have seen the log's head share one read of it per
POLL_SECONDS and read nothing more until it moves.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Final, TypeVar

from sse_starlette import EventSourceResponse
from starlette.types import Receive, Scope, Send

from jobnik.domain.errors import TooManyStreams
from jobnik.domain.principals import Principal

T = TypeVar("T")
POLL_SECONDS: Final = 0.25
THREADS: Final = 1


class Streams:
    """The streams of one process: at most `limit` open, `per_token` of one token's, their
    reads on THREADS threads of their own; `head` reads the log's head position."""

    def __init__(self, limit: int, per_token: int, head: Callable[[], int]) -> None:
        self.limit, self.per_token, self._read_head = limit, per_token, head
        self.open = 0
        self.by_token: Counter[str] = Counter()
        self._executor: ThreadPoolExecutor | None = None
        self._head: int | None = None
        self._head_read_at = 0.0

    def admit(self, by: Principal) -> Admission:
        """A place for a stream of `by`'s; TooManyStreams when there is none."""
        token = by.name if by.authenticated else None
        if self.open >= self.limit:
            raise TooManyStreams(f"{self.limit} live streams are already open; retry")
        if token is not None and self.by_token[token] >= self.per_token:
            raise TooManyStreams(f"token '{token}' already has {self.per_token} live streams open")
        self.open += 1
        if token is not None:
            self.by_token[token] += 1
        return Admission(self, token)

    def _release(self, token: str | None) -> None:
        self.open -= 1
        if token is not None:
            self.by_token[token] -= 1
            if not self.by_token[token]:
                del self.by_token[token]

    async def run(self, work: Callable[..., T], *args: Any) -> T:
        """`work(*args)` on the streams' threads."""
        if self._executor is None:
            self._executor = ThreadPoolExecutor(THREADS, thread_name_prefix="jobnik-stream")
        return await asyncio.get_running_loop().run_in_executor(self._executor, work, *args)

    async def head(self) -> int:
        """The log's head position, as read at most about POLL_SECONDS ago: one stream reads
        it, the others take the last value read meanwhile."""
        now = time.monotonic()
        if self._head is None or now - self._head_read_at >= POLL_SECONDS:
            self._head_read_at = now
            self._head = await self.run(self._read_head)
        return self._head

    def close(self) -> None:
        """The process ends: its streams' threads are let go."""
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None


class Admission:
    """A stream's place; given back once (`release`), whatever happens to the stream."""

    def __init__(self, streams: Streams, token: str | None) -> None:
        self.streams, self.token, self.released = streams, token, False

    def release(self) -> None:
        if not self.released:
            self.released = True
            self.streams._release(self.token)


class StreamResponse(EventSourceResponse):
    """An SSE response that gives its admission back when it ends (streamed, refused, cut off
    or answered to HEAD alike)."""

    def __init__(self, content: AsyncIterator[Any], admission: Admission) -> None:
        super().__init__(content)
        self.admission = admission

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.admission.release()
