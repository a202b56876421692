"""Task handlers for the worker-process tests (tests/integration/test_workers.py).

The tests run `jobnik worker run tests.integration.handlers:<name>` from the project root. Every
handler appends one JSON line per thing it did to the file named by JOBNIK_TEST_RECORDS (one
`os.write` per line on an O_APPEND file, so lines from many processes never interleave).
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from jobnik.workers import Task, TaskContext


def note(event: str, task: Task, **fields: Any) -> None:
    line = {
        "event": event,
        "task": task.id,
        "attempt": task.attempt,
        "pid": os.getpid(),
        "time": time.time(),
        **fields,
    }
    fd = os.open(os.environ["JOBNIK_TEST_RECORDS"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, (json.dumps(line) + "\n").encode())
    finally:
        os.close(fd)


def record(task: Task, context: TaskContext) -> None:
    """Does nothing but say so (and reads its stage, as a real handler would)."""
    note("handled", task, stage=context.stage.type)


def block_first_attempt(task: Task, context: TaskContext) -> None:
    """A task with data `block` hangs on its first attempt (until the process is killed)."""
    if task.data.get("block") and task.attempt == 1:
        note("blocking", task)
        time.sleep(120)
    note("handled", task)


def until_cancelled(task: Task, context: TaskContext) -> None:
    """Works until told to stop, then says when it saw that, and returns."""
    note("started", task)
    if context.wait_cancelled(60):
        note("cancelled", task, reason=context.cancel_reason)


def sleepy(task: Task, context: TaskContext) -> None:
    """Sleeps `seconds` (from the task's data), ignoring cancellation."""
    note("started", task)
    time.sleep(task.data["seconds"])
    note("finished", task)


def chatty(task: Task, context: TaskContext) -> None:
    """Logs a few lines; its first attempt then fails, so the log spans two attempts."""
    context.log(f"attempt {task.attempt}: start", f"attempt {task.attempt}: working")
    context.log(f"attempt {task.attempt}: end")
    if task.attempt == 1:
        raise RuntimeError("first attempt fails on purpose")
    note("handled", task)


def logs_and_waits(task: Task, context: TaskContext) -> dict[str, Any]:
    """Appends a log line, outlives a heartbeat or two, and completes (tests/integration/
    test_observability.py: its calls must join the task's trace)."""
    context.log("working")
    time.sleep(task.data.get("seconds", 0.5))
    note("handled", task)
    return {"ok": True}
