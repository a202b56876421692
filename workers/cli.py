"""`jobnik worker run MODULE:FUNCTION`: a worker process with a live one-line status."""

from __future__ import annotations

import importlib
import logging
import sys
import threading
from collections.abc import Callable
from typing import Any, TextIO

from jobnik.workers.loop import Handler, Worker


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
        f"running {s.running}  refused {s.refused}"
    )


def run_worker(
    spec: str,
    stage_type: str,
    api_url: str,
    *,
    concurrency: int = 1,
    heartbeat_interval: float = 10.0,
    grace_period: float = 30.0,
    out: TextIO = sys.stderr,
    make_worker: Callable[..., Worker] = Worker,
) -> Worker:
    """Run until SIGTERM/SIGINT, redrawing the status line every half second when `out` is a TTY
    (a line per change otherwise)."""
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(message)s")
    worker = make_worker(
        stage_type,
        load_handler(spec),
        base_url=api_url,
        concurrency=concurrency,
        heartbeat_interval=heartbeat_interval,
        grace_period=grace_period,
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
    return worker
