"""What `jobnik serve` prepares around uvicorn: the directory several server processes keep
their metrics in, and the HTTP protocol that bounds what a request may take to arrive."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from http import HTTPStatus
from pathlib import Path
from typing import Any, cast

from starlette.responses import Response
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from jobnik.api.errors import response_for
from jobnik.api.settings import Settings
from jobnik.domain.errors import HeadersTooLarge, JobnikError, RequestTimeout


@contextlib.contextmanager
def metrics_directory(workers: int, given: str | None) -> Iterator[str | None]:
    """The PROMETHEUS_MULTIPROC_DIR of a run with `workers` processes: `given` (the operator's,
    emptied of an earlier run's files first, kept afterwards), else for several processes a
    fresh temporary directory, removed when the run ends, else None (one process keeps its
    metrics in memory)."""
    if given:
        directory = Path(given)
        directory.mkdir(parents=True, exist_ok=True)
        for stale in directory.glob("*.db"):  # counts of a previous run would add to ours
            stale.unlink()
        yield str(directory)
        return
    if workers <= 1:
        yield None
        return
    made = tempfile.mkdtemp(prefix="jobnik-metrics-")
    try:
        yield made
    finally:
        shutil.rmtree(made, ignore_errors=True)


@dataclass(frozen=True)
class HttpLimits:
    """What a request may take before its body is the application's: its request line and
    headers arrive within `header_timeout` seconds (from its connection, or from its first byte
    on a kept-alive one) and hold at most `max_header_bytes` bytes and `max_headers` fields; its
    body arrives within `body_timeout` seconds of its headers."""

    header_timeout: float
    body_timeout: float
    max_header_bytes: int
    max_headers: int

    @classmethod
    def of(cls, settings: Settings) -> HttpLimits:
        return cls(
            settings.header_timeout,
            settings.body_timeout,
            settings.max_header_bytes,
            settings.max_headers,
        )

    def protocol(self) -> type[asyncio.Protocol]:
        """uvicorn's `http` option: LimitedHttp under these limits. (uvicorn calls it as it calls
        a protocol class; it pickles, for the processes of `--workers N`.)"""
        return cast(type[asyncio.Protocol], functools.partial(LimitedHttp, limits=self))


class LimitedHttp(HttpToolsProtocol):
    """uvicorn's httptools protocol under HttpLimits: headers too large or too many are
    answered 431 HEADERS_TOO_LARGE, and headers or a body that do not arrive in time 408
    REQUEST_TIMEOUT (once no response has started), and the connection is closed; no
    application runs for the request. Excess header fields are never kept, and header bytes
    are counted as they arrive (a chunk at most past the limit)."""

    def __init__(self, *args: Any, limits: HttpLimits, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.limits = limits
        # One timer a connection, re-armed only when it fires before the deadline of the phase
        # the connection is in: no timer made and cancelled for each request.
        self._timer: asyncio.TimerHandle | None = None
        self._deadline: float | None = None
        self._in_headers, self._refused = True, False
        self._received = self._counted = self._fields = 0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._due_in(self.limits.header_timeout)  # (the first request's headers)

    def connection_lost(self, exc: Exception | None) -> None:
        self._deadline = None
        if self._timer is not None:
            self._timer.cancel()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        within = self._in_headers
        super().data_received(data)
        if within and self._in_headers and not self._refused:  # (all of it header bytes)
            self._received += len(data)
            self._check_size(self._received)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._in_headers, self._received, self._counted, self._fields = True, 0, 0, 0
        if self._deadline is None:  # (a kept-alive connection's next request: from now)
            self._due_in(self.limits.header_timeout)

    def on_url(self, url: bytes) -> None:
        if self._refused:
            return
        self._counted += len(url)
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        if self._refused:
            return
        self._fields += 1
        self._counted += len(name) + len(value) + 4  # ": " and CRLF
        if self._fields > self.limits.max_headers:
            self._refuse(HeadersTooLarge(f"more than {self.limits.max_headers} header fields"))
        elif not self._check_size(self._counted):
            super().on_header(name, value)

    def on_headers_complete(self) -> None:
        if self._refused:
            return
        self._in_headers = False
        self._due_in(self.limits.body_timeout)  # (cleared at once when there is no body)
        super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        if not self._refused:
            super().on_body(body)

    def on_message_complete(self) -> None:
        if self._refused:
            return
        self._deadline = None
        super().on_message_complete()

    def _check_size(self, size: int) -> bool:
        """Refuses the request once its headers hold more than the limit; whether it did."""
        if size > self.limits.max_header_bytes:
            self._refuse(
                HeadersTooLarge(
                    f"the request's headers exceed {self.limits.max_header_bytes} bytes"
                )
            )
        return self._refused

    def _due_in(self, seconds: float) -> None:
        self._deadline = self.loop.time() + seconds
        if self._timer is None:
            self._timer = self.loop.call_later(seconds, self._tick)

    def _tick(self) -> None:
        self._timer = None
        if self._deadline is None:  # (the request arrived whole meanwhile)
            return
        left = self._deadline - self.loop.time()
        if left > 0:
            self._timer = self.loop.call_later(left, self._tick)
            return
        what = "headers" if self._in_headers else "body"
        seconds = self.limits.header_timeout if self._in_headers else self.limits.body_timeout
        self._refuse(RequestTimeout(f"the request's {what} did not arrive within {seconds:g} s"))

    def _refuse(self, error: JobnikError) -> None:
        """Answers `error` (unless another answer is on its way) and closes the connection."""
        self._refused, self._deadline = True, None
        self.logger.warning(
            "%s: %s; connection closed", _peer(self.client), error.message,
            extra={"action": "request_refused", "code": error.code},
        )  # fmt: skip
        if self.transport.is_closing():
            return
        # (before the headers end, the cycle is the previous request's, whose answer may still
        # be on its way; after, this request's, which the application may have answered)
        cycle = self.cycle
        if cycle is None or (
            cycle.response_complete if self._in_headers else not cycle.response_started
        ):
            self.transport.write(_raw(response_for(error)))
        self.transport.close()


def _peer(client: tuple[str, int] | None) -> str:
    return f"{client[0]}:{client[1]}" if client else "a client"


def _raw(response: Response) -> bytes:
    """`response` as HTTP/1.1 bytes, with `Connection: close`."""
    status = f"HTTP/1.1 {response.status_code} {HTTPStatus(response.status_code).phrase}\r\n"
    lines = [status.encode()]
    lines += [name + b": " + value + b"\r\n" for name, value in response.raw_headers]
    return b"".join([*lines, b"connection: close\r\n\r\n", bytes(response.body)])
