"""An OTLP/HTTP trace receiver for the tests: the spans real exporters send, kept in memory.

`receiving()` serves POST /v1/traces on a free loopback port and yields the `Received` spans, so a
test can point server and worker processes at it (OTEL_EXPORTER_OTLP_ENDPOINT) and read what
they exported, through the same exporter code a collector would see."""

from __future__ import annotations

import gzip
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


@dataclass(frozen=True)
class Span:
    service: str
    name: str
    trace_id: str
    span_id: str
    parent_id: str
    kind: int
    attributes: dict[str, Any]
    links: list[tuple[str, str]]
    status: int


def _value(v: Any) -> Any:
    return getattr(v, v.WhichOneof("value")) if v.WhichOneof("value") else None


@dataclass
class Received:
    spans: list[Span] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, body: bytes) -> None:
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        found = []
        for rs in request.resource_spans:
            resource = {a.key: _value(a.value) for a in rs.resource.attributes}
            for ss in rs.scope_spans:
                for s in ss.spans:
                    found.append(
                        Span(
                            service=str(resource.get("service.name")),
                            name=s.name,
                            trace_id=s.trace_id.hex(),
                            span_id=s.span_id.hex(),
                            parent_id=s.parent_span_id.hex(),
                            kind=s.kind,
                            attributes={a.key: _value(a.value) for a in s.attributes},
                            links=[(ln.trace_id.hex(), ln.span_id.hex()) for ln in s.links],
                            status=s.status.code,
                        )
                    )
        with self.lock:
            self.spans.extend(found)

    def all(self) -> list[Span]:
        with self.lock:
            return list(self.spans)

    def wait_for(self, ready: Callable[[list[Span]], bool], timeout: float = 30.0) -> list[Span]:
        deadline = time.monotonic() + timeout
        while not ready(spans := self.all()):
            if time.monotonic() > deadline:
                names = sorted({(s.service, s.name) for s in spans})
                raise AssertionError(f"spans not received within {timeout}s; got {names}")
            time.sleep(0.05)
        return spans


@contextmanager
def receiving() -> Iterator[tuple[str, Received]]:
    """(the endpoint URL for OTEL_EXPORTER_OTLP_ENDPOINT, the spans received so far)."""
    received = Received()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            if self.path == "/v1/traces":
                received.add(body)
            answer = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", received
    finally:
        server.shutdown()
        server.server_close()
