"""Concurrent claimers for the limits' tests."""

from __future__ import annotations

import threading
from collections.abc import Callable


def in_threads(work: Callable[[int], None], n: int = 8) -> list[BaseException]:
    """Run `work(i)` for i in 0..n-1, each in its own thread, all at once; the errors raised."""
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            work(i)
        except BaseException as e:  # noqa: BLE001 - returned to the test
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    return errors
