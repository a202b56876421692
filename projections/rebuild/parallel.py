"""Parallel replay: the jobs of the log shared between processes, each feeding the
shadows with the events of its jobs.

One rebuild process is bound by its own CPU: the read-ahead, fold and writer threads share one
GIL. Every row of the per-job projections (`per_job`: the inline read models, run_stats and
operations) belongs to one job and is written only by the events of that job, its stages and its
tasks; the rows a fold reads back (the job and stage rows an Enqueue needs) are of the same job.
So the events of different jobs can be replayed by different processes into the same shadow
tables, in any interleaving: each process applies its jobs' events in log order, and no process
reads or writes another's rows. The one exception, totals over jobs (operations' counters per
stage type and per event type), are sums and latest times: each process adds its share up in
memory and adds it to the rows once, at the end of its pass, in key order (`CatchUpProjection.
replay`). What is not per job (last_status: the latest job of each name) is fed by the
rebuilding process meanwhile, from its own topics.

The store deals the events to the parts by job (`SqlStore.routes`, store/routes.py). If any
event up to the head has no route (a stored form the routing cannot read), nothing runs in
parallel and the one-process pass does all the work. Then the rebuild goes on in its own process
from the head the parts stopped at (events written meanwhile, the swap) with every projection,
its folds starting with no memory of the rows the parts wrote (they read them back when needed,
as after any page).
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import queue
import time
import traceback
from collections.abc import Callable, Sequence
from multiprocessing.process import BaseProcess
from typing import Any, Final

from jobnik.domain.errors import DatabaseError
from jobnik.projections.store.backends import open_store
from jobnik.projections.store.base import SqlStore

log = logging.getLogger(__name__)

MIN_EVENTS: Final = 50_000  # fewer events to replay: one process (starting others costs more)
MAX_PROCESSES: Final = 8
Route = tuple[int, int]  # (this part, of so many parts)


def processes(configured: int | None = None) -> int:
    """Processes a rebuild replays with, where the store replays in parallel: `configured` (the
    server's `rebuild_processes` setting), else one per CPU, up to MAX_PROCESSES; 1 replays in
    the rebuilding process alone."""
    if configured is not None:
        return configured
    return max(1, min(os.cpu_count() or 1, MAX_PROCESSES))


Feed = Callable[[SqlStore, Sequence[str], Route, int, int, Callable[[int], None]], None]


def run_parts(
    store: SqlStore,
    feed: Feed,
    names: Sequence[str],
    parts: int,
    after: int,
    head: int,
    meanwhile: Callable[[], None],
    progress: Callable[[int], None],
) -> int | None:
    """`feed(store, names, (part, parts), after, head, done)` in a fresh process per part, while
    this process runs `meanwhile` and reports the events the parts applied to `progress`;
    returns the events the parts applied, or None when the log could not be routed (nothing
    ran: the caller replays in one process). The processes start (their imports take a few
    tenths of a second) while the routes are written. Raises DatabaseError if a part fails,
    after stopping the others."""
    context = multiprocessing.get_context("spawn")  # (fork would copy this process's threads)
    done = [context.Value("q", 0, lock=False) for _ in range(parts)]
    go = context.Value("i", 0)  # 1: the routes are ready; -1: stop without work
    results: multiprocessing.Queue[tuple[int, str | None]] = context.Queue()
    workers = [
        context.Process(
            target=_part,
            args=(feed, store.env, list(names), (i, parts), after, head, done[i], go, results),
            name=f"jobnik-rebuild-part-{i}",
            daemon=True,
        )
        for i in range(parts)
    ]
    ok = False
    try:
        for w in workers:
            w.start()
        with store.routes(parts, head) as complete:
            go.value = 1 if complete else -1
            if not complete:
                ok = True
                return None
            meanwhile()
            _wait(workers, results, lambda: progress(sum(d.value for d in done)))
        ok = True
        return int(sum(d.value for d in done))
    finally:
        go.value = go.value or -1
        for w in workers:
            if w.pid is None:  # never started
                continue
            if not ok:
                w.terminate()  # (its connections close: the server rolls its page back)
            w.join()


def _wait(
    workers: Sequence[BaseProcess],
    results: multiprocessing.Queue[tuple[int, str | None]],
    report: Callable[[], None],
) -> None:
    """Until every part reported success; DatabaseError for the first that failed or died."""
    finished: set[int] = set()
    while len(finished) < len(workers):
        try:
            part, error = results.get(timeout=0.2)
        except queue.Empty:
            dead = [i for i, w in enumerate(workers) if i not in finished and not w.is_alive()]
            if dead and results.empty():
                code = workers[dead[0]].exitcode
                raise DatabaseError(f"rebuild part {dead[0]} stopped (exit code {code})") from None
        else:
            if error is not None:
                raise DatabaseError(f"rebuild part {part} failed:\n{error}")
            finished.add(part)
        report()


def _part(
    feed: Feed,
    env: dict[str, str],
    names: list[str],
    route: Route,
    after: int,
    head: int,
    done: Any,
    go: Any,
    results: multiprocessing.Queue[tuple[int, str | None]],
) -> None:
    """A part's process: its own store and connections, the feed once the routes are ready,
    and its outcome reported."""
    try:
        store = open_store(env)  # (connects while the routes are written)
        while go.value == 0:
            time.sleep(0.01)
        if go.value < 0:
            store.close()
            return
        try:

            def applied(n: int) -> None:
                done.value = n

            feed(store, names, route, after, head, applied)
        finally:
            store.close()
    except BaseException:  # noqa: BLE001 - reported to the rebuilding process, which raises
        results.put((route[0], traceback.format_exc()))
        return
    results.put((route[0], None))
