"""Worker processes of `jobnik bench`: K of them started, then released together."""

from __future__ import annotations

import multiprocessing
import queue
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from jobnik.scripts.bench.context import check


def worker_processes(k: int, target: Callable[..., None], *args: Any) -> tuple[float, list[Any]]:
    """K processes of `target(*args, start, results)`, each putting one dict with its "begin"
    (`released(start)`) and "end" (`time.monotonic()`) on `results` and exiting 0: (seconds from
    their common start to the last one's "end", what each put). The clock starts once every
    process has started, imported what it needs and connected (it waits on `start` then), at the
    earliest "begin": a worker may run before this process is scheduled again after the release.
    A process that dies is reported."""
    # Workers fork from a single-threaded fork server that imported the SDK once: a spawned
    # worker would spend seconds importing, and a plain fork of this threaded process is unsafe.
    mp = multiprocessing.get_context("forkserver")
    mp.set_forkserver_preload(["jobnik.scripts.bench.worker"])
    start, results = mp.Barrier(k + 1, timeout=120), mp.Queue()
    procs = [mp.Process(target=target, args=(*args, start, results)) for _ in range(k)]
    for p in procs:
        p.start()
    try:
        start.wait()
        t0 = time.monotonic()
        outs: list[Any] = []
        while len(outs) < k:
            try:
                outs.append(results.get(timeout=1))
            except queue.Empty:
                died = [p.exitcode for p in procs if p.exitcode not in (None, 0)]
                check(not died, f"worker process exited {died[:1]}")
        for p in procs:
            p.join()
            check(p.exitcode == 0, f"worker process exited {p.exitcode}")
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join()
    t0 = min(t0, *(o["begin"] for o in outs))
    return max(o["end"] for o in outs) - t0, outs


def released(start: Any) -> float:
    """A worker's wait on `start` with the others: the time (`time.monotonic()`) it went on."""
    start.wait()
    return time.monotonic()


@contextmanager
def breaking(start: Any) -> Iterator[None]:
    """A worker's body: should it fail, `start` is broken, so nobody waits for it there."""
    try:
        yield
    except BaseException:
        start.abort()
        raise
