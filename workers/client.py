"""The HTTP client under Producer, Consumer and Worker: JSON over keep-alive HTTP, with retries.

The standard library's `http.client` under a small pool of our own, rather than urllib3 or
httpx: a worker spends most of its own CPU on its two requests per task, and per request
`http.client` costs about half of urllib3 here (whose pool, retries and response wrapper sit on
top of the same `http.client`), and httpx about twice urllib3.
"""

from __future__ import annotations

import http.client
import json
import math
import os
import re
import select
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Final, Protocol
from urllib.parse import quote, urlencode, urlsplit

from tenacity import (
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential,
    wait_random,
)

from jobnik.workers import tracing
from jobnik.workers.errors import ApiError, InvalidUrl, TransportError, UnsendableBody

TRANSIENT_STATUS: Final = frozenset({502, 503, 504})
# Where a client finds its server and token when it is not given them (as `jobnik worker run`).
API_URL_VARIABLE: Final = "JOBNIK_API_URL"
TOKEN_VARIABLE: Final = "JOBNIK_TOKEN"
DEFAULT_API_URL: Final = "http://127.0.0.1:8080"
IDEMPOTENT: Final = frozenset({"GET", "HEAD", "OPTIONS", "DELETE"})
HEADERS: Final = {"Accept": "application/json", "User-Agent": "jobnik-sdk"}
BODY_HEADERS: Final = {**HEADERS, "Content-Type": "application/json"}
TARGET_SAFE: Final = "/?#[]@!$&'()*+,;=:%~"  # RFC 3986's reserved characters, and "%"


class Transport(Protocol):
    """Sends one request and returns its status and body, or raises `TransportError`.

    `path` starts with "/" and carries the query string; `body` is JSON, or None for none."""

    def __call__(self, method: str, path: str, body: bytes | None) -> tuple[int, bytes]: ...

    def close(self) -> None: ...


