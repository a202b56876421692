"""`jobnik serve` bounds what a request may take to arrive: headers and bodies that trickle in
are answered 408 and their connection closed, headers too large or too many 431; requests
within the limits are served as before, several on one kept-alive connection."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from .test_observability import jobnik_serve

LIMITS = {"JOBNIK_HEADER_TIMEOUT": "1", "JOBNIK_BODY_TIMEOUT": "1", "JOBNIK_AUTH": "off"}
TRICKLE = 0.25  # seconds between two pieces of a trickling request
PATIENCE = 8.0  # seconds a test waits for the server to close a connection


@pytest.fixture
def server(database_url: str, tmp_path: Path) -> Iterator[str]:
    """`jobnik serve` with one-second timeouts: one process on SQLite, two on PostgreSQL."""
    workers = 1 if database_url.startswith("sqlite") else 2
    with jobnik_serve(database_url, workers, tmp_path, LIMITS) as (url, _, _):
        yield url


def connect(url: str) -> socket.socket:
    parts = urlsplit(url)
    sock = socket.create_connection((parts.hostname, parts.port), timeout=PATIENCE)
    return sock


def closed_after(sock: socket.socket, pieces: Iterator[bytes]) -> tuple[float, bytes]:
    """Sends `pieces` one every TRICKLE seconds until the server closes the connection: how
    long that took and all it answered."""
    start, answer = time.monotonic(), b""
    sock.setblocking(False)
    while time.monotonic() - start < PATIENCE:
        try:
            chunk = sock.recv(65536)
        except BlockingIOError:
            try:
                sock.send(next(pieces))
            except (BrokenPipeError, ConnectionResetError):
                break
            time.sleep(TRICKLE)
            continue
        except ConnectionResetError:
            break
        if not chunk:
            break
        answer += chunk
    return time.monotonic() - start, answer


def trickle(first: bytes, then: bytes) -> Iterator[bytes]:
    yield first
    while True:
        yield then


def error_of(answer: bytes) -> tuple[int, dict[str, Any]]:
    head, _, body = answer.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    assert b"connection: close" in head.lower()
    return status, json.loads(body)


def test_headers_that_trickle_in_are_answered_408_and_the_connection_closed(server: str) -> None:
    with connect(server) as sock:
        took, answer = closed_after(
            sock, trickle(b"GET /liveness HTTP/1.1\r\nHost: jobnik\r\n", b"X-Slow: 1\r\n")
        )

    assert took < 1 + PATIENCE / 2
    assert error_of(answer) == (
        408,
        {
            "message": "the request's headers did not arrive within 1 s",
            "code": "REQUEST_TIMEOUT",
        },
    )


def test_a_connection_that_sends_nothing_is_closed(server: str) -> None:
    with connect(server) as sock:
        took, answer = closed_after(sock, iter(lambda: b"", None))

    assert took < 1 + PATIENCE / 2
    assert error_of(answer)[0] == 408


def test_a_body_that_trickles_in_is_answered_408_writes_nothing_and_is_closed(
    server: str,
) -> None:
    head = (
        b"POST /v1/jobs HTTP/1.1\r\nHost: jobnik\r\nContent-Type: application/json\r\n"
        b"Content-Length: 200\r\n\r\n" + b'{"name": "slow", "data": {"pad": "'
    )
    with connect(server) as sock:
        took, answer = closed_after(sock, trickle(head, b"x"))

    assert took < 1 + PATIENCE / 2
    assert error_of(answer) == (
        408,
        {"message": "the request's body did not arrive within 1 s", "code": "REQUEST_TIMEOUT"},
    )
    assert httpx.get(f"{server}/v1/jobs", timeout=10).json()["total"] == 0


@pytest.mark.parametrize(
    ("headers", "message"),
    [
        ({"X-Big": "x" * 20_000}, "the request's headers exceed 16384 bytes"),
        ({"X-Big": "x" * 500_000}, "the request's headers exceed 16384 bytes"),
        ({f"X-Many-{i}": "1" for i in range(150)}, "more than 100 header fields"),
        ({f"X-Many-{i}": "1" for i in range(5000)}, "more than 100 header fields"),
    ],
    ids=["20-kb", "500-kb", "150-fields", "5000-fields"],
)
def test_headers_too_large_or_too_many_are_answered_431_and_closed(
    server: str, headers: dict[str, str], message: str
) -> None:
    request = b"GET /liveness HTTP/1.1\r\nHost: jobnik\r\n"
    request += b"".join(f"{k}: {v}\r\n".encode() for k, v in headers.items()) + b"\r\n"

    with connect(server) as sock:
        sock.sendall(request)
        took, answer = closed_after(sock, iter(lambda: b"", None))

    assert took < PATIENCE / 2
    assert error_of(answer) == (431, {"message": message, "code": "HEADERS_TOO_LARGE"})


def test_requests_within_the_limits_are_served_on_one_kept_alive_connection(
    server: str,
) -> None:
    near_limits = {f"X-Field-{i}": "v" * 140 for i in range(90)}  # 90 fields, 14 KB
    with httpx.Client(base_url=server, timeout=10) as http:
        first = http.post("/v1/jobs", json={"name": "kept", "data": {"pad": "x" * 50_000}})
        time.sleep(1.5)  # (longer than either timeout, between two requests)
        second = http.get("/liveness", headers=near_limits)
        third = http.get(f"/v1/jobs/{first.json()['id']}")

    assert (first.status_code, second.status_code, third.status_code) == (201, 200, 200)
    assert third.json()["data"] == {"pad": "x" * 50_000}
