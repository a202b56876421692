"""The HTTP lifecycle's worker process (scripts/bench.py): kept apart so that a spawned worker
imports the SDK only, not the engine."""

from __future__ import annotations

import time
from typing import Any


def http_worker(base: str, stage_type: str, start: Any, results: Any) -> None:
    """One worker process: the SDK's dequeue and complete until the queue is empty.

    Puts {"dequeue": [s, ...], "complete": [s, ...], "end": monotonic time} on `results`."""
    from jobnik.workers.client import JobnikClient
    from jobnik.workers.consumer import Consumer

    consumer = Consumer(JobnikClient(base))
    consumer.client.get("/liveness")  # connected before the clock starts
    start.wait()
    dequeue: list[float] = []
    complete: list[float] = []
    while True:
        t0 = time.monotonic()
        task = consumer.dequeue(stage_type)
        t1 = time.monotonic()
        if task is None:
            break
        consumer.complete(task)
        dequeue.append(t1 - t0)
        complete.append(time.monotonic() - t1)
    results.put({"dequeue": dequeue, "complete": complete, "end": t0})
    consumer.client.close()
