"""The CPU figure of `jobnik bench` (`--only cpu`): what a task costs the API server in CPU time.

The plain figure's drain (scripts/bench/batch.py: PROCESSES x THREADS keep-alive `http.client`
connections, each looping dequeue + COMPLETED one task at a time) against one uvicorn process;
that process's CPU time (utime + stime of /proc/PID/stat) read right before the drain and right
after. Beside it, the client processes' own CPU time over the drain and, on PostgreSQL, that of
the bench database's backends (their pids from pg_stat_activity before and after, their CPU
from /proc; a backend that ends during the drain is missed; left out when PostgreSQL runs where
this machine's /proc does not show it), its note with the task rows' updates per task and the
share of them that was HOT (pg_stat_user_tables). Milliseconds per task, no floor.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import psycopg

from jobnik.domain.application import Jobnik
from jobnik.scripts.bench.batch import PROCESSES, THREADS
from jobnik.scripts.bench.context import Ctx, check, say
from jobnik.scripts.bench.engine import engine, populate
from jobnik.scripts.bench.http_lifecycle import server_process
from jobnik.scripts.bench.processes import worker_processes
from jobnik.scripts.bench.worker import plain_worker

TICK = os.sysconf("SC_CLK_TCK")
BACKENDS = (
    "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> "
    "pg_backend_pid()"
)
# The task rows' updates so far, and how many were HOT (no index entry written): read once the
# server's backends have ended, as a backend reports its table counts when it goes idle or ends.
TASK_UPDATES = "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = 'tasks_v1'"


def cpu_seconds(pid: int, command: str | None = None) -> float | None:
    """User + system CPU seconds of process `pid` so far (None if it is gone, not readable, or
    its command is not `command`)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    name, fields = stat[stat.index("(") + 1 : stat.rindex(")")], stat[stat.rindex(")") + 2 :]
    if command is not None and name != command:
        return None
    utime, stime = fields.split()[11:13]  # the 14th and 15th fields of the line
    return (int(utime) + int(stime)) / TICK


def backends_cpu(conn: psycopg.Connection[Any]) -> dict[int, float]:
    """CPU seconds of each PostgreSQL backend of `conn`'s database but `conn`'s own, by pid."""
    pids = [row[0] for row in conn.execute(BACKENDS).fetchall()]
    cpu = {pid: cpu_seconds(pid, "postgres") for pid in pids}
    return {pid: s for pid, s in cpu.items() if s is not None}


def task_updates(conn: psycopg.Connection[Any]) -> tuple[int, int]:
    """(updates, HOT updates) of the task rows so far, as the statistics show them once every
    other backend has reported its counts (they do when they end: waits up to 2 s for that)."""
    deadline = time.monotonic() + 2
    while conn.execute(BACKENDS).fetchone() is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    conn.execute("SELECT pg_stat_clear_snapshot()")
    row = conn.execute(TASK_UPDATES).fetchone()
    return (int(row[0]), int(row[1])) if row else (0, 0)


def fig_cpu(ctx: Ctx) -> None:
    n = ctx.sizes.http_tasks
    with ctx.database("cpu") as url:
        with engine(url) as store:
            populate(Jobnik(store), "cpu", n)
        pg = psycopg.connect(url, autocommit=True) if ctx.backend == "postgres" else None
        updates: tuple[int, int] | None = None  # the task rows' (updates, HOT ones) in the drain
        try:
            upd0 = task_updates(pg) if pg else (0, 0)
            with server_process(url, ctx.tmp / "server-cpu.log") as (base, proc):
                db0 = backends_cpu(pg) if pg else {}
                server0 = cpu_seconds(proc.pid)
                seconds, outs = worker_processes(PROCESSES, plain_worker, base, "cpu", THREADS)
                server1 = cpu_seconds(proc.pid)
                db1 = backends_cpu(pg) if pg else {}
            if pg:
                upd1 = task_updates(pg)
                updates = (upd1[0] - upd0[0], upd1[1] - upd0[1])
        finally:
            if pg:
                pg.close()
    done = sum(o["tasks"] for o in outs)
    check(done == n, f"drained {done} of {n}")
    if server0 is None or server1 is None:
        raise RuntimeError(f"/proc/{proc.pid}/stat is not readable")
    clients = f"{PROCESSES} processes x {THREADS} threads of http.client"
    ctx.add(
        "API server CPU per task (plain client)",
        (server1 - server0) * 1000 / n,
        None,
        "ms",
        higher_is_better=False,
        note=f"{n:,} tasks (a dequeue and a report each), {clients}, one uvicorn process, "
        f"{n / seconds:,.0f} tasks/s",
    )
    ctx.add(
        "client CPU per task (plain client)",
        sum(o["cpu"] for o in outs) * 1000 / n,
        None,
        "ms",
        higher_is_better=False,
        note=f"the {clients}",
    )
    if pg is None:
        return
    if not db1:
        say(f"# {ctx.backend} cpu: PostgreSQL's backends are not in this machine's /proc")
        return
    ctx.add(
        "PostgreSQL CPU per task (plain client)",
        sum(s - db0.get(pid, 0.0) for pid, s in db1.items()) * 1000 / n,
        None,
        "ms",
        higher_is_better=False,
        note=f"the bench database's {len(db1)} backends (background processes not counted)"
        + (f"; {hot_share(updates, n)}" if updates else ""),
    )


def hot_share(updates: tuple[int, int], n: int) -> str:
    """The task rows' updates per task in a drain of `n` tasks, and the share that was HOT."""
    return (
        f"{updates[0] / n:.2f} task row updates per task, {updates[1] / max(updates[0], 1):.0%} HOT"
    )
