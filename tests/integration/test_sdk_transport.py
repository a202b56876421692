"""Jobnik's TypeScript SDK on the wire, replayed with httpx against a real jobnik server process.

The SDK (`MapColonies/jobnik-sdk`) cannot be installed here, so these tests send the HTTP requests
its code sends, byte for byte where it matters, and assert what its code relies on in the answers.
What the SDK does on the wire (read from its source; "sdk:" paths are in that repository):

* Transport (`sdk:src/api/index.ts` createApiClient, `sdk:src/network/httpClient.ts`): openapi-fetch
  over undici's fetch with a keep-alive `Agent` wrapped in a `RetryAgent`. The client's default
  headers carry `Content-Type: application/json`, so it goes out on EVERY request, GET, DELETE and
  the body-less dequeue PATCH included. undici's fetch adds `accept: */*`, `accept-language: *`,
  `sec-fetch-mode: cors`, `user-agent: node` ("undici" on older Node), `accept-encoding: gzip,
  deflate` and keeps the connection alive (undici's default keepAliveTimeout 4 s, below uvicorn's
  5 s). A body-less PATCH
  goes out with `content-length: 0` (undici writes it for methods that expect a payload); we also
  send it with no length at all, as the fetch spec alone would. Bodies are `JSON.stringify` output
  (compact). Path parameters are `encodeURIComponent`-encoded. The SDK itself sets no `traceparent`
  header; an application running OpenTelemetry's undici instrumentation adds `traceparent` /
  `tracestate` headers to every request.
* Answers (openapi-fetch + `sdk:src/errors/utils.ts` createAPIErrorFromResponse): a non-2xx answer
  becomes `error` = its parsed JSON body, and the SDK reads `error.message` and `error.code`. A
  non-2xx answer with an empty body (`Content-Length: 0`) comes back with `error === undefined`,
  which every `if (error !== undefined)` check in the clients takes as SUCCESS: so every error
  must carry a JSON body with `message` and `code`. 204 is read as "no data"; only the priority
  PATCH answers 204. The RetryAgent (3 retries by default) re-sends GET/PUT/DELETE on
  500/502/503/504 and on connection resets, never POST/PATCH.

Which SDK code each test mirrors:

* `test_wire_bytes_on_one_keep_alive_connection` — the transport above, with http.client so that
  every header is exactly as undici writes it (dequeue PATCH with and without `content-length: 0`,
  GET/DELETE with `Content-Type` and no body, the 204 of the priority PATCH) on ONE connection,
  idle 4.1 s in between like an undici socket kept in its pool.
* `test_producer_create_job_stage_tasks` — `sdk:src/clients/producer.ts` Producer.createJob (POST
  /v1/jobs with the caller's object; `priority` is only defaulted to MEDIUM in logs and span
  attributes, NOT in the body, so an omitted priority is omitted on the wire), createStage (GET
  /v1/jobs/{jobId} for the trace link, then POST /v1/jobs/{jobId}/stage with
  `{...stageData, startAsWaiting}`), createTasks (refuses [] client-side, GET /v1/stages/{stageId}
  and compares `type`, then POST /v1/stages/{stageId}/tasks with the caller's array — the copies it
  injected trace context into are never sent).
* `test_trace_context_from_body_and_headers` — `propagation.inject(context.active(), jobData)` in
  createJob (traceparent/tracestate body fields) and the OTel undici instrumentation's headers;
  `propagation.extract(..., task)` on every answer needs `traceparent` present.
* `test_consumer_dequeue_and_mark` — `sdk:src/clients/consumer.ts` Consumer.dequeueTask (PATCH
  /v1/stages/{stageType}/tasks/dequeue, no body; `response.status === 404` → null),
  markTaskCompleted/markTaskFailed (fetchTaskForUpdate: GET /v1/tasks/{taskId}; client-side
  refusal unless `status === "IN_PROGRESS"`; PUT /v1/tasks/{taskId}/status `{status}`).
* `test_dequeue_path_encoding` — openapi-fetch's `encodeURIComponent` of the `stageType` path
  parameter (spaces, non-ASCII, `/`).
* `test_worker_loop_runs_two_stage_job` — `sdk:src/clients/worker.ts` Worker: taskIterator
  (dequeue through a circuit breaker, back off while empty), runTask (fetchTaskParents: GET the
  task's stage then GET the stage's job; handler; success → markTask(COMPLETED) and failure →
  markTask(FAILED) with the DEQUEUED task object, i.e. no GET before the PUT),
  `context.updateTaskUserMetadata` (PATCH .../user-metadata with body `{userMetadata: metadata}`).
  The stored worker.ts predates the SDK's 0.3.0 "/v1" path change (its fetchTaskParents paths have
  no prefix); the emulation uses the /v1 paths that 0.3.0 applied to every client.
* `test_every_error_answer_has_a_json_body` — the `error !== undefined` checks everywhere, and
  createAPIErrorFromResponse reading `message` and `code`.

The server (`uvicorn jobnik.scripts.asgi:create --factory`) and its database live as long as this
module, one per backend: each test isolates itself with its own stage types and jobs, which saves
a server start per test.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit
from uuid import UUID, uuid4

import httpx
import psycopg
import pytest

BACKENDS = ["sqlite", "postgres"]
# a W3C trace context with no all-zero id: what the server makes when a request brings none
VALID_TRACE = re.compile(r"00-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-01")
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
OTHER_TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$")

# What undici's fetch + openapi-fetch put on every request (header names as undici writes them).
SDK_HEADERS = {
    "connection": "keep-alive",
    "content-type": "application/json",
    "accept": "*/*",
    "accept-language": "*",
    "sec-fetch-mode": "cors",
    "user-agent": "node",
    "accept-encoding": "gzip, deflate",
}
SUMMARY_KEYS = {"pending", "inProgress", "completed", "failed", "created", "retried", "total"}
TASK_KEYS = {
    "id",
    "stageId",
    "data",
    "userMetadata",
    "status",
    "attempts",
    "maxAttempts",
    "creationTime",
    "updateTime",
    "traceparent",
}
STAGE_KEYS = {
    "id",
    "jobId",
    "type",
    "order",
    "data",
    "userMetadata",
    "status",
    "summary",
    "percentage",
    "traceparent",
}
JOB_KEYS = {
    "id",
    "name",
    "data",
    "priority",
    "userMetadata",
    "status",
    "percentage",
    "creationTime",
    "updateTime",
    "traceparent",
}


# -- one server per backend for the whole module ------------------------------------------------


@pytest.fixture(scope="module", params=BACKENDS, ids=BACKENDS)
def database_url(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """A fresh database for this module (overrides the per-test fixture; same ids, same switch)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path_factory.mktemp('sdk') / 'jobnik.db'}"
        return
    server_url: str = request.getfixturevalue("pg_server_url")
    name = f"jobnik_sdk_{os.getpid()}_{secrets.token_hex(4)}"
    with psycopg.connect(server_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    parts = urlsplit(server_url)
    try:
        yield urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, parts.fragment))
    finally:
        with psycopg.connect(server_url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="module")
