"""The HTTP lifecycle figure of `jobnik bench`, and the server process it runs."""

from __future__ import annotations

import math
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from jobnik.domain.application import Jobnik
from jobnik.scripts.bench import floor as bench_floor
from jobnik.scripts.bench.context import Ctx, check
from jobnik.scripts.bench.engine import engine, populate
from jobnik.scripts.bench.processes import worker_processes
from jobnik.scripts.bench.worker import http_worker
from jobnik.workers.client import HttpTransport
from jobnik.workers.errors import TransportError


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
    with server_process(url, log, processes, env, args) as (base, _):
        yield base


@contextmanager
def server_process(
    url: str,
    log: Path,
    processes: int = 1,
    env: dict[str, str] | None = None,
    args: Sequence[str] = (),
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """`server`'s base URL and its process: with one process, the one that serves."""
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
        yield base, proc
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
        f"HTTP lifecycle >= 50% of floor at K={k}",
        ratio_at[k] >= 0.5,
        f"{ratio_at[k]:.0%} of the raw SQL lifecycle",
    )
