"""The HTTP lifecycle with telemetry off, with metrics, with metrics and request logs, and with
metrics and traces too: the cost of each, side by side in one run (`jobnik bench --only
observe`). Beside it, the server CPU time of one request with metrics off and on, measured in
this process by turns on one app: on a machine shared with other work, throughput moves by
more than metrics cost, and CPU time per request much less.

Each variant serves from its own server processes (http_lifecycle.py's `server`; several of
them share a metrics directory, as under `jobnik serve --workers N`) with the same K
SDK worker processes draining a stage of its own; the rounds run the variants in turn (every
other round in reverse order), so drift on a shared machine spreads over all of them, and each
figure is its best round. Traces
are exported over OTLP/HTTP to a sink in this process that discards them, every request
sampled (the default): the most a trace costs the server.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from jobnik.api.main import app_from_env
from jobnik.api.middleware import RequestMiddleware
from jobnik.api.telemetry.logs import log_config
from jobnik.domain.application import Jobnik, NewTask
from jobnik.scripts.bench.context import Ctx, say
from jobnik.scripts.bench.engine import engine, populate
from jobnik.scripts.bench.http_lifecycle import run_http_workers, server
from jobnik.scripts.serve import metrics_directory

OFF = "telemetry off"
METRICS = "metrics"
LOGS = "metrics + request logs"
TRACES = "metrics + traces"
VARIANTS = (OFF, METRICS, LOGS, TRACES)


@contextmanager
def trace_sink() -> Iterator[str]:
    """An OTLP/HTTP endpoint that accepts spans and drops them."""

    class Sink(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    sink = ThreadingHTTPServer(("127.0.0.1", 0), Sink)
    thread = threading.Thread(target=sink.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{sink.server_address[1]}"
    finally:
        sink.shutdown()
        sink.server_close()


def fig_observe(ctx: Ctx) -> None:
    cpu_off, cpu_on = cpu_per_request(ctx, ctx.sizes.observe_rounds * 10)
    ctx.add(
        "server CPU per request, metrics",
        cpu_on,
        cpu_off,
        "us",
        higher_is_better=False,
        floor_name="the same, metrics off",
        note="GET /v1/tasks/{taskId} through the whole ASGI app, in process, metrics on and "
        f"off by turns, least of {ctx.sizes.observe_rounds * 10} turns each",
    )
    ctx.goal(
        "metrics cost <= 5% of a request's server CPU",
        cpu_on <= cpu_off * 1.05,
        f"{cpu_on - cpu_off:+.1f} us on {cpu_off:.0f} us ({cpu_on / cpu_off - 1:+.1%})",
    )

    n, k, rounds = ctx.sizes.http_tasks, max(ctx.sizes.http_ks), ctx.sizes.observe_rounds
    processes = ctx.api_processes if ctx.backend == "postgres" else 1
    logging_config = ctx.tmp / "observe-logging.json"
    logging_config.write_text(json.dumps(log_config("json")))
    best: dict[str, float] = {}
    with ctx.database("observe") as url, trace_sink() as endpoint:
        with engine(url) as store:
            app = Jobnik(store)
            for r in range(rounds):
                for i in range(len(VARIANTS)):
                    populate(app, f"observe-{r}-{i}", n)
        setups: dict[str, tuple[dict[str, str], list[str]]] = {
            OFF: ({"JOBNIK_METRICS": "false"}, []),
            METRICS: ({}, []),
            LOGS: ({}, ["--log-config", str(logging_config)]),
            TRACES: ({"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint}, []),
        }
        for r in range(rounds):
            # every other round backwards: the log grows run by run, and no variant should
            # always run on the larger one
            for name in VARIANTS if r % 2 == 0 else VARIANTS[::-1]:
                i = VARIANTS.index(name)
                env, args = setups[name]
                log = ctx.tmp / f"observe-{r}-{i}.log"
                with (
                    metrics_directory(processes, None) as shared,  # as `jobnik serve` does
                    server(url, log, processes, _shared(env, shared), args) as base,
                ):
                    seconds, dequeue, _ = run_http_workers(base, f"observe-{r}-{i}", k)
                rate = len(dequeue) / seconds
                say(f"# {ctx.backend} observe round {r + 1}, {name}: {rate:,.1f} tasks/s")
                best[name] = max(best.get(name, 0.0), rate)
    off = best[OFF]
    for name in VARIANTS:
        ctx.add(
            f"HTTP lifecycle K={k}, {name}",
            best[name],
            off,
            "tasks/s",
            floor_name="the same, telemetry off",
            note=f"{n:,} tasks, {k} SDK processes, {processes} uvicorn processes, best of "
            f"{rounds} round(s)",
        )
    cost = 1 - best[METRICS] / off
    ctx.goal(
        "metrics cost <= 5% of HTTP lifecycle throughput",
        cost <= 0.05,
        f"metrics {cost:.1%}; with request logs {1 - best[LOGS] / off:.1%}; "
        f"with traces {1 - best[TRACES] / off:.1%}",
    )


def cpu_per_request(ctx: Ctx, turns: int, per_turn: int = 500) -> tuple[float, float]:
    """Server CPU microseconds of GET /v1/tasks/{taskId} with metrics off and on: one app,
    called straight through its ASGI stack (no sockets, no client) in turns, `per_turn`
    requests each, its request middleware recording metrics every other turn (order
    alternating). One app, so the two sides share connections and memory: two apps differ by
    more than metrics cost. Each side's least turn, the one other work disturbed least."""
    assert ctx.url is not None
    with engine(ctx.url) as store:
        commands = Jobnik(store)
        stage = populate(commands, "observe-cpu", 0)
        task_id = commands.add_tasks(stage.id, [NewTask(data={})])[0].id
    env = {"JOBNIK_DATABASE_URL": ctx.url, "JOBNIK_SWEEP_INTERVAL": "0"}
    app = app_from_env({**env, "JOBNIK_CATCHUP_INTERVAL": "0"})
    path = f"/v1/tasks/{task_id}"
    asyncio.run(_cpu_of(app, path, 1))  # builds the middleware stack
    middleware = _request_telemetry(app.middleware_stack)
    times: dict[bool, list[float]] = {False: [], True: []}
    try:
        for turn in range(turns):
            for on in (False, True) if turn % 2 == 0 else (True, False):
                middleware.metrics = on
                times[on].append(asyncio.run(_cpu_of(app, path, per_turn)))
    finally:
        app.state.store.close()
    return min(times[False]), min(times[True])


def _shared(env: dict[str, str], directory: str | None) -> dict[str, str]:
    """`env` with the metrics directory several server processes share, when they are several."""
    return env if directory is None else {**env, "PROMETHEUS_MULTIPROC_DIR": directory}


def _request_telemetry(stack: Any) -> RequestMiddleware:
    """The request middleware in an app's middleware stack."""
    while not isinstance(stack, RequestMiddleware):
        stack = stack.app
    return stack


async def _cpu_of(app: Any, path: str, n: int) -> float:
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"bench")],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80),
    }
    statuses: list[int] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            statuses.append(message["status"])

    started = time.process_time()
    for _ in range(n):
        await app(dict(scope), receive, send)
    spent = time.process_time() - started
    if set(statuses) != {200}:
        raise RuntimeError(f"GET {path} answered {sorted(set(statuses))}")
    return spent / n * 1e6