def base_url(database_url: str, spawn_module_server: Callable[..., Any]) -> str:
    url: str = spawn_module_server(database_url).url
    return url


@pytest.fixture
def sdk(base_url: str) -> Iterator[Sdk]:
    with Sdk(base_url) as client:
        yield client


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid4().hex[:8]}"


# -- the SDK's HTTP layer, emulated -------------------------------------------------------------


class ApiError(Exception):
    """What createAPIErrorFromResponse builds: the answer's status, `message` and `code`."""

    def __init__(self, response: httpx.Response) -> None:
        self.response = response
        self.status = response.status_code
        body = assert_error_body(response)
        self.message, self.code = body["message"], body["code"]
        super().__init__(f"{self.status} {self.code}: {self.message}")


class ClientSideRefusal(Exception):
    """An SDK check that fails before any request (e.g. TASK_INVALID_STATE_TRANSITION)."""


def assert_error_body(response: httpx.Response) -> dict[str, Any]:
    """Every non-2xx answer: a JSON object with string `message` and `code` (never empty)."""
    assert response.content, (
        f"{response.request.method} {response.request.url.path} → {response.status_code} with no "
        "body: openapi-fetch would return error=undefined and the SDK would take it as success"
    )
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert isinstance(body, dict), body
    for key in ("message", "code"):
        assert isinstance(body.get(key), str), body
        assert body[key], body
    return body


