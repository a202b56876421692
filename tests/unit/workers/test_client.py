from __future__ import annotations

import json
import re
import select
import socket
import threading
import warnings
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from jobnik.workers import ApiError, Consumer, JobnikClient, Producer, TransportError, Worker
from jobnik.workers.client import encode
from jobnik.workers.errors import UnsendableBody
from jobnik.workers.models import ChildJob

from .fake_api import BASE_URL


class Fake:
    """A transport that answers every request with `answer`, or raises it; keeps the calls."""

    def __init__(self, answer: tuple[int, Any] | Exception) -> None:
        self.answer = answer
        self.calls: list[tuple[str, str, Any]] = []

    def __call__(self, method: str, path: str, body: bytes | None) -> tuple[int, bytes]:
        self.calls.append((method, path, json.loads(body) if body else None))
        if isinstance(self.answer, Exception):
            raise self.answer
        status, content = self.answer
        return status, json.dumps(content).encode()

    def close(self) -> None:
        pass


def _client(answer: tuple[int, Any] | Exception, retries: int = 0) -> tuple[JobnikClient, Fake]:
    fake = Fake(answer)
    return JobnikClient(BASE_URL, transport=fake, retries=retries), fake


def test_building_a_client_raises_no_deprecation_warning() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")

        JobnikClient(BASE_URL).close()

    assert [str(w.message) for w in caught] == []


def test_a_request_sends_its_body_as_json_and_its_params_in_the_query() -> None:
    client, fake = _client((200, {"ok": True}))

    answer = client.patch("/v1/stages/tiles/tasks/dequeue", {"a": 1}, params={"lease_seconds": 9})

    assert answer == {"ok": True}
    assert fake.calls == [("PATCH", "/v1/stages/tiles/tasks/dequeue?lease_seconds=9", {"a": 1})]


def test_an_error_answer_raises_api_error_with_its_status_code_and_message() -> None:
    client, _ = _client((409, {"code": "STALE_ATTEMPT", "message": "old"}))

    with pytest.raises(ApiError) as raised:
        client.put("/v1/tasks/t/status", {"status": "COMPLETED"})

    assert (raised.value.status, raised.value.code, raised.value.message) == (
        409,
        "STALE_ATTEMPT",
        "old",
    )


def test_a_404_is_none_when_the_caller_allows_it() -> None:
    client, _ = _client((404, {"code": "TASK_NOT_FOUND", "message": "none"}))

    body = client.patch("/v1/stages/tiles/tasks/dequeue", ok_404=True)

    assert body is None


@pytest.mark.parametrize("method", ["POST", "PATCH", "PUT"])
def test_a_write_whose_answer_was_lost_is_not_sent_again(method: str) -> None:
    client, fake = _client(TransportError("lost", sent=True), retries=2)

    with pytest.raises(TransportError):
        client.request(method, "/v1/stages/tiles/tasks/dequeue")

    assert [c[0] for c in fake.calls] == [method]


def test_a_write_that_never_reached_the_server_is_retried() -> None:
    client, fake = _client(TransportError("refused", sent=False), retries=2)

    with pytest.raises(TransportError):
        client.request("PATCH", "/v1/stages/tiles/tasks/dequeue")

    assert [c[0] for c in fake.calls] == ["PATCH"] * 3


def test_a_read_is_retried_on_any_transport_fault() -> None:
    client, fake = _client(TransportError("slow", sent=True), retries=2)

    with pytest.raises(TransportError):
        client.get("/v1/jobs")

    assert [c[0] for c in fake.calls] == ["GET"] * 3


def test_a_read_is_retried_on_a_503_and_a_write_is_not() -> None:
    client, fake = _client((503, {"code": "UNAVAILABLE", "message": "later"}), retries=2)

    with pytest.raises(ApiError) as read:
        client.get("/v1/jobs")
    with pytest.raises(ApiError) as write:
        client.post("/v1/jobs", {})

    assert (read.value.status, write.value.status) == (503, 503)
    assert [c[0] for c in fake.calls] == ["GET"] * 3 + ["POST"]


def test_a_request_is_observed_as_retried_only_when_it_was() -> None:
    answers: list[tuple[int, Any] | Exception] = [
        (200, {"n": 1}),
        TransportError("refused", sent=False),
        (200, {"n": 2}),
        TransportError("lost", sent=True),
        (200, {"n": 3}),
    ]
    fake = Fake((200, None))
    observed: list[tuple[str, str, bool]] = []

    def send(method: str, path: str, body: bytes | None) -> tuple[int, bytes]:
        fake.answer = answers.pop(0)
        return fake(method, path, body)

    client = JobnikClient(BASE_URL, transport=send, retries=2)  # type: ignore[arg-type]
    client.observe = lambda method, status, retried, _: observed.append((method, status, retried))

    first, second = client.put("/v1/tasks/status", []), client.put("/v1/tasks/status", [])
    with pytest.raises(TransportError):
        client.put("/v1/tasks/status", [])

    assert (first, second) == ({"n": 1}, {"n": 2})
    assert observed == [("PUT", "200", False), ("PUT", "200", True), ("PUT", "error", False)]
    assert len(fake.calls) == 4
    assert answers == [(200, {"n": 3})]


