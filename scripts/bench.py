"""The benchmark suite: each jobnik figure beside a bare-SQL floor measured in the same run.

Figures (`--only NAME,...`; all by default), per backend:

  engine   Engine lifecycle, in process: one job, one stage of N tasks; K = 1, 2, 4 threads each
           loop `Jobnik.dequeue(stage_type)` then `Jobnik.report_task(COMPLETED, attempt=...)`
           until the stage is drained. tasks/s. Floor: the raw SQL lifecycle (scripts/bench_floor:
           claim with FOR UPDATE SKIP LOCKED + mark IN_PROGRESS + an event row in one
           transaction, mark COMPLETED + an event row in another), K threads, same database.
  http     HTTP lifecycle: `uvicorn jobnik.scripts.asgi:create` as a subprocess (one process per
           core, `--api-processes N`; one on SQLite) and K worker
           processes using the SDK (`Consumer.dequeue`, `Consumer.complete`). tasks/s, and p50/p99
           of dequeue and of complete. Floor: the raw lifecycle with K threads (its claim and done
           transactions' latencies for the latency lines).
  batch    Batches (scripts/bench_batch.py): the engine lifecycle and the HTTP lifecycle with K=4
           SDK processes, each claiming 10 tasks per dequeue and reporting them in one request.
           tasks/s. Floor: the raw lifecycle with 4 threads (one task per transaction).
  plain    A plain keep-alive client (scripts/bench_batch.py): 4 processes x 2 threads, each on
           its own `http.client` connection, looping dequeue + COMPLETED one task at a time: the
           server alone, without the SDK. tasks/s. Floor: the raw lifecycle with 8 threads.
  observe  The HTTP lifecycle at the largest K with telemetry off, with metrics, with metrics and
           request logs, and with metrics and traces (scripts/bench_observe.py). tasks/s of each
           against telemetry off; and a request's server CPU with metrics off and on, in
           process, by turns. The goals: metrics cost at most 5 % of each.
  bulk     Bulk creation: N tasks through `Jobnik.add_tasks` in batches of 1,000. tasks/s.
           Floor: the same rows (the event row and the read-model rows TaskCreated writes, copied
           from a task the engine created) as multi-row INSERTs, a transaction per batch.
  depth    Queue depth: `Jobnik.dequeue` median at 100 queued tasks vs at DEPTH over TYPES stage
           types (scripts/bench_dequeue.py's `run`). Floor: the bare claim query at each depth.
  scrape   Scrape cost: GET /service-metrics and GET /metrics at DEPTH tasks over TYPES stage types
           vs at 100 tasks over the same types (scripts/bench_scrape.py). Median ms; goals: at
           most 1.5x, under 100 ms.
  rebuild  Rebuild and replay (scripts/bench_rebuild.py's functions): events/s of a full
           projection rebuild of the LARGE log vs reading and decoding it; peak RSS of the rebuild
           at LARGE vs SMALL (each in a fresh child process).
  hot      Hot stage: 8 threads complete one stage of N tasks. tasks/s vs the raw floor with 8
           threads; lock waits per 1,000 tasks (write sessions that began while another of this
           process's write sessions was open: each of them queued on the event-table lock /
           BEGIN IMMEDIATE; on PostgreSQL a side thread also samples `pg_locks WHERE NOT
           granted`); retries per 1,000 tasks (commands run again after a conflict, by the
           engine's own retry or by the benchmark's worker loop).
  console  The console's jobs page (`GET /ui/jobs`, in process) with CONSOLE_JOBS jobs (100,000;
           scripts/bench_console.py): its first page, and filtered by status. ms. Floor: the
           page's three statements run bare.

Every line: name, backend, jobnik value, floor, unit, ratio = value/floor and its orientation
(throughput: share of the floor, higher is better; latency and memory: times the floor, lower is
better). Then one goal line per target. Lines starting with '#' are progress.

Usage:
  python scripts/bench.py [--quick] [--backend postgres|sqlite|both] [--only engine,bulk]
      [--json PATH] [--pg-url postgresql://postgres@127.0.0.1:5432] [--tasks N]
      [--api-processes N] [--types N]
  jobnik bench ...   (the same options)

--quick (about a minute on PostgreSQL) shrinks every size; figures at quick sizes are noisier.
--tasks N sets the task count of the engine, HTTP and hot-stage runs (full: 20,000, 5,000 and
20,000; the engine lifecycle runs at about 40 tasks/s on PostgreSQL here, so the full sizes
take most of an hour).
Every figure but depth, scrape and rebuild runs in one fresh database per backend (PostgreSQL:
bench_suite_<pid>, dropped afterwards), each with its own stage types and floor tables.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import multiprocessing
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlparse, urlunparse

import psycopg

from jobnik.domain.application import Jobnik, NewJob, NewStage, NewTask
from jobnik.domain.commands import conflicts_retried
from jobnik.domain.errors import (
    DatabaseError,
    StaleAttempt,
    TaskNotFound,
    TaskStatusUpdateFailed,
)
from jobnik.domain.statuses import TaskStatus
from jobnik.projections.startup import migrate
from jobnik.projections.store.backends import open_store
from jobnik.projections.store.base import SqlStore
from jobnik.projections.store.config import library_env
from jobnik.scripts import bench_floor
from jobnik.scripts.bench_report import Figure, Goal, print_figures, print_goals, write_json
from jobnik.scripts.bench_worker import http_worker
from jobnik.workers.client import HttpTransport
from jobnik.workers.errors import TransportError

NAMES = (
    "engine", "http", "batch", "plain", "observe", "bulk", "depth", "scrape", "rebuild", "hot",
    "console",
)  # fmt: skip
BATCH = 1_000
PG_URL = "postgresql://postgres@127.0.0.1:5432"
# Conflicts a worker would answer by running the command again (each counts as one retry).
RETRYABLE = (DatabaseError, TaskStatusUpdateFailed)


@dataclass(frozen=True)
class Sizes:
    lifecycle_tasks: int
    ks: tuple[int, ...]
    http_tasks: int
    http_ks: tuple[int, ...]
    bulk_tasks: int
    depth: int
    depth_types: int
    depth_samples: int
    rebuild_small: int
    rebuild_large: int
    hot_tasks: int
    hot_workers: int = 8
    observe_rounds: int = 3
    console_jobs: int = 100_000


FULL = Sizes(
    20_000, (1, 2, 4), 5_000, (1, 4), 100_000, 1_000_000, 1_000, 50, 30_000, 300_000, 20_000
)
QUICK = Sizes(
    80, (1, 2, 4), 80, (4,), 10_000, 5_000, 50, 20, 1_000, 6_000, 100, console_jobs=10_000
)
TINY = Sizes(12, (1, 4), 12, (2,), 1_500, 200, 2, 6, 1_000, 1_000, 16, 4, 1, 300)  # the test's


def say(line: str = "") -> None:
    print(line, flush=True)


# -- databases ---------------------------------------------------------------------------------


@dataclass
class Ctx:
    """Where and how big: one backend's run."""

    backend: str
    sizes: Sizes
    pg_url: str
    tmp: Path
    url: str | None = None  # the database every figure but depth and rebuild runs in
    api_processes: int = 1  # uvicorn processes of the HTTP figure (PostgreSQL)
    logs: dict[int, str] = field(default_factory=dict)  # rebuild logs by size, across backends
    figures: list[Figure] = field(default_factory=list)
    goals: list[Goal] = field(default_factory=list)

    def add(self, name: str, value: float, floor: float | None, unit: str, **kw: Any) -> Figure:
        f = Figure(name, self.backend, value, floor, unit, **kw)
        self.figures.append(f)
        say(
            f"# {self.backend} {name}: {value:,.2f} {unit}"
            + (f" (floor {floor:,.2f})" if floor is not None else "")
        )
        return f

    def goal(self, name: str, met: bool, detail: str) -> None:
        self.goals.append(Goal(name, self.backend, met, detail))

    @contextmanager
    def database(self, label: str) -> Iterator[str]:
        """The backend's database (figures use distinct stage types and floor tables)."""
        assert self.url is not None
        yield self.url


