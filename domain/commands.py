"""How a command runs: one transaction, run again from the start on a concurrency conflict, its
events naming the trace of the request it runs for."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any, Concatenate, ParamSpec, TypeVar

from jobnik.domain.base import REQUEST_TRACE
from jobnik.domain.errors import ConcurrencyConflict


def utcnow() -> datetime:
    return datetime.now(UTC)


P = ParamSpec("P")
T = TypeVar("T")
# How often a command runs again after a ConcurrencyConflict before the caller sees it (409).
CONFLICT_ATTEMPTS = 25
_RUNNING: ContextVar[bool] = ContextVar("jobnik_command_running", default=False)
_retried = [0]  # process-wide count of runs again after a conflict (bench, metrics)
_retried_lock = threading.Lock()


def conflicts_retried() -> int:
    """How many times commands of this process ran again after a ConcurrencyConflict."""
    return _retried[0]


def running() -> bool:
    """Whether this context is inside a command (a command called now joins its transaction)."""
    return _RUNNING.get()


def run_retrying(call: Callable[[], T]) -> T:
    """`call()`, run again on ConcurrencyConflict (a read went stale before the writer lock,
    or the database broke a deadlock). Only the outermost caller retries: a command running
    inside another's transaction lets the conflict reach it, as that transaction is void."""
    if _RUNNING.get():
        return call()
    token = _RUNNING.set(True)
    try:
        for attempt in range(1, CONFLICT_ATTEMPTS + 1):
            try:
                return call()
            except ConcurrencyConflict:
                if attempt == CONFLICT_ATTEMPTS:
                    raise
                with _retried_lock:
                    _retried[0] += 1
        raise AssertionError("unreachable")
    finally:
        _RUNNING.reset(token)


def command(method: Callable[Concatenate[Any, P], T]) -> Callable[Concatenate[Any, P], T]:
    """A command method: one transaction, run again from the start on ConcurrencyConflict. Its
    events, the cascades' included, carry the trace id of its principal (`by`), or else of the
    command it runs inside."""

    @functools.wraps(method)
    def run(self: Any, *args: P.args, **kwargs: P.kwargs) -> T:
        token = REQUEST_TRACE.set(
            getattr(kwargs.get("by"), "trace_id", None) or REQUEST_TRACE.get()
        )
        try:
            return run_retrying(lambda: method(self, *args, **kwargs))
        finally:
            REQUEST_TRACE.reset(token)

    return run  # type: ignore[return-value]
