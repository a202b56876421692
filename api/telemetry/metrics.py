"""The server's Prometheus metrics: their definitions, and the registry `GET /metrics` reads.

Every metric the server records is defined here, once, with Prometheus' naming (`_total`
counters, `_seconds` histograms, base units) and labels of bounded cardinality (route template,
method, status, stage type, priority; never an id). Where Jobnik's manager names a metric, the
name and labels are its own: `http_request_duration_seconds{method,path,status_code}`, whose
`path` is the route template (`/v1/tasks/{taskId}/status`), never the raw path.

Gauges read from the read models at scrape time are collectors: `ServerMetrics.add(collector)`
registers one, and it costs what its query costs, at every scrape, in whichever process answers.

With several server processes (`jobnik serve --workers N`) the client library's multiprocess
mode keeps each process's samples in files under PROMETHEUS_MULTIPROC_DIR, and a scrape served
by any process sums them. The library picks its mode when it is first imported, from that
variable: the process that starts the workers sets it before any of them imports this module.
"""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Final

from prometheus_client import (
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    multiprocess,
)
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import Metric
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector
from starlette.concurrency import run_in_threadpool

# (the library leaves these two untyped)
MultiProcessCollector: Callable[[CollectorRegistry, str], object] = (
    multiprocess.MultiProcessCollector
)
mark_process_dead: Callable[[int, str], None] = multiprocess.mark_process_dead

# From a millisecond (a heartbeat) to ten seconds (a long read or a slow lock wait).
HTTP_BUCKETS: Final = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
UNMATCHED: Final = "unmatched"  # the path label of a request no route matched

HTTP_REQUEST_DURATION: Final = Histogram(
    "http_request_duration_seconds",
    "HTTP requests served, by method, route template (path) and status code, and their "
    "latency; _count is the number of requests",
    ["method", "path", "status_code"],
    buckets=HTTP_BUCKETS,
    registry=None,
)
HTTP_REQUESTS_IN_FLIGHT: Final = Gauge(
    "http_requests_in_flight",
    "HTTP requests being served now (SSE streams included), over the server's processes",
    multiprocess_mode="livesum",
    registry=None,
)

IDEMPOTENT_REPLAYS: Final = Counter(
    "jobnik_idempotent_replays",
    "Requests with an Idempotency-Key already used with the same body, answered with the "
    "first answer (Idempotent-Replayed: true) and nothing written again",
    registry=None,
)

# From a tenth of a millisecond (no other writer) to ten seconds (JOBNIK_DB_TIMEOUT's range).
LOCK_BUCKETS: Final = (0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)
WRITER_LOCK_WAIT: Final = Histogram(
    "jobnik_writer_lock_wait_seconds",
    "How long each write transaction waited for the writer lock (writes take turns on it); on "
    "PostgreSQL, the round trip of the statements sent with the lock",
    buckets=(*LOCK_BUCKETS, 2.5, 5.0, 10.0),
    registry=None,
)

GROUP_COMMANDS: Final = Histogram(
    "jobnik_group_commit_commands",
    "How many worker commands (dequeues and status reports) each group commit ran in one "
    "transaction: 1 when a command found no other under way (JOBNIK_GROUP_COMMIT)",
    buckets=(1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 64, 100),
    registry=None,
)

OWN: Final[tuple[Collector, ...]] = (
    HTTP_REQUEST_DURATION,
    HTTP_REQUESTS_IN_FLIGHT,
    IDEMPOTENT_REPLAYS,
    WRITER_LOCK_WAIT,
    GROUP_COMMANDS,
)


class ServerMetrics:
    """The registry a scrape renders: this module's metrics and process metrics, summed over the
    processes when `multiprocess_dir` is given, and the collectors added with `add`."""

    def __init__(self, multiprocess_dir: str | None = None) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.multiprocess_dir = multiprocess_dir
        if multiprocess_dir is None:
            for collector in (*OWN, PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
                self.registry.register(collector)
        else:
            MultiProcessCollector(self.registry, multiprocess_dir)
            self.registry.register(ServerProcesses(Path(multiprocess_dir)))

    def close(self) -> None:
        """This process ends: its live gauges (requests in flight) leave the sums."""
        if self.multiprocess_dir is not None:
            mark_process_dead(os.getpid(), self.multiprocess_dir)

    def add(self, collector: Collector) -> None:
        """Serve `collector`'s metrics too (e.g. gauges computed from the read models)."""
        self.registry.register(collector)


class Scrapes:
    """Scrapes that arrive while one of the same registry and format is being rendered wait for
    it and answer with its body: however many scrapers ask at once, a process renders each
    exposition (and reads the read models for it) once at a time. A waiter that goes away leaves
    the rendering to the others."""

    def __init__(self) -> None:
        self._running: dict[tuple[int, str], asyncio.Future[bytes]] = {}

    async def render(self, registry: CollectorRegistry, accept: str | None) -> tuple[bytes, str]:
        """`registry`'s exposition in the format `accept` asks for, and its content type."""
        encoder, content_type = choose_encoder(accept or "")
        key = (id(registry), content_type)
        running = self._running.get(key)
        if running is None or running.get_loop() is not asyncio.get_running_loop():
            running = asyncio.ensure_future(run_in_threadpool(encoder, registry))
            self._running[key] = running
            running.add_done_callback(lambda done: self._done(key, done))
        return await asyncio.shield(running), content_type

    def _done(self, key: tuple[int, str], done: asyncio.Future[bytes]) -> None:
        if self._running.get(key) is done:
            del self._running[key]


_LIVE_FILE: Final = re.compile(r"^gauge_live\w*?_(\d+)\.db$")


class ServerProcesses(Collector):
    """The standard process metrics (CPU, memory, open files, start time) of every live server
    process, with a `pid` label (one per process: bounded by the worker count). A process that
    died without cleaning up has its live gauges dropped here, as the library asks of servers
    whose workers may die."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def pids(self) -> list[int]:
        found: set[int] = set()
        for entry in os.scandir(self.directory):
            m = _LIVE_FILE.match(entry.name)
            if m:
                found.add(int(m.group(1)))
        live = []
        for pid in sorted(found):
            if _alive(pid):
                live.append(pid)
            else:
                mark_process_dead(pid, str(self.directory))
        return live

    def collect(self) -> Iterable[Metric]:
        merged: dict[str, Metric] = {}
        for pid in self.pids():
            for family in _process_families(pid):
                into = merged.setdefault(
                    family.name, Metric(family.name, family.documentation, family.type)
                )
                for s in family.samples:
                    into.add_sample(s.name, {**s.labels, "pid": str(pid)}, s.value)
        return list(merged.values())


def _process_families(pid: int) -> Iterator[Metric]:
    yield from ProcessCollector(pid=lambda: pid, registry=None).collect()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
