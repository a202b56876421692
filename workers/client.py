"""The HTTP client under Producer, Consumer and Worker: JSON over urllib3, with retries.

urllib3 rather than httpx: a worker spends most of its own CPU on its two requests per task,
and urllib3's pool costs about half of httpx's per request here (README, Performance).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final, Protocol
from urllib.parse import urlencode, urlsplit

import urllib3
from tenacity import (
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential,
    wait_random,
)
from urllib3.exceptions import ConnectTimeoutError, EmptyPoolError, NewConnectionError

from jobnik.workers.errors import ApiError, TransportError

TRANSIENT_STATUS: Final = frozenset({502, 503, 504})
IDEMPOTENT: Final = frozenset({"GET", "HEAD", "OPTIONS", "DELETE"})
HEADERS: Final = {"Accept": "application/json", "User-Agent": "jobnik-sdk"}


class Transport(Protocol):
    """Sends one request and returns its status and body, or raises `TransportError`.

    `path` starts with "/" and carries the query string; `body` is JSON, or None for none."""

    def __call__(self, method: str, path: str, body: bytes | None) -> tuple[int, bytes]: ...

    def close(self) -> None: ...


class Urllib3Transport:
    """A thread-safe pool of keep-alive connections to one server (`pool_size` kept open).

    Connection failures raise `TransportError(sent=False)`: the request never left. Any other
    failure (a timeout waiting for the answer, a dropped connection) is `sent=True`: the server
    may have acted on it."""

    def __init__(self, base_url: str, *, timeout: float = 30.0, pool_size: int = 10) -> None:
        self.prefix = urlsplit(base_url).path.rstrip("/")
        self.pool = urllib3.connection_from_url(
            base_url,
            maxsize=pool_size,
            timeout=urllib3.Timeout(connect=timeout, read=timeout),
            retries=False,
            headers=HEADERS,
        )
        # (headers given to a request replace the pool's, so a body's are the whole set)
        self.body_headers = {**HEADERS, "Content-Type": "application/json"}

    def __call__(self, method: str, path: str, body: bytes | None) -> tuple[int, bytes]:
        try:
            answer = self.pool.urlopen(
                method,
                self.prefix + path,
                body=body,
                headers=None if body is None else self.body_headers,
                retries=False,
                redirect=False,
            )
        except (NewConnectionError, ConnectTimeoutError, EmptyPoolError) as exc:
            raise TransportError(f"{method} {path}: {exc}", sent=False) from exc
        except urllib3.exceptions.HTTPError as exc:
            raise TransportError(f"{method} {path}: {exc}", sent=True) from exc
        return answer.status, answer.data

    def close(self) -> None:
        self.pool.close()


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


class JobnikClient:
    """JSON over HTTP to a jobnik (or Jobnik) API. Thread-safe: one client serves many threads.

    Connection errors and 502/503/504 are retried (`retries` times, exponential backoff with
    jitter); any other error status raises `ApiError` with the body's `code` and `message`, and a
    request that got no answer raises `TransportError`. `pool_size`: connections kept open (one
    per thread that calls at once). `transport`: another way to send (tests fake the server
    with one)."""

    def __init__(
        self,
        base_url: str,
        *,
        timeout: float = 30.0,
        retries: int = 3,
        pool_size: int = 10,
        transport: Transport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.transport: Transport = transport or Urllib3Transport(
            self.base_url, timeout=timeout, pool_size=pool_size
        )
        self.retries = retries
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
        data = None if body is None else json.dumps(body, separators=(",", ":")).encode()
        # (a Retrying keeps its state per thread: one serves every thread)
        policy = self._retrying[method in IDEMPOTENT]
        try:
            status, content = policy(self._send_once, method, path, data)
        except _Transient as t:
            status, content = t.status, t.body
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
