"""`jobnik worker run MODULE:FUNCTION`: a worker process with a live one-line status."""

from __future__ import annotations

import importlib
import logging
import sys
import threading
from collections.abc import Callable, Mapping
from typing import Any, TextIO

from prometheus_client import start_http_server
from pythonjsonlogger.json import JsonFormatter

from jobnik.workers import tracing
from jobnik.workers.loop import Handler, Worker

log = logging.getLogger(__name__)


def load_handler(spec: str) -> Handler:
    """`package.module:function` → the function (ValueError when it is not that)."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ValueError(f"expected MODULE:FUNCTION, got {spec!r}")
    target: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        target = getattr(target, part)
    if not callable(target):
        raise ValueError(f"{spec} is not callable")
    handler: Handler = target
    return handler


def status_line(worker: Worker) -> str:
    s = worker.stats
    state = "stopping" if worker.stopping else "running"
    return (
        f"[{worker.stage_type}] {state}: done {s.done}  failed {s.failed}  "
        f"running {s.running}  cancelled {s.cancelled}  refused {s.refused}"
    )


def run_worker(
    spec: str | Handler,
    stage_type: str,
    api_url: str,
    *,
    concurrency: int = 1,
    batch_size: int = 1,
    heartbeat_interval: float = 10.0,
    grace_period: float = 30.0,
    lease_seconds: int | None = None,
    log_level: str = "INFO",
    metrics_port: int | None = None,
    metrics_host: str = "127.0.0.1",
    env: Mapping[str, str] | None = None,
    token: str | None = None,
    out: TextIO = sys.stderr,
    make_worker: Callable[..., Worker] = Worker,
) -> Worker:
    """Run the handler `spec` (MODULE:FUNCTION, or the function) until SIGTERM/SIGINT,
    redrawing the status line every half second when `out` is a TTY (a line per change
    otherwise). `metrics_port`: serve the worker's Prometheus metrics at
    http://`metrics_host`:`metrics_port`/metrics. `env`: OpenTelemetry's standard variables
    (OTEL_EXPORTER_OTLP_ENDPOINT, ...); when they ask for traces the worker exports its spans."""
    handler = logging.StreamHandler(out)  # structured: one JSON object per line, extras kept
    handler.setFormatter(JsonFormatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    logging.basicConfig(level=log_level.upper(), handlers=[handler], force=True)
    provider = tracing.export_from_env(env or {}, "jobnik-worker")
    worker = make_worker(
        stage_type,
        load_handler(spec) if isinstance(spec, str) else spec,
        base_url=api_url,
        token=token,
        concurrency=concurrency,
        batch_size=batch_size,
        heartbeat_interval=heartbeat_interval,
        grace_period=grace_period,
        lease_seconds=lease_seconds,
    )
    server = None
    if metrics_port is not None:
        server, _ = start_http_server(metrics_port, metrics_host, registry=worker.metrics.registry)
        log.info(
            "metrics at http://%s:%d/metrics",
            metrics_host,
            server.server_port,
            extra={"action": "metrics_served", "port": server.server_port},
        )
    done = threading.Event()
    tty = out.isatty()

    def show() -> None:
        last = ""
        while not done.wait(0.5):
            line = status_line(worker)
            if tty:
                out.write("\r\x1b[2K" + line)
                out.flush()
            elif line != last:
                out.write(line + "\n")
                out.flush()
            last = line

    painter = threading.Thread(target=show, daemon=True)
    painter.start()
    try:
        worker.run()
    finally:
        done.set()
        painter.join(1)
        out.write(("\r\x1b[2K" if tty else "") + status_line(worker) + "\n")
        out.flush()
        if server is not None:
            server.shutdown()
            server.server_close()
        if provider is not None:
            provider.shutdown()  # the last spans exported before the process ends
    return worker