@contextmanager
def suite_database(backend: str, pg_url: str, tmp: Path) -> Iterator[str]:
    """A fresh, empty database for one backend's figures; dropped (deleted) afterwards."""
    if backend == "sqlite":
        path = tmp / "suite.db"
        yield f"sqlite:///{path}"
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
        return
    name = f"bench_suite_{os.getpid()}"
    admin_url = urlunparse(urlparse(pg_url)._replace(path="/postgres"))
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        admin.execute(f"CREATE DATABASE {name}")
    try:
        yield urlunparse(urlparse(pg_url)._replace(path=f"/{name}"))
    finally:
        with psycopg.connect(admin_url, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


class CountingStore:
    """A store whose write sessions are counted, and those that began while another was open.

    SQLite write sessions hold the writer lock from BEGIN IMMEDIATE, so there a session that
    begins while another is open waits for it: that count is the number of lock waits.
    PostgreSQL write sessions run their loads side by side and queue only for the short locked
    end (the hot-stage figure samples pg_locks for those waits instead). Everything else is the
    store's."""

    def __init__(self, store: SqlStore) -> None:
        self.store = store
        self._mutex = threading.Lock()
        self.active = self.writes = self.waits = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    @contextmanager
    def session(self, *, write: bool) -> Iterator[Any]:
        if not write:
            with self.store.session(write=False) as session:
                yield session
            return
        with self._mutex:
            self.writes += 1
            self.waits += self.active > 0
            self.active += 1
        try:
            with self.store.session(write=True) as session:
                yield session
        finally:
            with self._mutex:
                self.active -= 1


@contextmanager
def engine(url: str) -> Iterator[CountingStore]:
    store = open_store(library_env({"JOBNIK_DATABASE_URL": url}))
    try:
        migrate(store)
        yield CountingStore(store)
    finally:
        store.close()


def populate(app: Jobnik, stage_type: str, n: int) -> Any:
    """One job, one stage of `stage_type` holding `n` PENDING tasks (batches of BATCH)."""
    job = app.create_job(NewJob(name=f"bench {stage_type}", data={}))
    stage = app.add_stage(job.id, NewStage(type=stage_type, data={}))
    for first in range(0, n, BATCH):
        app.add_tasks(
            stage.id, [NewTask(data={"i": first + i}) for i in range(min(BATCH, n - first))]
        )
    return stage


@dataclass
class Drain:
    """What K engine threads did while draining a stage."""

    tasks: int = 0
    retries: int = 0
    seconds: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def rate(self) -> float:
        return self.tasks / self.seconds if self.seconds else 0.0


def drain(app: Jobnik, stage_type: str, k: int) -> Drain:
    """K threads loop dequeue + report COMPLETED until the stage type has nothing queued."""
    out = Drain()

    def work(_: int) -> None:
        done = retries = 0
        while True:
            try:
                task = app.dequeue(stage_type)
            except TaskNotFound:
                break
            except RETRYABLE:
                retries += 1
                continue
            for _attempt in range(10):
                try:
                    app.report_task(task.id, TaskStatus.COMPLETED, attempt=task.attempt)
                    done += 1
                    break
                except StaleAttempt:  # the sweeper took it back: it will be dequeued again
                    retries += 1
                    break
                except RETRYABLE:
                    retries += 1
            else:
                raise RuntimeError(f"report of {task.id} kept failing")
        with out.lock:
            out.tasks += done
            out.retries += retries

    out.seconds = bench_floor.parallel(k, work)
    return out


# -- 1. engine lifecycle -----------------------------------------------------------------------


def fig_engine(ctx: Ctx) -> None:
    n = ctx.sizes.lifecycle_tasks
    with ctx.database("engine") as url, engine(url) as store:
        app = Jobnik(store)
        raw = bench_floor.RawLifecycle(url)
        raw.setup()
        ratio_at: dict[int, float] = {}
        for k in ctx.sizes.ks:
            populate(app, f"life-k{k}", n)
            raw.load(f"floor-k{k}", n)
            got = drain(app, f"life-k{k}", k)
            floor = raw.run(f"floor-k{k}", k)
            check(got.tasks == n and floor.tasks == n, f"drained {got.tasks}/{floor.tasks} of {n}")
            f = ctx.add(
                f"engine lifecycle K={k}",
                got.rate,
                floor.rate,
                "tasks/s",
                floor_name=f"raw SQL lifecycle, {k} threads",
                note=f"{n:,} tasks; {got.retries} retries",
            )
            ratio_at[k] = f.ratio or 0.0
    k = 4 if 4 in ratio_at else max(ratio_at)
    ctx.goal(
        f"engine lifecycle >= 50% of floor at K={k}",
        ratio_at[k] >= 0.5,
        f"{ratio_at[k]:.0%} of the raw SQL lifecycle",
    )


def check(ok: bool, what: str) -> None:
    if not ok:
        raise RuntimeError(what)


# -- 2. HTTP lifecycle -------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def server(
    url: str,
    log: Path,
    processes: int = 1,
    env: dict[str, str] | None = None,
    args: Sequence[str] = (),
) -> Iterator[str]:
    """`uvicorn jobnik.scripts.asgi:create` on a free port (`processes` worker processes, as
    `jobnik serve --workers`); its base URL once every process has started. `env` adds to
    the server's environment, `args` to its command line."""
    port = free_port()
    env = {**os.environ, "JOBNIK_DATABASE_URL": url, **(env or {})}
    cmd = [sys.executable, "-m", "uvicorn", "jobnik.scripts.asgi:create", "--factory"]
    cmd += ["--host", "127.0.0.1", "--port", str(port), "--log-level", "info"]
    cmd += ["--no-access-log", "--workers", str(processes), *args]
    with log.open("wb") as out:
        proc = subprocess.Popen(
            cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        # Every process started, and /liveness answers: one uvicorn process logs its start-up
        # before it binds the socket, so the first request can still be refused.
        while log.read_text().count(STARTED) < processes or not answers(base, "/liveness"):
            if proc.poll() is not None:
                raise RuntimeError(f"server exited {proc.returncode}:\n{log.read_text()[-3000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"server not ready:\n{log.read_text()[-3000:]}")
            time.sleep(0.05)
        yield base
    finally:
        stop_group(proc)


def stop_group(proc: subprocess.Popen[bytes], timeout: float = 15) -> None:
    """SIGTERM the process group `proc` leads, SIGKILL it if it is still there after
    `timeout` seconds."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


STARTED = "Application startup complete"


def answers(base: str, path: str) -> bool:
    """GET `path` of `base` answers 200 (False while nothing listens yet): the SDK's transport,
    once, no retries."""
    transport = HttpTransport(base, timeout=2)
    try:
        return transport("GET", path, None)[0] == 200
    except TransportError:
        return False
    finally:
        transport.close()


def quantile(xs: Sequence[float], q: float) -> float:
    ordered = sorted(xs)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def run_http_workers(base: str, stage_type: str, k: int) -> tuple[float, list[float], list[float]]:
    """K SDK worker processes drain `stage_type` through the API at `base`: (seconds from their
    common start to the last one's end, dequeue latencies, complete latencies)."""
    seconds, outs = worker_processes(k, http_worker, base, stage_type)
    dequeue = [x for o in outs for x in o["dequeue"]]
    complete = [x for o in outs for x in o["complete"]]
    return seconds, dequeue, complete


def worker_processes(k: int, target: Callable[..., None], *args: Any) -> tuple[float, list[Any]]:
    """K processes of `target(*args, start, results)` (scripts/bench_worker.py), released
    together: (seconds from their common start to the last one's "end", what each put)."""
    # Workers fork from a single-threaded fork server that imported the SDK once: a spawned
    # worker would spend seconds importing, and a plain fork of this threaded process is unsafe.
    mp = multiprocessing.get_context("forkserver")
    mp.set_forkserver_preload(["jobnik.scripts.bench_worker"])
    start, results = mp.Barrier(k + 1, timeout=120), mp.Queue()
    procs = [mp.Process(target=target, args=(*args, start, results)) for _ in range(k)]
    for p in procs:
        p.start()
    start.wait()
    t0 = time.monotonic()
    outs = [results.get(timeout=3600) for _ in procs]
    for p in procs:
        p.join()
        check(p.exitcode == 0, f"HTTP worker exited {p.exitcode}")
    return max(o["end"] for o in outs) - t0, outs


def fig_http(ctx: Ctx) -> None:
    n = ctx.sizes.http_tasks
    with ctx.database("http") as url:
        with engine(url) as store:  # loaded before the server starts; then closed
            app = Jobnik(store)
            for k in ctx.sizes.http_ks:
                populate(app, f"http-k{k}", n)
        raw = bench_floor.RawLifecycle(url)
        raw.setup()
        ratio_at: dict[int, float] = {}
        processes = ctx.api_processes if ctx.backend == "postgres" else 1  # (SQLite: one writer)
        with server(url, ctx.tmp / "server.log", processes) as base:
            for k in ctx.sizes.http_ks:
                seconds, dequeue, complete = run_http_workers(base, f"http-k{k}", k)
                raw.load(f"floor-http-k{k}", n)
                floor = raw.run(f"floor-http-k{k}", k)
                check(len(dequeue) == n, f"HTTP workers completed {len(dequeue)} of {n}")
                f = ctx.add(
                    f"HTTP lifecycle K={k}",
                    n / seconds,
                    floor.rate,
                    "tasks/s",
                    floor_name=f"raw SQL lifecycle, {k} threads",
                    note=f"{n:,} tasks, {k} SDK processes, {processes} uvicorn processes",
                )
                ratio_at[k] = f.ratio or 0.0
                for q in (0.5, 0.99):
                    for label, ours, theirs in (
                        ("dequeue", dequeue, floor.claim),
                        ("complete", complete, floor.done),
                    ):
                        ctx.add(
                            f"HTTP {label} p{round(q * 100)} K={k}",
                            quantile(ours, q) * 1000,
                            quantile(theirs, q) * 1000,
                            "ms",
                            higher_is_better=False,
                            floor_name=f"raw {'claim' if label == 'dequeue' else 'done'} txn",
                        )
    k = 4 if 4 in ratio_at else max(ratio_at)
    ctx.goal(
        f"HTTP lifecycle >= 25% of floor at K={k}",
        ratio_at[k] >= 0.25,
        f"{ratio_at[k]:.0%} of the raw SQL lifecycle",
    )


# -- 3. bulk creation --------------------------------------------------------------------------


def fig_bulk(ctx: Ctx) -> None:
    n = ctx.sizes.bulk_tasks
    with ctx.database("bulk") as url, engine(url) as store:
        app = Jobnik(store)
        job = app.create_job(NewJob(name="bench bulk", data={}))
        stage = app.add_stage(job.id, NewStage(type="bulk", data={}))
        first: Any = None
        t0 = time.perf_counter()
        for start in range(0, n, BATCH):
            batch = [NewTask(data={"i": start + i}) for i in range(min(BATCH, n - start))]
            tasks = app.add_tasks(stage.id, batch)
            first = first or tasks[0]
        engine_s = time.perf_counter() - t0
        stage_key = stage.id if store.backend == "postgres" else str(stage.id)
        template = bench_floor.bulk_template(url, store.events_table, first.id, stage_key)
        raw_s = bench_floor.raw_bulk(url, store.events_table, template, n)
        tables = ", ".join(["events", *template.rows, "summaries_v1"])
        f = ctx.add(
            "bulk creation (add_tasks, 1,000/batch)",
            n / engine_s,
            n / raw_s,
            "tasks/s",
            floor_name=f"multi-row INSERTs into {tables}",
            note=f"{n:,} tasks",
        )
    ctx.goal("bulk creation >= 30% of floor", (f.ratio or 0) >= 0.3, f"{f.ratio:.0%}")


# -- 4. queue depth ----------------------------------------------------------------------------


def fig_depth(ctx: Ctx) -> None:
    from jobnik.scripts import bench_dequeue

    s = ctx.sizes
    r = bench_dequeue.run(
        ctx.backend,
        depth=s.depth,
        types=s.depth_types,
        samples=s.depth_samples,
        sample_types=min(10, s.depth_types),
        pg_url=ctx.pg_url,
        settle=s.depth > 10_000,  # VACUUM and CHECKPOINT matter after a big load only
    )
    check(not r.problems, f"the claim is not index-backed: {r.problems}")
    med = statistics.median
    for label, ours, theirs in (
        (f"{bench_dequeue.DEPTH_A}", r.dequeue_a, r.claim_a),
        (f"{r.depth:,} over {r.types:,} types", r.dequeue_b, r.claim_b),
    ):
        ctx.add(
            f"dequeue median at {label}",
            med(ours) * 1000,
            med(theirs) * 1000,
            "ms",
            higher_is_better=False,
            floor_name="bare claim query (index probe)",
        )
    claim_ratio = med(r.claim_b) / med(r.claim_a)
    ctx.goal(
        f"queue depth: dequeue at {r.depth:,} <= 1.5x at {bench_dequeue.DEPTH_A}",
        r.ratio <= bench_dequeue.TARGET,
        f"{r.ratio:.2f}x (bare claim {claim_ratio:.2f}x)",
    )


# -- 5. rebuild and replay ---------------------------------------------------------------------


def fig_rebuild(ctx: Ctx) -> None:
    from jobnik.scripts import bench_rebuild as br

    s = ctx.sizes
    for size in {s.rebuild_small, s.rebuild_large}:  # SQLite logs, written once for both backends
        if size not in ctx.logs:
            ctx.logs[size] = br.write_log(ctx.tmp / f"rebuild-{size}.db", size, f"log {size:,}")
    one = s.rebuild_small == s.rebuild_large  # (the test's tiny sizes: one log, one rebuild)
    with contextlib.ExitStack() as stack:
        small, large = ctx.logs[s.rebuild_small], ctx.logs[s.rebuild_large]
        if ctx.backend == "postgres":
            small = stack.enter_context(br.postgres_copy(small, ctx.pg_url, "small"))
            large = (
                small if one else stack.enter_context(br.postgres_copy(large, ctx.pg_url, "large"))
            )
        raw = br.measure("raw", large)
        big = br.measure("rebuild", large)
        little = big if one else br.measure("rebuild", small)
    speed = ctx.add(
        f"rebuild all projections ({big['events']:,} events)",
        big["events"] / big["seconds"],
        raw["events"] / raw["seconds"],
        "events/s",
        floor_name="read + decode the same log",
    )
    memory = ctx.add(
        f"rebuild peak RSS ({big['events']:,} vs {little['events']:,} ev)",
        big["maxrss_kb"] / 1024,
        little["maxrss_kb"] / 1024,
        "MB",
        higher_is_better=False,
        floor_name="the same rebuild of the smaller log",
        note=f"read+decode alone peaks at {raw['maxrss_kb'] / 1024:,.0f} MB",
    )
    ctx.goal(
        "rebuild >= 50% of read+decode, memory ratio <= 1.2",
        (speed.ratio or 0) >= 0.5 and (memory.ratio or math.inf) <= br.MAX_RATIO,
        f"speed {speed.ratio:.0%}, memory {memory.ratio:.2f}x",
    )


# -- 6. hot stage ------------------------------------------------------------------------------


class LockSampler:
    """A side thread counting, every few ms, the backends waiting for a lock in one database."""

    def __init__(self, url: str, every: float = 0.005) -> None:
        self.url, self.every = url, every
        self.samples: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="lock-sampler", daemon=True)

    def _run(self) -> None:
        with psycopg.connect(self.url, autocommit=True) as conn:
            while not self._stop.wait(self.every):
                row = conn.execute(
                    "SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database "
                    "WHERE NOT l.granted AND d.datname = current_database()"
                ).fetchone()
                self.samples.append(int(row[0]) if row else 0)

    def __enter__(self) -> LockSampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()


def fig_hot(ctx: Ctx) -> None:
    n, k = ctx.sizes.hot_tasks, ctx.sizes.hot_workers
    with ctx.database("hot") as url, engine(url) as store:
        app = Jobnik(store)
        populate(app, "hot", n)
        raw = bench_floor.RawLifecycle(url)
        raw.setup()
        raw.load("floor-hot", n)
        writes0, waits0, conflicts0 = store.writes, store.waits, conflicts_retried()
        with contextlib.ExitStack() as stack:
            sampler = stack.enter_context(LockSampler(url)) if store.backend == "postgres" else None
            got = drain(app, "hot", k)
        floor = raw.run("floor-hot", k)
        check(got.tasks == n and floor.tasks == n, f"drained {got.tasks}/{floor.tasks} of {n}")
        writes, waits = store.writes - writes0, store.waits - waits0
        retries = got.retries + conflicts_retried() - conflicts0
    ctx.add(
        f"hot stage, {k} workers",
        got.rate,
        floor.rate,
        "tasks/s",
        floor_name=f"raw SQL lifecycle, {k} threads",
        note=f"{n:,} tasks",
    )
    per_k = 1000 / n
    if sampler is not None and sampler.samples:
        busy = sum(1 for x in sampler.samples if x) / len(sampler.samples)
        ctx.add(
            "hot stage sessions waiting on a lock",
            statistics.mean(sampler.samples),
            None,
            "waiting",
            higher_is_better=False,
            note=(
                f"pg_locks sampled every 5 ms: someone waiting in {busy:.0%} of "
                f"{len(sampler.samples)} samples ({writes:,} write sessions; they queue only "
                "for their locked end)"
            ),
        )
    else:
        ctx.add(
            "hot stage lock waits per 1,000 tasks",
            waits * per_k,
            None,
            "waits",
            higher_is_better=False,
            note=f"{waits:,} of {writes:,} write sessions queued on BEGIN IMMEDIATE",
        )
    ctx.add(
        "hot stage retries per 1,000 tasks",
        retries * per_k,
        None,
        "retries",
        higher_is_better=False,
        note="commands run again after a stale optimistic read or a deadlock, plus errors",
    )
    ctx.goal(
        "hot stage < 5 retries per 1,000 tasks",
        retries * per_k < 5,
        f"{retries * per_k:.1f} retries",
    )


def fig_observe(ctx: Ctx) -> None:
    from jobnik.scripts.bench_observe import fig_observe as observe

    observe(ctx)


def fig_console(ctx: Ctx) -> None:
    from jobnik.scripts.bench_console import fig_console as console

    console(ctx)


def fig_scrape(ctx: Ctx) -> None:
    from jobnik.scripts.bench_scrape import fig_scrape as scrape

    scrape(ctx)


def fig_batch(ctx: Ctx) -> None:
    from jobnik.scripts.bench_batch import fig_batch as batch

    batch(ctx)


def fig_plain(ctx: Ctx) -> None:
    from jobnik.scripts.bench_batch import fig_plain as plain

    plain(ctx)


FIGURES: dict[str, Callable[[Ctx], None]] = {
    "engine": fig_engine,
    "http": fig_http,
    "batch": fig_batch,
    "plain": fig_plain,
    "observe": fig_observe,
    "bulk": fig_bulk,
    "depth": fig_depth,
    "scrape": fig_scrape,
    "rebuild": fig_rebuild,
    "hot": fig_hot,
    "console": fig_console,
}


# -- the suite ---------------------------------------------------------------------------------


def run_suite(
    backends: Sequence[str],
    only: Sequence[str] = NAMES,
    sizes: Sizes = FULL,
    pg_url: str = PG_URL,
    database_url: str | None = None,
    api_processes: int = 1,
) -> tuple[list[Figure], list[Goal]]:
    """Measure the chosen figures on each backend; progress lines as it goes.

    `database_url`: run every figure of its (one) backend in that database rather than in
    fresh ones (queue depth, scrape and rebuild still make their own)."""
    figures: list[Figure] = []
    goals: list[Goal] = []
    logs: dict[int, str] = {}
    with tempfile.TemporaryDirectory(prefix="jobnik-bench-suite-") as tmp:
        for backend in backends:
            with contextlib.ExitStack() as stack:
                url = database_url or stack.enter_context(
                    suite_database(backend, pg_url, Path(tmp))
                )
                ctx = Ctx(backend, sizes, pg_url, Path(tmp), url, api_processes, logs)
                for name in only:
                    t0 = time.perf_counter()
                    FIGURES[name](ctx)
                    say(f"# {backend} {name}: {time.perf_counter() - t0:.1f} s")
            figures += ctx.figures
            goals += ctx.goals
    return figures, goals


def main(
    argv: Sequence[str] | None = None,
    *,
    overrides: dict[str, Any] | None = None,
    prog: str | None = None,
) -> int:
    """The command line; `overrides` replaces sizes (e.g. `TINY.__dict__`)."""
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n", 1)[0])
    parser.add_argument(
        "--backend",
        choices=("postgres", "sqlite", "both"),
        default="postgres",
        help="the database(s) to measure on (default: postgres)",
    )
    parser.add_argument(
        "--only", default=",".join(NAMES), help=f"the figures to run, some of {','.join(NAMES)}"
    )
    parser.add_argument("--quick", action="store_true", help="small sizes (about a minute)")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    parser.add_argument("--pg-url", default=PG_URL, help="a server where databases may be made")
    parser.add_argument(
        "--tasks", type=int, default=None, help="tasks per lifecycle, HTTP and hot-stage run"
    )
    parser.add_argument(
        "--types", type=int, default=None, help="stage types of the depth and scrape figures"
    )
    parser.add_argument(
        "--api-processes",
        type=int,
        default=os.cpu_count() or 1,
        help="uvicorn processes serving the HTTP figure on PostgreSQL (default: one per core)",
    )
    args = parser.parse_args(argv)
    only = [x.strip() for x in args.only.split(",") if x.strip()]
    unknown = sorted(set(only) - set(NAMES))
    if unknown:
        parser.error(f"unknown figure(s) {unknown}; choose from {','.join(NAMES)}")
    sizes = replace(QUICK if args.quick else FULL, **(overrides or {}))
    if args.tasks:
        sizes = replace(
            sizes, lifecycle_tasks=args.tasks, http_tasks=args.tasks, hot_tasks=args.tasks
        )
    if args.types:
        sizes = replace(sizes, depth_types=args.types)
    backends = ("postgres", "sqlite") if args.backend == "both" else (args.backend,)
    started = time.perf_counter()
    figures, goals = run_suite(
        backends, only, sizes, args.pg_url, api_processes=max(1, args.api_processes)
    )
    say()
    print_figures(figures, say)
    say()
    print_goals(goals, say)
    took = time.perf_counter() - started
    say(f"# {'quick' if args.quick else 'full'} run: {took:.0f} s")
    if args.json:
        write_json(args.json, figures, goals, quick=args.quick, seconds=took, sizes=sizes.__dict__)
    return 0


if __name__ == "__main__":
    sys.exit(main())
