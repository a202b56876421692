"""The engine figures of `jobnik bench` (lifecycle, hot stage) and the in-process engine helpers."""

from __future__ import annotations

import contextlib
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from typing import Any

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
from jobnik.domain.tasks import Task
from jobnik.projections.startup import migrate
from jobnik.projections.store.backends import open_store
from jobnik.projections.store.base import SqlStore
from jobnik.projections.store.config import library_env
from jobnik.scripts.bench import floor as bench_floor
from jobnik.scripts.bench.context import Ctx, check
from jobnik.scripts.bench.processes import breaking, released, worker_processes

BATCH = 1_000
GOAL = 0.75  # the engine lifecycle with K=4 worker processes, as a share of the raw SQL floor
# Conflicts a worker would answer by running the command again (each counts as one retry).
RETRYABLE = (DatabaseError, TaskStatusUpdateFailed)


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
    cpu: float = 0.0  # seconds of CPU the worker processes spent draining (not the database's)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def rate(self) -> float:
        return self.tasks / self.seconds if self.seconds else 0.0

    @property
    def cpu_ms(self) -> float:
        """Worker CPU per task, in ms."""
        return self.cpu * 1000 / self.tasks if self.tasks else 0.0


def work(
    app: Jobnik, stage_type: str, done_with: Callable[[Task], None] | None = None
) -> tuple[int, int]:
    """One worker: dequeue + report COMPLETED until the stage type has nothing queued; a
    conflict is answered by running the command again; `done_with` hears of each task it
    completed. (tasks completed, retries)."""
    done = retries = 0
    while True:
        try:
            task = app.dequeue(stage_type)
        except TaskNotFound:
            return done, retries
        except RETRYABLE:
            retries += 1
            continue
        for _attempt in range(10):
            try:
                app.report_task(task.id, TaskStatus.COMPLETED, attempt=task.attempt)
                done += 1
                if done_with is not None:
                    done_with(task)
                break
            except StaleAttempt:  # the sweeper took it back: it will be dequeued again
                retries += 1
                break
            except RETRYABLE:
                retries += 1
        else:
            raise RuntimeError(f"report of {task.id} kept failing")


def drain(
    app: Jobnik, stage_type: str, k: int, done_with: Callable[[Task], None] | None = None
) -> Drain:
    """K threads of `work` drain the stage type (`cpu`: the whole process's)."""
    out = Drain()

    def one(_: int) -> None:
        done, retries = work(app, stage_type, done_with)
        with out.lock:
            out.tasks += done
            out.retries += retries

    cpu = time.process_time()
    out.seconds = bench_floor.parallel(k, one)
    out.cpu = time.process_time() - cpu
    return out


def engine_worker(url: str, stage_type: str, start: Any, results: Any) -> None:
    """One worker process (`bench_processes.worker_processes`): its own store on `url`, as a
    worker opens it, then `work` once released. Puts {"tasks", "retries", "cpu", "begin", "end"}."""
    with breaking(start), closing(open_store(library_env({"JOBNIK_DATABASE_URL": url}))) as store:
        app = Jobnik(store)
        begin = released(start)
        cpu = time.process_time()
        done, retries = work(app, stage_type)
        cpu = time.process_time() - cpu
        end = time.monotonic()
        results.put({"tasks": done, "retries": retries, "cpu": cpu, "begin": begin, "end": end})


def floor_worker(url: str, stage_type: str, start: Any, results: Any) -> None:
    """One process of the raw SQL lifecycle on its own connection, connected before `start`."""
    raw = bench_floor.RawLifecycle(url)
    with breaking(start), raw.connect() as conn:
        begin = released(start)
        cpu = time.process_time()
        out = bench_floor.RawResult(0, 0.0)
        raw.work(conn, stage_type, out, threading.Lock())
        cpu = time.process_time() - cpu
        end = time.monotonic()
        results.put({"tasks": out.tasks, "retries": 0, "cpu": cpu, "begin": begin, "end": end})


def drain_processes(target: Callable[..., None], url: str, stage_type: str, k: int) -> Drain:
    """K processes of `target` (engine_worker, floor_worker) drain the stage type."""
    seconds, outs = worker_processes(k, target, url, stage_type)
    total = {key: sum(o[key] for o in outs) for key in ("tasks", "retries", "cpu")}
    return Drain(int(total["tasks"]), int(total["retries"]), seconds, total["cpu"])


# -- engine lifecycle --------------------------------------------------------------------------


def fig_engine(ctx: Ctx) -> None:
    """At each K: K threads of one process, then K worker processes (each its own store, as
    real workers), each beside the raw SQL lifecycle run the same way. The goal is judged on
    the processes; in one process the engine's Python is serialised by the GIL."""
    n = ctx.sizes.lifecycle_tasks
    with ctx.database("engine") as url, engine(url) as store:
        app = Jobnik(store)
        raw = bench_floor.RawLifecycle(url)
        raw.setup()
        ratios: dict[tuple[int, str], float] = {}
        for k in ctx.sizes.ks:
            populate(app, f"life-k{k}", n)
            raw.load(f"floor-k{k}", n)
            got = drain(app, f"life-k{k}", k)
            floor = raw.run(f"floor-k{k}", k)
            ratios[k, "threads"] = lifecycle(
                ctx, f"K={k}", got, floor, f"{k} threads", f"; worker CPU {got.cpu_ms:.2f} ms/task"
            )
            populate(app, f"life-p{k}", n)
            raw.load(f"floor-p{k}", n)
            got = drain_processes(engine_worker, url, f"life-p{k}", k)
            floor_p = drain_processes(floor_worker, url, f"floor-p{k}", k)
            ratios[k, "processes"] = lifecycle(
                ctx,
                f"K={k} (processes)",
                got,
                floor_p,
                f"{k} processes",
                f", each process its own store; worker CPU {got.cpu_ms:.2f} ms/task "
                f"(floor's {floor_p.cpu_ms:.2f})",
            )
    k = 4 if 4 in ctx.sizes.ks else max(ctx.sizes.ks)
    ctx.goal(
        f"engine lifecycle >= {GOAL:.0%} of floor at K={k} (processes)",
        ratios[k, "processes"] >= GOAL,
        f"{ratios[k, 'processes']:.0%} of the raw SQL lifecycle with {k} processes "
        f"({ratios[k, 'threads']:.0%} with {k} threads of one process)",
    )


def lifecycle(
    ctx: Ctx, which: str, got: Drain, floor: Drain | bench_floor.RawResult, workers: str, more: str
) -> float:
    """One engine lifecycle line beside its floor run by the same `workers`; its ratio."""
    n = ctx.sizes.lifecycle_tasks
    check(got.tasks == n and floor.tasks == n, f"drained {got.tasks}/{floor.tasks} of {n}")
    f = ctx.add(
        f"engine lifecycle {which}",
        got.rate,
        floor.rate,
        "tasks/s",
        floor_name=f"raw SQL lifecycle, {workers}",
        note=f"{n:,} tasks; {got.retries} retries{more}",
    )
    return f.ratio or 0.0


# -- hot stage ---------------------------------------------------------------------------------


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
