"""Reads that wait for a catch-up projection (`min_position`), without holding a thread.

A waiting read is a coroutine: it sleeps on the event loop and shares one position read per
projection per POLL_SECONDS with every other waiter of that projection, so a hundred waiters
cost the thread pool what one does. At most JOBNIK_MAX_WAITERS wait at once in a process; one
more is answered 503 TOO_MANY_WAITERS with Retry-After at once instead of queueing.
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from typing import Final

from starlette.concurrency import run_in_threadpool

from jobnik.domain.errors import TooManyWaiters
from jobnik.projections.catchup import tracking
from jobnik.projections.store.base import SqlStore

POLL_SECONDS: Final = 0.02


class Waiters:
    """The waits of one process, bounded by `limit`, each up to `wait_seconds`."""

    def __init__(self, store: SqlStore, limit: int, wait_seconds: float) -> None:
        self.store, self.limit, self.wait_seconds = store, limit, wait_seconds
        self.waiting = 0
        self._seen: dict[str, tuple[int, float]] = {}
        self._locks: defaultdict[str, asyncio.Lock] = defaultdict(asyncio.Lock)

    async def wait(self, projection: str, position: int | None) -> None:
        """Until `projection` has applied `position`, or the wait is over (the read then
        answers with what the projection has, and says which position that is)."""
        if not position:
            return
        if self.waiting >= self.limit:
            raise TooManyWaiters(
                f"{self.limit} reads are already waiting for a projection position; retry"
            )
        self.waiting += 1
        try:
            deadline = time.monotonic() + self.wait_seconds
            while await self._position(projection) < position and time.monotonic() < deadline:
                await asyncio.sleep(min(POLL_SECONDS, max(0.0, deadline - time.monotonic())))
        finally:
            self.waiting -= 1

    async def _position(self, projection: str) -> int:
        async with self._locks[projection]:  # one read at a time; the others take its answer
            seen = self._seen.get(projection)
            if seen is None or time.monotonic() - seen[1] >= POLL_SECONDS:
                position = await run_in_threadpool(tracking.position_of, self.store, projection)
                seen = (position, time.monotonic())
                self._seen[projection] = seen
            return seen[0]
