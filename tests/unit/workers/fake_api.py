"""An in-memory stand-in for the jobnik API, as the SDK's transport (no sockets, no server).

It serves just what the worker runtime calls: dequeue (from a queue the test fills), the stage and
job a TaskContext fetches, status reports, heartbeats, hand-backs and log lines. Every request is
kept (`requests`) so a test can assert what went over the wire and when.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from jobnik.workers import JobnikClient

BASE_URL = "http://jobnik.test"
STAGE_ID = "5f0c6a55-0000-4000-8000-000000000001"
JOB_ID = "5f0c6a55-0000-4000-8000-000000000002"


@dataclass(frozen=True)
class Seen:
    time: float
    method: str
    path: str
    params: dict[str, str]
    body: Any


def task_json(n: int, *, attempt: int = 1, data: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "id": f"00000000-0000-4000-8000-{n:012d}",
        "stageId": STAGE_ID,
        "status": "IN_PROGRESS",
        "data": data or {"n": n},
        "userMetadata": {},
        "attempts": attempt - 1,
        "maxAttempts": 3,
        "attempt": attempt,
        "leaseExpiresAt": "2030-01-01T00:00:00Z",
    }


Answer = tuple[int, Any]


def _error(status: int, code: str, message: str = "") -> Answer:
    return status, {"code": code, "message": message or code}


@dataclass
class FakeApi:
    queue: deque[dict[str, Any]] = field(default_factory=deque)
    requests: list[Seen] = field(default_factory=list)
    cancelled: bool = False
    heartbeat_status: int = 200
    refuse_reports_of: set[str] = field(default_factory=set)
    refuse_results: bool = False  # a COMPLETED report with a result: 400 as the input gate does
    failing_dequeues: int = 0
    # requests whose path ends with one of these are refused with this status (401 or 403)
    refused_paths: tuple[str, ...] = ()
    refused_status: int = 403
    # when set, a heartbeat is held (counted in `heartbeats_held`) until the gate opens
    heartbeat_gate: threading.Event | None = None
    heartbeats_held: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, *tasks: dict[str, Any]) -> None:
        with self.lock:
            self.queue.extend(tasks)

    def client(self) -> JobnikClient:
        return JobnikClient(BASE_URL, transport=self, retries=0)

    def close(self) -> None:
        pass

    def seen(self, method: str, suffix: str) -> list[Seen]:
        with self.lock:
            return [r for r in self.requests if r.method == method and r.path.endswith(suffix)]

    @property
    def dequeues(self) -> list[Seen]:
        return self.seen("PATCH", "/tasks/dequeue")

    @property
    def reports(self) -> list[Seen]:
        return self.seen("PUT", "/status")

    @property
    def heartbeats(self) -> list[Seen]:
        return self.seen("POST", "/heartbeat")

    @property
    def releases(self) -> list[Seen]:
        return self.seen("POST", "/release")

    def __call__(self, method: str, target: str, content: bytes | None) -> tuple[int, bytes]:
        """The SDK's `Transport`: one request in, its status and JSON body out."""
        url = urlsplit(target)
        path, params = unquote(url.path), dict(parse_qsl(url.query))
        body = json.loads(content) if content else None
        if self.heartbeat_gate is not None and path.endswith("/heartbeat"):
            with self.lock:
                self.heartbeats_held += 1
            self.heartbeat_gate.wait()
        with self.lock:
            self.requests.append(Seen(time.monotonic(), method, path, params, body))
            status, answer = self._answer(method, path, body)
        return status, json.dumps(answer).encode()

    def _answer(self, method: str, path: str, body: Any) -> Answer:
        parts = path.strip("/").split("/")
        if path.endswith(self.refused_paths or ("\0",)):
            code = "FORBIDDEN" if self.refused_status == 403 else "UNAUTHENTICATED"
            return _error(self.refused_status, code)
        if method == "PATCH" and path.endswith("/tasks/dequeue"):
            if self.failing_dequeues > 0:
                self.failing_dequeues -= 1
                return _error(500, "INTERNAL_SERVER_ERROR")
            if not self.queue:
                return _error(404, "TASK_NOT_FOUND")
            return (200, self.queue.popleft())
        if method == "GET" and parts[:2] == ["v1", "stages"]:
            return (
                200,
                {
                    "id": parts[2],
                    "jobId": JOB_ID,
                    "type": "tiles",
                    "order": 1,
                    "status": "IN_PROGRESS",
                    "data": {"resolution": "high"},
                    "userMetadata": {},
                    "summary": {},
                    "percentage": 0,
                },
            )
        if method == "GET" and parts[:2] == ["v1", "jobs"]:
            return (
                200,
                {
                    "id": parts[2],
                    "name": "create-map",
                    "status": "IN_PROGRESS",
                    "priority": "HIGH",
                    "data": {"mapId": "map-1"},
                    "userMetadata": {},
                    "percentage": 0,
                },
            )
        if method == "PUT" and parts[-1] == "status":
            if parts[2] in self.refuse_reports_of:
                return _error(409, "STALE_ATTEMPT", "attempt is no longer current")
            if self.refuse_results and "result" in body:
                return _error(400, "JSON_TOO_DEEP", "request/body nests deeper than 64 levels")
            return (200, {**task_json(0), "id": parts[2], "status": body["status"]})
        if method == "POST" and parts[-1] == "heartbeat":
            if self.heartbeat_status != 200:
                return _error(self.heartbeat_status, "STALE_ATTEMPT")
            return (
                200,
                {
                    "status": "IN_PROGRESS",
                    "attempt": body["attempt"],
                    "leaseExpiresAt": "2030-01-01T00:00:00Z",
                    "cancelled": self.cancelled,
                },
            )
        if method == "POST" and parts[-1] == "release":
            return (200, {**task_json(0), "id": parts[2], "status": "PENDING"})
        if method == "POST" and parts[-1] == "logs":
            return (201, {"appended": len(body["lines"])})
        return _error(404, "NOT_FOUND", f"{method} {path}")
