"""The HTTP client under Producer, Consumer and Worker: httpx, with retries on transient faults."""

from __future__ import annotations

import logging
from typing import Any

import httpx
from tenacity import (
    retry,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential,
    wait_random,
)

from jobnik.workers.errors import ApiError

log = logging.getLogger(__name__)

TRANSIENT_STATUS = frozenset({502, 503, 504})


class _Transient(Exception):
    def __init__(self, response: httpx.Response) -> None:
        super().__init__(f"HTTP {response.status_code}")
        self.response = response


IDEMPOTENT = frozenset({"GET", "HEAD", "OPTIONS", "DELETE"})
NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)


def _retry_safe(method: str) -> Any:
    """Reads retry any transport fault or 502/503/504; writes (a dequeue, a report) only when
    the request surely never reached the server, so a lost answer is not acted on twice."""

    def decide(exc: BaseException) -> bool:
        if method in IDEMPOTENT:
            return isinstance(exc, _Transient | httpx.TransportError)
        return isinstance(exc, NOT_SENT)

    return retry_if_exception(decide)


class JobnikClient:
    """JSON over HTTP to a jobnik (or Jobnik) API. Thread-safe: one client serves many threads.

    Connection errors and 502/503/504 are retried (`retries` times, exponential backoff with
    jitter); any other error status raises `ApiError` with the body's `code` and `message`.
    """

    def __init__(
        self,
        base_url: str,
        *,
        timeout: float = 30.0,
        retries: int = 3,
        http: httpx.Client | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.http = http or httpx.Client(base_url=self.base_url, timeout=timeout)
        self.retries = retries

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> JobnikClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _send_once(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        response = self.http.request(method, path, **kwargs)
        if response.status_code in TRANSIENT_STATUS:
            raise _Transient(response)
        return response

    def request(self, method: str, path: str, *, ok_404: bool = False, **kwargs: Any) -> Any:
        """Send and decode; `None` for 204 (and for 404 when `ok_404`)."""
        send = retry(
            retry=_retry_safe(method),
            stop=stop_after_attempt(self.retries + 1),
            wait=wait_exponential(multiplier=0.1, max=2.0) + wait_random(0, 0.1),
            reraise=True,
        )(self._send_once)
        try:
            response = send(method, path, **kwargs)
        except _Transient as t:
            response = t.response
        if response.status_code == 204 or (ok_404 and response.status_code == 404):
            return None
        if response.status_code >= 400:
            try:
                body = response.json()
                code, message = body.get("code", "UNKNOWN_ERROR"), body.get("message", "")
            except ValueError:
                code, message = "UNKNOWN_ERROR", response.text
            raise ApiError(response.status_code, code, message)
        return response.json() if response.content else None

    def get(self, path: str, **kwargs: Any) -> Any:
        return self.request("GET", path, **kwargs)

    def post(self, path: str, body: Any, **kwargs: Any) -> Any:
        return self.request("POST", path, json=body, **kwargs)

    def put(self, path: str, body: Any, **kwargs: Any) -> Any:
        return self.request("PUT", path, json=body, **kwargs)

    def patch(self, path: str, body: Any = None, **kwargs: Any) -> Any:
        return self.request("PATCH", path, json=body, **kwargs)
