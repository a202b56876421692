"""The threads the worker's hot routes run their commands in, handed to and back from the event
loop with as little machinery as that takes.

A command blocks on the database, so it runs in a thread, not on the event loop. asyncio's
executor hand-off (`loop.run_in_executor`) goes through a `concurrent.futures.Future` chained to
an asyncio one, the pool's idle semaphore and the future's condition, each a lock or two in
Python: about 40 µs of CPU per call on uvloop, a third of what the server spends on a worker's
request besides its command. Here a call is one put on a `SimpleQueue` (C) and one
`call_soon_threadsafe` that settles the asyncio future: about a quarter of that.

Threads start as calls need them, up to a limit, each under the pool's lock (a start takes a
fraction of a millisecond, at most `limit` times); a call beyond the limit waits in the queue.
They are daemon threads: a server that stops has answered its requests first (uvicorn's
graceful shutdown), and a command cut off at exit commits nothing.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Callable
from contextlib import suppress
from queue import SimpleQueue
from typing import Any, Final, TypeVar

T = TypeVar("T")

_Call = tuple[
    asyncio.AbstractEventLoop, "asyncio.Future[Any]", contextvars.Context, Callable[[], Any]
]


class CommandThreads:
    """A pool of at most `limit` threads that `run` calls in, each with its caller's context."""

    def __init__(self, limit: int, name: str) -> None:
        if limit < 1:
            raise ValueError("a pool needs at least one thread")
        self.limit, self.name = limit, name
        self._queue: SimpleQueue[_Call] = SimpleQueue()
        self._lock = threading.Lock()
        self._threads = 0
        self._calls = 0  # calls queued or running

    @property
    def threads(self) -> int:
        """How many threads have started."""
        return self._threads

    async def run(self, call: Callable[[], T]) -> T:
        """`call()` in one of the pool's threads, with a copy of the current context (its
        contextvars: the request id, positions, the trace); its result, or its exception.
        Cancelling the await does not stop a call that has begun: its outcome is dropped."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        with self._lock:  # (a thread starts under the lock: no other call counts on it first)
            self._calls += 1
            if self._calls > self._threads and self._threads < self.limit:
                name = f"{self.name}-{self._threads + 1}"
                try:
                    threading.Thread(target=self._serve, name=name, daemon=True).start()
                except BaseException:  # (the system refused a thread: this call is not queued)
                    self._calls -= 1
                    raise
                self._threads += 1
        self._queue.put((loop, future, contextvars.copy_context(), call))
        return await future

    def _serve(self) -> None:
        queue = self._queue
        while True:
            loop, future, context, call = queue.get()
            try:
                outcome: tuple[Any, BaseException | None] = (context.run(call), None)
            except StopIteration as exc:  # (a future refuses it: turned as a coroutine turns it)
                error = RuntimeError("a command raised StopIteration")
                error.__cause__ = exc
                outcome = (None, error)
            except BaseException as exc:  # noqa: BLE001 (handed to the caller, whatever it is)
                outcome = (None, exc)
            with self._lock:
                self._calls -= 1
            with suppress(RuntimeError):  # the loop has closed: nobody waits for this outcome
                loop.call_soon_threadsafe(_settle, future, *outcome)
            del future, call, context, outcome  # (nothing of a call outlives it here)


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.cancelled():
        return
    if error is None:
        future.set_result(result)
    else:
        future.set_exception(error)


# The hot routes' commands: as many threads as AnyIO's default limit, which serves the others.
COMMANDS: Final = CommandThreads(40, "jobnik-command")
