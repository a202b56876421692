"""Read ahead: a thread produces the items of an iterator while its consumer works on the last one.

A rebuild reads and decodes a page of events (Python work, then a wait for the database) and
then applies it (Python work, then waits for the database to write it). Done in one thread the
waits add up; with the next page read and decoded by a thread of its own, each thread's Python
runs while the other one waits for the server (the GIL is released while the driver waits).

The producer starts an item only when fewer than `depth` wait for the consumer, so memory
holds the consumer's page and at most `depth` more, however long the source.
"""

from __future__ import annotations

import queue
import sys
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Final, TypeVar

T = TypeVar("T")
SWITCH: Final = 0.0005  # seconds: how long a thread that got the answer waits for the GIL


class _End:
    """The producer finished: normally (`error` None) or by raising `error`."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException | None) -> None:
        self.error = error


def read_ahead(source: Iterable[T], depth: int = 1) -> Iterator[T]:
    """The items of `source`, in order, produced by a thread at most `depth` items ahead of the
    one the consumer works on (counting the one being produced: memory holds `depth + 1`).

    An exception of the source is raised in the consumer when it reaches it. A consumer that
    stops early (closes this generator) stops the producer after its current item."""
    items: queue.SimpleQueue[T | _End] = queue.SimpleQueue()
    room = threading.Semaphore(depth)  # taken before producing an item, given back when it is
    stop = threading.Event()  # consumed

    def may_produce() -> bool:
        while not stop.is_set():
            if room.acquire(timeout=0.05):
                return True
        return False

    def produce() -> None:
        it = iter(source)
        try:
            while may_produce():
                try:
                    item = next(it)
                except StopIteration:
                    items.put(_End(None))
                    return
                items.put(item)
        except BaseException as e:  # noqa: BLE001 - handed to the consumer, raised there
            items.put(_End(e))
        finally:
            close = getattr(it, "close", None)
            if close is not None:
                close()

    thread = threading.Thread(target=produce, name="jobnik-read-ahead", daemon=True)
    with _short_switches():
        thread.start()
        try:
            while True:
                item = items.get()
                room.release()
                if isinstance(item, _End):
                    if item.error is not None:
                        raise item.error
                    return
                yield item
        finally:
            stop.set()
            thread.join()


_switches = threading.Lock()
_sharing: list[float] = []  # the interval before the first read-ahead still running, if any


@contextmanager
def _short_switches() -> Iterator[None]:
    """A shorter GIL switch interval while two threads share the work (a process-wide setting,
    restored when the last read-ahead of the process ends).

    With the default 5 ms a thread whose database answer arrived waits up to 5 ms for the other
    thread to let go of the GIL, on each of a page's dozens of round trips."""
    with _switches:
        _sharing.append(sys.getswitchinterval())
        sys.setswitchinterval(min(_sharing[0], SWITCH))
    try:
        yield
    finally:
        with _switches:
            first = _sharing[0]
            _sharing.pop()
            if not _sharing:
                sys.setswitchinterval(first)