class HttpTransport:
    """A thread-safe pool of keep-alive connections to one server (`pool_size` kept open).

    A thread takes an idle connection (or opens one), sends, reads the whole answer and puts the
    connection back. An idle connection the server has closed meanwhile (uvicorn closes them
    after 5 s) is dropped before use, not sent on.

    Connection failures raise `TransportError(sent=False)`: the request never left. Any other
    failure (a timeout waiting for the answer, a dropped connection) is `sent=True`: the server
    may have acted on it. Nothing is retried here (`JobnikClient` decides). `token`: sent as
    `Authorization: Bearer` on every request (never logged)."""

    def __init__(
        self,
        base_url: str,
        *,
        timeout: float = 30.0,
        pool_size: int = 10,
        token: str | None = None,
    ) -> None:
        try:
            url = urlsplit(base_url)
            port = url.port
        except ValueError as e:  # a bracket left open, a port that is not a number
            raise InvalidUrl(f"{base_url!r} does not parse: {e}") from None
        if url.scheme not in ("http", "https") or not url.hostname:
            raise InvalidUrl(f"not an http(s) URL: {base_url!r}")
        self.prefix = url.path.rstrip("/")
        self.https = url.scheme == "https"
        # (a port always: http.client reads a bare IPv6 host's last group as one)
        self.host, self.port = url.hostname, port or (443 if self.https else 80)
        self.timeout, self.pool_size = timeout, pool_size
        auth = {"Authorization": f"Bearer {token}"} if token else {}
        self._headers, self._body_headers = {**HEADERS, **auth}, {**BODY_HEADERS, **auth}
        self._idle: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()
        self._closed = False

    def _open(self) -> http.client.HTTPConnection:
        cls = http.client.HTTPSConnection if self.https else http.client.HTTPConnection
        conn = cls(self.host, self.port, timeout=self.timeout)
        try:
            conn.connect()
        except OSError as exc:  # refused, unreachable, unresolvable, timed out, TLS
            conn.close()
            raise TransportError(f"connect to {self.host}:{self.port}: {exc}", sent=False) from exc
        return conn

    def _take(self) -> http.client.HTTPConnection:
        while True:
            with self._lock:
                conn = self._idle.pop() if self._idle else None
            if conn is None:
                return self._open()
            if conn.sock is not None and not _readable(conn.sock):
                return conn
            conn.close()  # closed by the server (EOF waiting), or a stray byte: either way, gone

    def _give_back(self, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            if not self._closed and len(self._idle) < self.pool_size:
                self._idle.append(conn)
                return
        conn.close()

    def __call__(self, method: str, path: str, body: bytes | None) -> tuple[int, bytes]:
        headers = self._headers if body is None else self._body_headers
        if not tracing.in_trace():
            return self._send(method, path, body, headers)
        headers = dict(headers)  # + traceparent, under a client span
        with tracing.client_span(method, self.host, self.port, headers) as span:
            status, content = self._send(method, path, body, headers)
            tracing.finish_client_span(span, status)
            return status, content

    def _send(
        self, method: str, path: str, body: bytes | None, headers: Mapping[str, str]
    ) -> tuple[int, bytes]:
        # Characters a request target cannot hold (spaces, non-ASCII) percent-encoded, as
        # urllib3 did; what is already encoded stays as it is.
        target = quote(self.prefix + path, safe=TARGET_SAFE)
        conn = self._take()
        try:
            conn.request(method, target, body, headers)
            answer = conn.getresponse()
            content = answer.read()
        except (OSError, http.client.HTTPException) as exc:
            conn.close()
            raise TransportError(f"{method} {path}: {exc!r}", sent=True) from exc
        except BaseException:
            conn.close()  # (half a request on it: never reused)
            raise
        if answer.will_close:
            conn.close()
        else:
            self._give_back(conn)
        return answer.status, content

    def close(self) -> None:
        """Close the idle connections, and those in use as their requests end."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()


def _readable(sock: Any) -> bool:
    """Whether an idle connection's socket has something to read: an idle keep-alive
    connection has nothing to read unless the server closed it. (poll where there is one: select
    cannot watch a descriptor past 1023; Windows has select only.)"""
    if not hasattr(select, "poll"):
        return bool(select.select([sock], [], [], 0)[0])
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    return bool(poller.poll(0))


class _Transient(Exception):
    def __init__(self, status: int, body: bytes) -> None:
        super().__init__(f"HTTP {status}")
        self.status, self.body = status, body


def _retry_safe(idempotent: bool) -> Any:
    """Reads retry any transport fault or 502/503/504; writes (a dequeue, a report) only when
    the request surely never reached the server, so a lost answer is not acted on twice."""

    def decide(exc: BaseException) -> bool:
        if idempotent:
            return isinstance(exc, _Transient | TransportError)
        return isinstance(exc, TransportError) and not exc.sent

    return retry_if_exception(decide)


def _replaying(
    fault: BaseException, send: Callable[[str, str, bytes | None], tuple[int, bytes]]
) -> Callable[[str, str, bytes | None], tuple[int, bytes]]:
    """`send`, whose first call raises `fault` (an attempt already made) instead."""
    pending = [fault]

    def attempt(method: str, path: str, body: bytes | None) -> tuple[int, bytes]:
        if pending:
            raise pending.pop()
        return send(method, path, body)

    return attempt


class JobnikClient:
    """JSON over HTTP to a jobnik (or Jobnik) API. Thread-safe: one client serves many threads.

    Connection errors and 502/503/504 are retried (`retries` times, exponential backoff with
    jitter); any other error status raises `ApiError` with the body's `code` and `message`, and a
    request that got no answer raises `TransportError`. `pool_size`: connections kept open (one
    per thread that calls at once). `token`: the bearer token a server with access control
    wants (`jobnik tokens create`). Without `base_url` or `token`, the environment's
    JOBNIK_API_URL (else http://127.0.0.1:8080) and JOBNIK_TOKEN are used, as by `jobnik worker
    run` (`env`: another mapping to read them from). `transport`: another way to send (tests
    fake the server with one). `observe(method, status_code, retried, seconds)`, when set, is
    told of every request once it ended (status_code "error" when no answer came)."""

    def __init__(
        self,
        base_url: str | None = None,
        *,
        timeout: float = 30.0,
        retries: int = 3,
        pool_size: int = 10,
        token: str | None = None,
        transport: Transport | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        env = os.environ if env is None else env
        base_url = base_url or env.get(API_URL_VARIABLE) or DEFAULT_API_URL
        token = token or env.get(TOKEN_VARIABLE) or None
        self.base_url = base_url.rstrip("/")
        self.transport: Transport = transport or HttpTransport(
            self.base_url, timeout=timeout, pool_size=pool_size, token=token
        )
        self.retries = retries
        self.observe: Callable[[str, str, bool, float], None] | None = None
        self._retrying = {  # by whether the method is idempotent: a read's policy, a write's
            idempotent: Retrying(
                retry=_retry_safe(idempotent),
                stop=stop_after_attempt(retries + 1),
                wait=wait_exponential(multiplier=0.1, max=2.0) + wait_random(0, 0.1),
                reraise=True,
            )
            for idempotent in (True, False)
        }

    def close(self) -> None:
        self.transport.close()

    def __enter__(self) -> JobnikClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _send_once(self, method: str, path: str, body: bytes | None) -> tuple[int, bytes]:
        status, content = self.transport(method, path, body)
        if status in TRANSIENT_STATUS:
            raise _Transient(status, content)
        return status, content

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        params: Mapping[str, Any] | None = None,
        ok_404: bool = False,
    ) -> Any:
        """Send `body` (JSON; None sends none) and decode the answer: `None` for 204 (and for
        404 when `ok_404`)."""
        if params:
            path = f"{path}?{urlencode(params)}"
        data = None if body is None else encode(body)
        # (a Retrying keeps its state per thread: one serves every thread)
        policy = self._retrying[method in IDEMPOTENT]
        started, status, fault = time.perf_counter(), 0, None
        try:
            # The first attempt outside the policy, whose bookkeeping costs about as much CPU
            # as the request itself; a fault is the policy's first attempt, and the policy
            # goes on from there as it would have.
            try:
                status, content = self._send_once(method, path, data)
            except (_Transient, TransportError) as exc:
                fault = exc
            if fault is not None:
                status, content = policy(_replaying(fault, self._send_once), method, path, data)
        except _Transient as t:
            status, content = t.status, t.body
        finally:
            if self.observe is not None:
                retried = fault is not None and policy.statistics.get("attempt_number", 1) > 1
                seconds = time.perf_counter() - started
                self.observe(method, str(status) if status else "error", retried, seconds)
        if status == 204 or (ok_404 and status == 404):
            return None
        if status >= 400:
            try:
                answer = json.loads(content)
                code, message = answer.get("code", "UNKNOWN_ERROR"), answer.get("message", "")
            except (ValueError, AttributeError):
                code, message = "UNKNOWN_ERROR", content.decode("utf-8", "replace")
            raise ApiError(status, code, message)
        return json.loads(content) if content else None

    def get(self, path: str, **kwargs: Any) -> Any:
        return self.request("GET", path, **kwargs)

    def post(self, path: str, body: Any, **kwargs: Any) -> Any:
        return self.request("POST", path, body, **kwargs)

    def put(self, path: str, body: Any, **kwargs: Any) -> Any:
        return self.request("PUT", path, body, **kwargs)

    def patch(self, path: str, body: Any = None, **kwargs: Any) -> Any:
        return self.request("PATCH", path, body, **kwargs)


# In encoded JSON, what may be a value the server refuses: an escaped NUL, or an integer of 19
# digits or more (past 64 bits, or close to it). Text without either needs no walk of the body.
_NUL: Final = "\\u0000"
_LONG_NUMBER: Final = re.compile(r"[0-9](?=[0-9]{18})")


def encode(body: Any) -> bytes:
    """`body` as the JSON the server takes, or UnsendableBody naming what it would refuse.
    Encoded at once; only a body whose encoding fails, or may hold a refused value, is walked
    for the error's place."""
    try:
        text = json.dumps(body, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
        if _NUL not in text and _LONG_NUMBER.search(text) is None:
            return text.encode()
    except (TypeError, ValueError):  # (a lone surrogate's UnicodeEncodeError among them)
        pass  # the walk names the fault
    return _walked(body)


def _walked(body: Any) -> bytes:
    """`encode`, walking the body for a value the server would refuse before encoding it."""
    stack: list[tuple[Any, str]] = [(body, "body")]
    while stack:
        value, where = stack.pop()
        if isinstance(value, str):
            if "\x00" in value:
                raise UnsendableBody(f"{where} contains a NUL character")
        elif isinstance(value, float):
            if not math.isfinite(value):
                raise UnsendableBody(f"{where} is {value}: JSON numbers must be finite")
        elif isinstance(value, int) and not isinstance(value, bool):
            if not -(2**63) <= value < 2**63:
                raise UnsendableBody(f"{where} is an integer beyond 64 bits")
        elif isinstance(value, Mapping):
            stack.extend((v, f"{where}/{k}") for k, v in value.items())
            stack.extend((k, f"{where} (a key)") for k in value)
        elif isinstance(value, list | tuple):
            stack.extend((v, f"{where}/{i}") for i, v in enumerate(value))
    try:
        return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()
    except UnicodeEncodeError:
        raise UnsendableBody("a string in the body holds a lone surrogate") from None
    except (TypeError, ValueError) as e:
        raise UnsendableBody(f"the body is not JSON: {e}") from None


def client_of(client: JobnikClient | str | None, token: str | None) -> JobnikClient:
    """`client` itself, or a client to the URL `client` (by default JOBNIK_API_URL) with
    `token` (by default JOBNIK_TOKEN): what Producer and Consumer take."""
    return client if isinstance(client, JobnikClient) else JobnikClient(client, token=token)