# -- the default transport (http.client, pooled) over real sockets ------------------------------


@pytest.fixture
def server() -> Iterator[Callable[..., str]]:
    """Serve with a handler function on a free local port; its base URL (with a path prefix).
    `keep_alive`: answer in HTTP/1.1, keeping connections open between requests."""
    servers: list[ThreadingHTTPServer] = []

    def serve(handle: Callable[[BaseHTTPRequestHandler], None], keep_alive: bool = False) -> str:
        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1" if keep_alive else "HTTP/1.0"

            def do_any(self) -> None:
                handle(self)

            do_GET = do_PATCH = do_PUT = do_POST = do_any

            def log_message(self, *_: Any) -> None:
                pass

        s = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        s.daemon_threads = True
        servers.append(s)
        threading.Thread(target=s.serve_forever, daemon=True).start()
        return f"http://127.0.0.1:{s.server_address[1]}/api"

    yield serve
    for s in servers:
        s.shutdown()
        s.server_close()


def _answer(request: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
    answer = json.dumps(body).encode()
    request.send_response(200)
    request.send_header("Content-Type", "application/json")
    request.send_header("Content-Length", str(len(answer)))
    request.end_headers()
    request.wfile.write(answer)


def _echo(request: BaseHTTPRequestHandler) -> None:
    length = int(request.headers.get("Content-Length") or 0)
    sent = json.loads(request.rfile.read(length)) if length else None
    _answer(
        request, {"path": request.path, "body": sent, "type": request.headers.get("Content-Type")}
    )


def test_the_default_transport_sends_json_under_the_base_urls_path(server: Any) -> None:
    with JobnikClient(server(_echo)) as client:
        answers = [client.put("/v1/tasks/t/status", {"status": "COMPLETED"}) for _ in range(3)]
        bodiless = client.post("/v1/jobs/j/finish", None)

    assert (
        answers
        == [
            {
                "path": "/api/v1/tasks/t/status",
                "body": {"status": "COMPLETED"},
                "type": "application/json",
            }
        ]
        * 3
    )
    assert bodiless == {"path": "/api/v1/jobs/j/finish", "body": None, "type": None}


def test_a_refused_connection_is_a_write_that_never_left() -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    client = JobnikClient(f"http://127.0.0.1:{port}", retries=1)

    with pytest.raises(TransportError) as raised:
        client.put("/v1/tasks/t/status", {"status": "COMPLETED"})

    assert raised.value.sent is False


def test_an_answer_that_never_came_is_a_write_that_may_have_been_acted_on(server: Any) -> None:
    seen: list[str] = []

    def hang_up(request: BaseHTTPRequestHandler) -> None:
        seen.append(request.path)
        request.close_connection = True  # read the request, answer nothing

    client = JobnikClient(server(hang_up), retries=2)

    with pytest.raises(TransportError) as raised:
        client.put("/v1/tasks/t/status", {"status": "COMPLETED"})

    assert raised.value.sent is True
    assert seen == ["/api/v1/tasks/t/status"]  # not sent again


def test_a_read_that_timed_out_is_retried(server: Any) -> None:
    seen: list[str] = []
    release = threading.Event()

    def too_slow(request: BaseHTTPRequestHandler) -> None:
        seen.append(request.path)
        release.wait(5)

    client = JobnikClient(server(too_slow), timeout=0.2, retries=1)
    try:
        with pytest.raises(TransportError) as raised:
            client.get("/v1/jobs")
    finally:
        release.set()

    assert raised.value.sent is True
    assert seen == ["/api/v1/jobs", "/api/v1/jobs"]


def _connections(handle: Callable[[BaseHTTPRequestHandler], None]) -> tuple[Any, list[int]]:
    """`handle`, noting each request's client port (one port per connection)."""
    ports: list[int] = []

    def noted(request: BaseHTTPRequestHandler) -> None:
        ports.append(request.client_address[1])
        handle(request)

    return noted, ports


def test_requests_share_a_kept_alive_connection(server: Any) -> None:
    handle, ports = _connections(_echo)
    with JobnikClient(server(handle, keep_alive=True)) as client:
        for _ in range(5):
            client.put("/v1/tasks/t/status", {"status": "COMPLETED"})

    assert len(ports) == 5
    assert len(set(ports)) == 1


@pytest.mark.parametrize("poll", [True, False], ids=["poll", "select (no poll: Windows)"])
def test_an_idle_connection_the_server_closed_is_not_sent_on(
    server: Any, poll: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not poll:
        monkeypatch.delattr(select, "poll")

    def answer_then_hang_up(request: BaseHTTPRequestHandler) -> None:
        _echo(request)  # a keep-alive answer (HTTP/1.1, no "Connection: close") ...
        request.close_connection = True  # ... and then the server closes the connection

    handle, ports = _connections(answer_then_hang_up)
    with JobnikClient(server(handle, keep_alive=True), retries=0) as client:
        first = client.put("/v1/tasks/t/status", {"status": "COMPLETED"})
        for _ in range(50):  # until the server's close has reached this side
            if client.transport._idle and _closed(client.transport._idle[-1]):
                break
            threading.Event().wait(0.01)
        second = client.put("/v1/tasks/t/status", {"status": "COMPLETED"})  # no retry allowed

    assert first == second
    assert len(set(ports)) == 2  # a new connection, not a failed send on the closed one


def _closed(conn: Any) -> bool:
    from jobnik.workers.client import _readable

    return conn.sock is not None and _readable(conn.sock)


def test_characters_a_request_target_cannot_hold_are_percent_encoded(server: Any) -> None:
    with JobnikClient(server(_echo)) as client:
        spaced = client.get("/v1/jobs/a b/é")
        encoded = client.get("/v1/stages/a%2Fb/tasks?x=1&y=2")

    assert spaced["path"] == "/api/v1/jobs/a%20b/%C3%A9"
    assert encoded["path"] == "/api/v1/stages/a%2Fb/tasks?x=1&y=2"  # already encoded: as is


def test_a_base_url_without_a_port_gets_the_schemes_port() -> None:
    from jobnik.workers.client import HttpTransport

    ipv6, https = HttpTransport("http://[::1]/api"), HttpTransport("https://example.org")

    assert (ipv6.host, ipv6.port, ipv6.prefix) == ("::1", 80, "/api")
    assert (https.host, https.port, https.https) == ("example.org", 443, True)


def test_connections_are_not_kept_once_the_client_is_closed(server: Any) -> None:
    client = JobnikClient(server(_echo, keep_alive=True))
    client.get("/v1/jobs")
    client.close()
    client.get("/v1/jobs")  # still answers, on a connection of its own

    assert client.transport._idle == []  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "body",
    [
        {"id": "t", "attempt": 1, "result": {"n": [1, 2.5, None, True], "s": "é"}},
        {"edge": [2**63 - 1, -(2**63)], "digits": "1234567890123456789012"},
        {"backslash": "\\u0000 is six characters here"},
    ],
)
def test_a_sendable_body_encodes_as_json_whichever_way_it_is_checked(body: Any) -> None:
    assert encode(body) == json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()


@pytest.mark.parametrize(
    ("body", "why"),
    [
        ({"a": [1, {"b": 2**63}]}, "body/a/1/b is an integer beyond 64 bits"),
        ({"a": -(2**63) - 1}, "body/a is an integer beyond 64 bits"),
        ({"a": ["x\x00"]}, "body/a/0 contains a NUL character"),
        ({"a\x00": 1}, "body (a key) contains a NUL character"),
        ({"a": float("-inf")}, "body/a is -inf"),
        ({"a": "\ud800"}, "lone surrogate"),
        ({"a": {1, 2}}, "the body is not JSON"),
    ],
)
def test_an_unsendable_body_is_refused_naming_where(body: Any, why: str) -> None:
    with pytest.raises(UnsendableBody, match=re.escape(why)):
        encode(body)


def _authorization(request: BaseHTTPRequestHandler) -> None:
    _answer(request, {"path": request.path, "authorization": request.headers.get("Authorization")})


def test_producer_consumer_and_worker_find_their_server_and_token_in_the_environment(
    server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JOBNIK_API_URL", server(_authorization))
    monkeypatch.setenv("JOBNIK_TOKEN", "tiler.s3cret")

    clients = [Producer().client, Consumer().client, Worker("tiles", print).consumer.client]

    for client in clients:
        with client:
            assert client.get("/v1/jobs") == {
                "path": "/api/v1/jobs",
                "authorization": "Bearer tiler.s3cret",
            }


def test_a_url_and_token_given_win_over_the_environment(
    server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JOBNIK_API_URL", "http://127.0.0.1:1/elsewhere")
    monkeypatch.setenv("JOBNIK_TOKEN", "tiler.s3cret")
    given = server(_authorization)

    with Producer(given, token="ops.other").client as client:
        seen = client.get("/v1/jobs")
    with Producer(given).client as client:  # the URL given, the token from the environment
        half = client.get("/v1/jobs")

    assert seen == {"path": "/api/v1/jobs", "authorization": "Bearer ops.other"}
    assert half == {"path": "/api/v1/jobs", "authorization": "Bearer tiler.s3cret"}


def test_without_url_or_environment_a_client_calls_the_local_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("JOBNIK_API_URL", raising=False)
    monkeypatch.delenv("JOBNIK_TOKEN", raising=False)

    assert Producer().client.base_url == "http://127.0.0.1:8080"


def test_a_child_job_says_whether_it_has_more_results_than_it_lists() -> None:
    body = {"id": "c1", "name": "leaf-job", "status": "COMPLETED", "results": []}

    assert ChildJob.from_json({**body, "moreResults": True}).more_results is True
    assert ChildJob.from_json(body).more_results is False  # (a server that does not say)