@dataclass
class Sdk:
    """An openapi-fetch client as the SDK builds it: one keep-alive pool, the SDK's headers.

    `calls` records (method, path) of every request, to assert the sequence a flow sends.
    """

    base_url: str
    extra_headers: dict[str, str] = field(default_factory=dict)
    calls: list[tuple[str, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.http = httpx.Client(
            base_url=self.base_url, headers={**SDK_HEADERS, **self.extra_headers}, timeout=30
        )

    def __enter__(self) -> Sdk:
        return self

    def __exit__(self, *exc: object) -> None:
        self.http.close()

    def send(self, method: str, path: str, body: Any = None) -> httpx.Response:
        """One request; `body` is sent as JSON.stringify would (compact), None sends none."""
        content = None if body is None else json.dumps(body, separators=(",", ":"))
        self.calls.append((method, path))
        return self.http.request(method, path, content=content)

    def ok(self, method: str, path: str, body: Any = None, status: int = 200) -> Any:
        """openapi-fetch's `data` — or the ApiError its callers build from `error`."""
        r = self.send(method, path, body)
        if r.status_code >= 400:
            raise ApiError(r)
        assert r.status_code == status, (r.status_code, r.text)
        assert r.headers["content-type"].startswith("application/json")
        return r.json()

    # producer.ts ------------------------------------------------------------------------------

    def create_job(self, job: dict[str, Any]) -> dict[str, Any]:
        return self.ok("POST", "/v1/jobs", job, 201)  # type: ignore[no-any-return]

    def create_stage(
        self, job_id: str, stage: dict[str, Any], as_waiting: bool = False
    ) -> dict[str, Any]:
        self.ok("GET", f"/v1/jobs/{job_id}")  # read for the span link, then the POST
        body = {**stage, "startAsWaiting": as_waiting}
        return self.ok("POST", f"/v1/jobs/{job_id}/stage", body, 201)  # type: ignore[no-any-return]

    def create_tasks(
        self, stage_id: str, stage_type: str, tasks: list[dict[str, Any]]
    ) -> list[dict[str, Any]]:
        if not tasks:
            raise ClientSideRefusal("EMPTY_TASK_DATA_ERROR")
        stage = self.ok("GET", f"/v1/stages/{stage_id}")
        if stage["type"] != stage_type:
            raise ClientSideRefusal("STAGE_TYPE_MISMATCH_ERROR")
        return self.ok("POST", f"/v1/stages/{stage_id}/tasks", tasks, 201)  # type: ignore[no-any-return]

    # consumer.ts ------------------------------------------------------------------------------

    def dequeue_task(self, stage_type: str) -> dict[str, Any] | None:
        r = self.send("PATCH", f"/v1/stages/{quote(stage_type, safe='')}/tasks/dequeue")
        if r.status_code == 404:
            assert_error_body(r)
            return None
        if r.status_code >= 400:
            raise ApiError(r)
        assert r.status_code == 200, (r.status_code, r.text)
        return r.json()  # type: ignore[no-any-return]

    def mark_task(
        self, status: str, *, task_id: str | None = None, task: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """Consumer.markTask: GET the task when given only its id, refuse unless IN_PROGRESS."""
        if task is None:
            task = self.ok("GET", f"/v1/tasks/{task_id}")
        assert task is not None
        if task["status"] != "IN_PROGRESS":
            raise ClientSideRefusal("TASK_INVALID_STATE_TRANSITION")
        return self.ok("PUT", f"/v1/tasks/{task['id']}/status", {"status": status})  # type: ignore[no-any-return]

    def mark_task_completed(self, task_id: str) -> dict[str, Any]:
        return self.mark_task("COMPLETED", task_id=task_id)

    def mark_task_failed(self, task_id: str) -> dict[str, Any]:
        return self.mark_task("FAILED", task_id=task_id)


def assert_shape(entity: dict[str, Any], keys: set[str]) -> None:
    """The fields the SDK's generated types require, with the types they declare."""
    missing = keys - entity.keys()
    assert not missing, f"missing {missing} in {entity}"
    for key in ("id", "stageId", "jobId"):
        if key in entity:
            UUID(entity[key])
    for key in ("creationTime", "updateTime", "startTime", "endTime"):
        if key in entity:
            assert ISO.match(entity[key]), (key, entity[key])
    assert isinstance(entity["data"], dict)
    assert isinstance(entity["userMetadata"], dict)
    assert re.fullmatch(r"[\da-f]{2}-[\da-f]{32}-[\da-f]{16}-[\da-f]{2}", entity["traceparent"])
    if "tracestate" in entity:
        assert isinstance(entity["tracestate"], str)  # absent, never null
    if "summary" in entity:
        assert entity["summary"].keys() >= SUMMARY_KEYS
        assert all(isinstance(v, int) for v in entity["summary"].values())


# -- the tests ----------------------------------------------------------------------------------


class RawConnection:
    """http.client on one socket, every header written by hand in undici's order and case."""

    def __init__(self, base_url: str) -> None:
        u = urlsplit(base_url)
        self.host = u.netloc
        self.conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
        self.conn.connect()
        self.sock = self.conn.sock

    def request(
        self, method: str, path: str, body: bytes | None = None, length: bool = True, **extra: str
    ) -> tuple[http.client.HTTPResponse, bytes]:
        self.conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
        self.conn.putheader("host", self.host)
        for name, value in {**SDK_HEADERS, **extra}.items():
            self.conn.putheader(name, value)
        if body is not None or length:
            self.conn.putheader("content-length", str(len(body or b"")))
        self.conn.endheaders(body)
        response = self.conn.getresponse()
        data = response.read()
        assert not response.will_close, "the server closed a keep-alive connection"
        assert self.conn.sock is self.sock, "the request did not reuse the connection"
        return response, data

    def close(self) -> None:
        self.conn.close()


def test_wire_bytes_on_one_keep_alive_connection(base_url: str, sdk: Sdk) -> None:
    stage_type = unique("wire")
    job = sdk.create_job({"name": "wire-job", "data": {}})
    stage = sdk.create_stage(job["id"], {"type": stage_type, "data": {}, "userMetadata": {}})
    sdk.create_tasks(stage["id"], stage_type, [{"data": {"n": 1}}, {"data": {"n": 2}}])

    raw = RawConnection(base_url)
    try:
        dequeue = f"/v1/stages/{stage_type}/tasks/dequeue"
        # the SDK's dequeue: PATCH, Content-Type json, content-length 0, no body
        r, data = raw.request("PATCH", dequeue)
        assert r.status == 200, data
        first = json.loads(data)
        assert first["status"] == "IN_PROGRESS"
        assert r.getheader("content-type") == "application/json"
        # the same without any length header (fetch spec behaviour): still a body-less PATCH
        r, data = raw.request("PATCH", dequeue, length=False)
        assert r.status == 200, data
        assert json.loads(data)["id"] != first["id"]
        r, data = raw.request("PATCH", dequeue)  # queue empty: 404 with a JSON body → null
        assert (r.status, json.loads(data)) == (
            404,
            {"message": "TASK_NOT_FOUND", "code": "TASK_NOT_FOUND"},
        )
        # GET and DELETE carry Content-Type too, with no body and no length
        r, data = raw.request("GET", f"/v1/tasks/{first['id']}", length=False)
        assert r.status == 200
        assert json.loads(data)["status"] == "IN_PROGRESS"
        r, data = raw.request("DELETE", f"/v1/jobs/{job['id']}", length=False)
        assert (r.status, json.loads(data)["code"]) == (400, "JOB_NOT_IN_FINITE_STATE")
        # the only body-less answer: 204 with the Reason header; the connection stays usable
        body = b'{"priority":"MEDIUM"}'
        r, data = raw.request("PATCH", f"/v1/jobs/{job['id']}/priority", body)
        assert (r.status, data, r.getheader("Reason")) == (
            204,
            b"",
            "PRIORITY_CANNOT_BE_UPDATED_TO_SAME_VALUE",
        )
        assert r.getheader("content-length") in (None, "0")
        # a socket left idle in undici's pool for up to its 4 s keepAliveTimeout is still open
        time.sleep(4.1)
        r, data = raw.request("PUT", f"/v1/tasks/{first['id']}/status", b'{"status":"COMPLETED"}')
        assert r.status == 200
        assert json.loads(data)["status"] == "COMPLETED"
        r, data = raw.request(
            "GET",
            f"/v1/jobs/{job['id']}",
            length=False,
            traceparent=TRACEPARENT,
            tracestate="vendor=x",
        )
        assert r.status == 200
        assert json.loads(data)["id"] == job["id"]
    finally:
        raw.close()


def test_producer_create_job_stage_tasks(sdk: Sdk) -> None:
    # createJob with no priority: the SDK sends none (MEDIUM only in its logs); jobnik → MEDIUM
    job = sdk.create_job(
        {"name": "producer-job", "data": {"url": "s3://x"}, "userMetadata": {"owner": "me"}}
    )
    assert_shape(job, JOB_KEYS)
    assert (job["status"], job["priority"], job["percentage"]) == ("PENDING", "MEDIUM", 0)
    assert (job["data"], job["userMetadata"]) == ({"url": "s3://x"}, {"owner": "me"})
    assert VALID_TRACE.fullmatch(job["traceparent"])  # made for the request: no trace came
    assert "tracestate" not in job
    assert "stages" not in job
    high = sdk.create_job({"name": "producer-job", "data": {}, "priority": "HIGH"})
    assert high["priority"] == "HIGH"

    first, second, third = unique("first"), unique("second"), unique("third")
    sdk.calls.clear()
    s1 = sdk.create_stage(job["id"], {"type": first, "data": {"w": 1}, "userMetadata": {"q": 2}})
    assert sdk.calls == [("GET", f"/v1/jobs/{job['id']}"), ("POST", f"/v1/jobs/{job['id']}/stage")]
    assert_shape(s1, STAGE_KEYS)
    assert (s1["jobId"], s1["type"], s1["order"], s1["status"], s1["percentage"]) == (
        job["id"],
        first,
        1,
        "PENDING",
        0,
    )
    assert all(s1["summary"][k] == 0 for k in SUMMARY_KEYS), s1["summary"]
    s2 = sdk.create_stage(job["id"], {"type": second, "data": {}})
    s3 = sdk.create_stage(job["id"], {"type": third, "data": {}}, as_waiting=True)
    assert [(s["order"], s["status"]) for s in (s2, s3)] == [(2, "CREATED"), (3, "WAITING")]

    sdk.calls.clear()
    tasks = sdk.create_tasks(
        s1["id"],
        first,
        [
            {"data": {"i": 0}},
            {"data": {"i": 1}, "userMetadata": {"b": 1}, "maxAttempts": 5},
        ],
    )
    assert sdk.calls == [
        ("GET", f"/v1/stages/{s1['id']}"),
        ("POST", f"/v1/stages/{s1['id']}/tasks"),
    ]
    for t in tasks:
        assert_shape(t, TASK_KEYS)
    assert [
        (t["stageId"], t["status"], t["attempts"], t["maxAttempts"], t["data"]) for t in tasks
    ] == [(s1["id"], "PENDING", 0, 3, {"i": 0}), (s1["id"], "PENDING", 0, 5, {"i": 1})]
    assert tasks[1]["userMetadata"] == {"b": 1}
    assert "startTime" not in tasks[0]
    # tasks may go into CREATED and WAITING stages too (the producer adds them before release)
    assert len(sdk.create_tasks(s2["id"], second, [{"data": {}}])) == 1
    assert len(sdk.create_tasks(s3["id"], third, [{"data": {}}])) == 1
    after = sdk.ok("GET", f"/v1/stages/{s1['id']}")["summary"]
    assert (after["pending"], after["total"]) == (2, 2)
    # the SDK's own refusals never reach the server
    with pytest.raises(ClientSideRefusal, match="EMPTY_TASK_DATA_ERROR"):
        sdk.create_tasks(s1["id"], first, [])
    with pytest.raises(ClientSideRefusal, match="STAGE_TYPE_MISMATCH_ERROR"):
        sdk.create_tasks(s1["id"], second, [{"data": {}}])


def test_trace_context_from_body_and_headers(base_url: str, sdk: Sdk) -> None:
    # createJob with OTel: propagation.inject writes traceparent/tracestate into the job body
    job = sdk.create_job(
        {"name": "traced", "data": {}, "traceparent": TRACEPARENT, "tracestate": "vendor=a"}
    )
    assert (job["traceparent"], job["tracestate"]) == (TRACEPARENT, "vendor=a")

    # OTel's undici instrumentation: headers on every request; bodies without trace fields
    headers = {"traceparent": OTHER_TRACEPARENT, "tracestate": "rojo=00f067aa0ba902b7"}
    with Sdk(base_url, extra_headers=headers) as traced:
        j2 = traced.create_job({"name": "traced-by-header", "data": {}})
        assert (j2["traceparent"], j2["tracestate"]) == (OTHER_TRACEPARENT, "rojo=00f067aa0ba902b7")
        stage_type = unique("traced")
        stage = traced.create_stage(j2["id"], {"type": stage_type, "data": {}})
        assert stage["traceparent"] == OTHER_TRACEPARENT
        tasks = traced.create_tasks(
            stage["id"], stage_type, [{"data": {}}, {"data": {}, "traceparent": TRACEPARENT}]
        )  # the body wins
        assert [t["traceparent"] for t in tasks] == [OTHER_TRACEPARENT, TRACEPARENT]
        task = traced.dequeue_task(stage_type)
        assert task is not None
        assert task["traceparent"] in (OTHER_TRACEPARENT, TRACEPARENT)

    # a malformed header is ignored, never a 400
    with Sdk(base_url, extra_headers={"traceparent": "garbage", "tracestate": "=,="}) as bad:
        j3 = bad.create_job({"name": "bad-trace-header", "data": {}})
        assert VALID_TRACE.fullmatch(j3["traceparent"])
        assert "tracestate" not in j3


def test_consumer_dequeue_and_mark(sdk: Sdk) -> None:
    stage_type = unique("consume")
    assert sdk.dequeue_task(stage_type) is None  # 404 → null
    job = sdk.create_job({"name": "consumer-job", "data": {}})
    stage = sdk.create_stage(job["id"], {"type": stage_type, "data": {}})
    created = sdk.create_tasks(
        stage["id"],
        stage_type,
        [{"data": {"n": 0}, "maxAttempts": 2}, {"data": {"n": 1}, "maxAttempts": 2}],
    )

    task = sdk.dequeue_task(stage_type)
    assert task is not None
    assert_shape(task, TASK_KEYS)
    assert task["id"] == created[0]["id"]  # FIFO among equal priorities
    assert (task["status"], task["attempts"]) == ("IN_PROGRESS", 0)
    assert "startTime" in task

    # markTaskCompleted: GET the task, check IN_PROGRESS client-side, PUT {status}
    sdk.calls.clear()
    done = sdk.mark_task_completed(task["id"])
    assert sdk.calls == [
        ("GET", f"/v1/tasks/{task['id']}"),
        ("PUT", f"/v1/tasks/{task['id']}/status"),
    ]
    assert_shape(done, TASK_KEYS)
    assert (done["id"], done["status"]) == (task["id"], "COMPLETED")
    assert "endTime" in done
    # a second markTaskCompleted stops in the SDK; the raw PUT is refused with a JSON error
    with pytest.raises(ClientSideRefusal):
        sdk.mark_task_completed(task["id"])
    with pytest.raises(ApiError) as refused:
        sdk.ok("PUT", f"/v1/tasks/{task['id']}/status", {"status": "COMPLETED"})
    assert (refused.value.status, refused.value.code) == (400, "ILLEGAL_TASK_STATUS_TRANSITION")

    # markTaskFailed with attempts left → RETRIED (the answer tells the worker), dequeued again
    other = sdk.dequeue_task(stage_type)
    assert other is not None
    assert other["id"] == created[1]["id"]
    retried = sdk.mark_task_failed(other["id"])
    assert (retried["status"], retried["attempts"]) == ("RETRIED", 1)
    again = sdk.dequeue_task(stage_type)
    assert again is not None
    assert (again["id"], again["attempts"]) == (other["id"], 1)
    failed = sdk.mark_task_failed(again["id"])
    assert (failed["status"], failed["attempts"]) == ("FAILED", 2)
    assert "endTime" in failed
    assert sdk.dequeue_task(stage_type) is None
    assert sdk.ok("GET", f"/v1/stages/{stage['id']}")["status"] == "FAILED"
    assert sdk.ok("GET", f"/v1/jobs/{job['id']}")["status"] == "FAILED"


@pytest.mark.parametrize(
    "label",
    [
        pytest.param("with space", id="space"),
        pytest.param("unicode-מפות", id="non-ascii"),
        pytest.param("geo/tiles", id="slash"),
    ],
)
def test_dequeue_path_encoding(sdk: Sdk, label: str) -> None:
    """openapi-fetch encodes path params with encodeURIComponent ('/' → %2F)."""
    stage_type = f"{label}-{uuid4().hex[:6]}"
    job = sdk.create_job({"name": "encoded", "data": {}})
    stage = sdk.create_stage(job["id"], {"type": stage_type, "data": {}})
    (task,) = sdk.create_tasks(stage["id"], stage_type, [{"data": {}}])
    got = sdk.dequeue_task(stage_type)
    assert got is not None
    assert got["id"] == task["id"]


def test_stage_summary_endpoint(sdk: Sdk) -> None:
    stage_type = unique("summary")
    job = sdk.create_job({"name": "summary-job", "data": {}})
    stage = sdk.create_stage(job["id"], {"type": stage_type, "data": {}})
    sdk.create_tasks(stage["id"], stage_type, [{"data": {}}, {"data": {}}])
    summary = sdk.ok("GET", f"/v1/stages/{stage['id']}/summary")
    assert summary == sdk.ok("GET", f"/v1/stages/{stage['id']}")["summary"]
    assert (summary["pending"], summary["total"]) == (2, 2)
    with pytest.raises(ApiError) as missing:
        sdk.ok("GET", f"/v1/stages/{uuid4()}/summary")
    assert (missing.value.status, missing.value.code) == (404, "STAGE_NOT_FOUND")


# -- worker.ts --------------------------------------------------------------------------------


@dataclass
class HandlerContext:
    """What runTask hands the task handler (the parts a handler reads or calls)."""

    job: dict[str, Any]
    stage: dict[str, Any]
    update_task_user_metadata: Callable[[dict[str, Any]], None]
    signal: threading.Event


Handler = Callable[[dict[str, Any], HandlerContext], None]


@dataclass
class Worker:
    """worker.ts's loop with concurrency 1, in a thread: dequeue → parents → handler → report.

    Empty polls back off exponentially (backoffOptions), as the SDK does; `stop()` ends the loop.
    """

    base_url: str
    stage_type: str
    handler: Handler
    events: list[tuple[str, str]] = field(default_factory=list)
    empty_polls: int = 0
    stopping: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None

    def run(self) -> None:
        delay = 0.01
        with Sdk(self.base_url) as sdk:
            try:
                while not self.stopping.is_set():
                    task = sdk.dequeue_task(self.stage_type)
                    if task is None:
                        self.empty_polls += 1
                        self.events.append(("queueEmpty", ""))
                        self.stopping.wait(delay)
                        delay = min(delay * 2, 0.2)
                        continue
                    delay = 0.01
                    self.run_task(sdk, task)
            except BaseException as e:  # noqa: BLE001 - handed to the test thread, re-raised there
                self.error = e

    def run_task(self, sdk: Sdk, task: dict[str, Any]) -> None:
        self.events.append(("taskStarted", task["id"]))
        try:
            stage, job = self.fetch_task_parents(sdk, task)
            context = HandlerContext(
                job=job,
                stage=stage,
                signal=self.stopping,
                update_task_user_metadata=lambda m: sdk.ok(
                    "PATCH", f"/v1/tasks/{task['id']}/user-metadata", {"userMetadata": m}
                ),
            )
            self.handler(task, context)
        except Exception:  # noqa: BLE001 - any handler failure is a FAILED report, as in the SDK
            sdk.mark_task("FAILED", task=task)  # the dequeued object: no GET before the PUT
            self.events.append(("taskFailed", task["id"]))
        else:
            sdk.mark_task("COMPLETED", task=task)
            self.events.append(("taskCompleted", task["id"]))

    @staticmethod
    def fetch_task_parents(sdk: Sdk, task: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        stage = sdk.ok("GET", f"/v1/stages/{task['stageId']}")
        job = sdk.ok("GET", f"/v1/jobs/{stage['jobId']}")
        return stage, job


def test_worker_loop_runs_two_stage_job(base_url: str, sdk: Sdk) -> None:
    extract, load = unique("extract"), unique("load")
    job = sdk.create_job({"name": "etl", "data": {"source": "a"}, "priority": "HIGH"})
    s1 = sdk.create_stage(job["id"], {"type": extract, "data": {}, "userMetadata": {}})
    s2 = sdk.create_stage(job["id"], {"type": load, "data": {}, "userMetadata": {}})
    assert (s1["status"], s2["status"]) == ("PENDING", "CREATED")
    extract_tasks = sdk.create_tasks(s1["id"], extract, [{"data": {"n": n}} for n in range(4)])
    load_tasks = sdk.create_tasks(s2["id"], load, [{"data": {"n": n}} for n in range(2)])
    seen: list[tuple[str, str, str]] = []

    def extract_handler(task: dict[str, Any], ctx: HandlerContext) -> None:
        assert ctx.stage["id"] == task["stageId"]
        assert ctx.job["id"] == ctx.stage["jobId"]
        seen.append((ctx.stage["type"], ctx.job["status"], task["id"]))
        if task["data"]["n"] == 2 and task["attempts"] == 0:
            raise RuntimeError("transient failure")  # → PUT FAILED → RETRIED, dequeued again

    def load_handler(task: dict[str, Any], ctx: HandlerContext) -> None:
        assert ctx.stage["type"] == load
        assert ctx.stage["status"] == "IN_PROGRESS"
        seen.append((ctx.stage["type"], ctx.job["status"], task["id"]))
        ctx.update_task_user_metadata({"loadedBy": "worker"})

    workers = [Worker(base_url, extract, extract_handler), Worker(base_url, load, load_handler)]
    threads = [threading.Thread(target=w.run, daemon=True) for w in workers]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            if sdk.ok("GET", f"/v1/jobs/{job['id']}")["status"] in ("COMPLETED", "FAILED"):
                break
            if any(w.error for w in workers):
                break
            time.sleep(0.05)
    finally:
        for w in workers:
            w.stopping.set()
        for t in threads:
            t.join(30)
    for w in workers:
        if w.error:
            raise w.error

    final = sdk.ok("GET", f"/v1/jobs/{job['id']}?should_return_stages=true")
    assert (final["status"], final["percentage"]) == ("COMPLETED", 100)
    assert [(s["type"], s["status"], s["percentage"]) for s in final["stages"]] == [
        (extract, "COMPLETED", 100),
        (load, "COMPLETED", 100),
    ]
    assert final["stages"][0]["summary"]["completed"] == final["stages"][0]["summary"]["total"] == 4
    assert final["stages"][1]["summary"]["completed"] == final["stages"][1]["summary"]["total"] == 2

    ex, lo = workers
    assert sorted(e for e in ex.events if e[0] == "taskFailed") == [
        ("taskFailed", extract_tasks[2]["id"])
    ]
    assert sorted(i for k, i in ex.events if k == "taskCompleted") == sorted(
        t["id"] for t in extract_tasks
    )
    assert sorted(i for k, i in lo.events if k == "taskCompleted") == sorted(
        t["id"] for t in load_tasks
    )
    assert lo.empty_polls > 0  # the load stage stayed invisible until extract completed
    retried = sdk.ok("GET", f"/v1/tasks/{extract_tasks[2]['id']}")
    assert (retried["status"], retried["attempts"]) == ("COMPLETED", 1)
    # the SDK wraps the handler's metadata in {userMetadata: …}; the server stores the body as is
    for t in load_tasks:
        assert sdk.ok("GET", f"/v1/tasks/{t['id']}")["userMetadata"] == {
            "userMetadata": {"loadedBy": "worker"}
        }
    # the handler saw its parents: the job IN_PROGRESS, each stage of its own type
    assert {(k, s) for k, s, _ in seen} == {(extract, "IN_PROGRESS"), (load, "IN_PROGRESS")}


# -- errors -----------------------------------------------------------------------------------


def test_every_error_answer_has_a_json_body(base_url: str, sdk: Sdk) -> None:
    stage_type = unique("errors")
    job = sdk.create_job({"name": "errors-job", "data": {}})
    s1 = sdk.create_stage(job["id"], {"type": stage_type, "data": {}})
    s2 = sdk.create_stage(job["id"], {"type": unique("second"), "data": {}})
    (task,) = sdk.create_tasks(s1["id"], stage_type, [{"data": {}}])
    done = sdk.create_job({"name": "finished", "data": {}})
    sdk.ok("PUT", f"/v1/jobs/{done['id']}/status", {"status": "ABORTED"})
    missing = str(uuid4())
    big = {"name": "big", "data": {"blob": "x" * (1024 * 1024 + 10)}}

    cases: list[tuple[str, str, Any, int, str | None]] = [
        ("GET", "/v1/jobs/not-a-uuid", None, 400, "VALIDATION_ERROR"),
        ("GET", f"/v1/jobs/{missing}", None, 404, "JOB_NOT_FOUND"),
        ("GET", f"/v1/stages/{missing}", None, 404, "STAGE_NOT_FOUND"),
        ("GET", f"/v1/tasks/{missing}", None, 404, "TASK_NOT_FOUND"),
        ("GET", "/v1/jobs?no_such_param=1", None, 400, "VALIDATION_ERROR"),
        ("GET", f"/v1/jobs/{job['id']}?should_return_stages=maybe", None, 400, "VALIDATION_ERROR"),
        ("GET", "/v1/no/such/route", None, 404, "ROUTE_NOT_FOUND"),
        ("POST", "/v1/jobs", {}, 400, "VALIDATION_ERROR"),
        ("POST", "/v1/jobs", [], 400, "VALIDATION_ERROR"),
        ("POST", "/v1/jobs", {"name": "x", "data": {}}, 400, "VALIDATION_ERROR"),
        (
            "POST",
            "/v1/jobs",
            {"name": "ok", "data": {}, "priority": "URGENT"},
            400,
            "VALIDATION_ERROR",
        ),
        ("POST", "/v1/jobs", {"name": "ok", "data": {}, "extra": 1}, 400, "VALIDATION_ERROR"),
        (
            "POST",
            "/v1/jobs",
            {"name": "ok", "data": {}, "traceparent": "nope"},
            400,
            "VALIDATION_ERROR",
        ),
        ("POST", "/v1/jobs", big, 413, None),
        (
            "POST",
            f"/v1/jobs/{missing}/stage",
            {"type": "t", "data": {}, "startAsWaiting": False},
            404,
            "JOB_NOT_FOUND",
        ),
        (
            "POST",
            f"/v1/jobs/{job['id']}/stage",
            {"type": "t", "data": {}, "bogus": 1},
            400,
            "VALIDATION_ERROR",
        ),
        ("POST", f"/v1/jobs/{job['id']}/stage", {"type": "", "data": {}}, 400, "VALIDATION_ERROR"),
        (
            "POST",
            f"/v1/jobs/{done['id']}/stage",
            {"type": "t", "data": {}, "startAsWaiting": False},
            400,
            "JOB_IN_FINITE_STATE",
        ),
        ("POST", f"/v1/stages/{s1['id']}/tasks", {"data": {}}, 400, "VALIDATION_ERROR"),
        ("POST", f"/v1/stages/{s1['id']}/tasks", [], 400, "VALIDATION_ERROR"),
        (
            "POST",
            f"/v1/stages/{s1['id']}/tasks",
            [{"data": {}, "traceparent": "x"}],
            400,
            "VALIDATION_ERROR",
        ),
        (
            "POST",
            f"/v1/stages/{s1['id']}/tasks",
            [{"data": {}, "maxAttempts": 0}],
            400,
            "VALIDATION_ERROR",
        ),
        ("POST", f"/v1/stages/{missing}/tasks", [{"data": {}}], 404, "STAGE_NOT_FOUND"),
        ("PATCH", f"/v1/stages/{'x' * 51}/tasks/dequeue", None, 400, "VALIDATION_ERROR"),
        (
            "PUT",
            f"/v1/tasks/{task['id']}/status",
            {"status": "COMPLETED"},
            400,
            "ILLEGAL_TASK_STATUS_TRANSITION",
        ),
        ("PUT", f"/v1/tasks/{task['id']}/status", {"status": "RETRIED"}, 400, "VALIDATION_ERROR"),
        ("PUT", f"/v1/tasks/{missing}/status", {"status": "FAILED"}, 404, "TASK_NOT_FOUND"),
        ("PUT", f"/v1/jobs/{job['id']}/status", {"status": "COMPLETED"}, 400, "VALIDATION_ERROR"),
        (
            "PUT",
            f"/v1/jobs/{done['id']}/status",
            {"status": "PENDING"},
            400,
            "ILLEGAL_JOB_STATUS_TRANSITION",
        ),
        (
            "PUT",
            f"/v1/stages/{s2['id']}/status",
            {"status": "PENDING"},
            400,
            "ILLEGAL_STAGE_STATUS_TRANSITION",
        ),
        ("PUT", f"/v1/stages/{s1['id']}/status", {"status": "WAITING"}, 400, "VALIDATION_ERROR"),
        ("PATCH", f"/v1/jobs/{missing}/priority", {"priority": "LOW"}, 404, "JOB_NOT_FOUND"),
        (
            "PATCH",
            f"/v1/jobs/{job['id']}/user-metadata",
            ["not", "an", "object"],
            400,
            "VALIDATION_ERROR",
        ),
        ("PATCH", f"/v1/tasks/{missing}/user-metadata", {"a": 1}, 404, "TASK_NOT_FOUND"),
        ("DELETE", f"/v1/jobs/{job['id']}", None, 400, "JOB_NOT_IN_FINITE_STATE"),
        ("DELETE", f"/v1/jobs/{missing}", None, 404, "JOB_NOT_FOUND"),
        ("DELETE", f"/v1/stages/{s1['id']}", None, 405, None),
    ]
    seen = []
    for method, path, body, status, code in cases:
        r = sdk.send(method, path, body)
        seen.append((method, path[:60], r.status_code, r.json().get("code") if r.content else None))
        assert r.status_code == status, (method, path[:80], r.status_code, r.text[:300])
        got = assert_error_body(r)
        if code is not None:
            assert got["code"] == code, (method, path[:80], got)

    # bodies that are not JSON at all, and a POST whose body is empty (Content-Length: 0)
    for content in (b"{", b"", b"null"):
        r = sdk.http.post("/v1/jobs", content=content)
        assert r.status_code == 400, (content, r.text)
        assert assert_error_body(r)["code"] == "VALIDATION_ERROR"
