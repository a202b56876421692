"""Arbitrary JSON through every creating endpoint: refused with a 4xx and nothing written, or
accepted and then readable by every read (the job, the four lists, the history, the event feed,
the job's stream)."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobnik.api.main import app_from_env

from .conftest import Api

DEPTH = 64  # the default JOBNIK_MAX_JSON_DEPTH
HOSTILE_TEXT = ["\x00", "a\x00b", "\udc00", "x\ud800", "caf\u00e9", "\U0001f600", "x" * 100_000]
KEYS = st.text(max_size=6) | st.sampled_from(["\x00", "k\udc00", "\u00e9"])
LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.just(10**400),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(HOSTILE_TEXT),
)
VALUES = st.recursive(
    LEAVES,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=3),
    max_leaves=12,
)


def nest(value: Any, levels: int) -> Any:
    for i in range(levels):
        value = {"n": value} if i % 2 else [value]
    return value


NESTED = st.builds(nest, VALUES, st.integers(min_value=0, max_value=300))
PAYLOADS = st.dictionaries(KEYS, VALUES | NESTED, max_size=3)


def clean(value: Any) -> bool:
    """What the server must accept: finite numbers, 64-bit integers, text without NUL or lone
    surrogates (depth is checked apart)."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, float) and not math.isfinite(v):
            return False
        if isinstance(v, int) and not isinstance(v, bool) and not -(2**63) <= v < 2**63:
            return False
        if isinstance(v, str) and ("\x00" in v or any(0xD800 <= ord(c) <= 0xDFFF for c in v)):
            return False
        if isinstance(v, dict):
            stack.extend(v.keys())
            stack.extend(v.values())
        if isinstance(v, list):
            stack.extend(v)
    return True


def depth(value: Any) -> int:
    deepest, stack = 0, [(value, 0)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, dict | list):
            deepest = max(deepest, d + 1)
            stack.extend((c, d + 1) for c in (v.values() if isinstance(v, dict) else v))
    return deepest


@pytest.fixture
def fuzzed(database_url: str) -> Iterator[Api]:
    env = {"JOBNIK_DATABASE_URL": database_url, "JOBNIK_SWEEP_INTERVAL": "0"}
    with TestClient(app_from_env(env)) as http:
        yield Api(http)


def send(api: Api, method: str, url: str, body: Any, *, free_form: bool = True) -> Any:
    """`body` as Python's json writes it (NaN, Infinity, lone surrogates escaped); asserts a
    refusal is a 4xx that wrote nothing and an acceptance only what the input gate allows. A
    free-form payload the gate allows must be accepted (other fields have their own limits)."""
    raw = json.dumps(body).encode()
    before = (api.position, totals(api))
    r = api.http.request(method, url, content=raw, headers={"content-type": "application/json"})
    allowed = clean(body) and depth(body) <= DEPTH and len(raw) <= 1024 * 1024
    if r.status_code >= 300:
        assert 400 <= r.status_code < 500, r.text
        assert set(r.json()) == {"message", "code"}
        assert (api.position, totals(api)) == before, "a refused write changed something"
        assert not (allowed and free_form), (r.text, url)
        return None
    assert allowed, f"{url} accepted what the server must refuse"
    return r.json()


def totals(api: Api) -> tuple[int, ...]:
    return tuple(
        api.http.get(url).json()["total"] for url in ("/v1/jobs", "/v1/stages", "/v1/tasks")
    )


def read_everything(api: Api, job_id: str) -> None:
    job = api.http.get(f"/v1/jobs/{job_id}", params={"should_return_stages": True})
    assert job.status_code == 200, job.text
    for stage in job.json()["stages"]:
        tasks = api.http.get(f"/v1/stages/{stage['id']}/tasks", params={"page_size": 100})
        assert tasks.status_code == 200, tasks.text
    for url in ("/v1/jobs", "/v1/stages", "/v1/tasks"):
        listed = api.http.get(
            url,
            params={"page_size": 100, "should_return_stages": True}
            if url == "/v1/jobs"
            else {"page_size": 100},
        )
        assert listed.status_code == 200, listed.text
    history = api.http.get(f"/v1/jobs/{job_id}/history", params={"limit": 1000})
    assert history.status_code == 200, history.text
    first = history.json()["items"][0]["position"]
    assert api.http.get("/v1/events", params={"after": first - 1}).status_code == 200
    api.http.put(f"/v1/jobs/{job_id}/status", json={"status": "ABORTED"})  # ends the stream
    with api.http.stream("GET", f"/v1/jobs/{job_id}/stream") as stream:
        lines = re.split("\r\n|\r|\n", stream.read().decode())  # SSE's line ends only
    data = [json.loads(line[5:]) for line in lines if line.startswith("data:")]
    assert data, lines
    assert data[-1]["type"] in ("JobAborted", "JobCompleted", "JobFailed")


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    job=PAYLOADS,
    metadata=PAYLOADS,
    stage=PAYLOADS,
    task=PAYLOADS,
    result=PAYLOADS,
    reason=st.sampled_from(HOSTILE_TEXT) | st.text(max_size=20),
    line=st.sampled_from(HOSTILE_TEXT) | st.text(max_size=20),
)
def test_any_json_is_refused_cleanly_or_readable_everywhere(
    fuzzed: Api,
    job: Any,
    metadata: Any,
    stage: Any,
    task: Any,
    result: Any,
    reason: str,
    line: str,
) -> None:
    api = fuzzed
    base = api.create_job(data={"base": True})
    created = send(api, "POST", "/v1/jobs", {"name": "fuzz", "data": job, "userMetadata": metadata})
    send(api, "PATCH", f"/v1/jobs/{base['id']}/user-metadata", metadata)
    kind = api.new_type()
    added = send(api, "POST", f"/v1/jobs/{base['id']}/stage", {"type": kind, "data": stage})
    if added is None:
        added = api.add_stage(base["id"], type=kind)
    send(api, "PATCH", f"/v1/stages/{added['id']}/user-metadata", metadata)
    tasks = send(api, "POST", f"/v1/stages/{added['id']}/tasks", [{"data": task}, {"data": {}}])
    if tasks is None:
        tasks = api.add_tasks(added["id"], count=2)
    send(api, "PATCH", f"/v1/tasks/{tasks[0]['id']}/user-metadata", metadata)
    first, second = api.dequeue(kind), api.dequeue(kind)
    send(api, "POST", f"/v1/tasks/{first['id']}/logs", {"lines": [line]}, free_form=False)
    send(api, "PUT", f"/v1/tasks/{first['id']}/status", {"status": "COMPLETED", "result": result})
    failed = {"status": "FAILED", "reason": reason}
    send(api, "PUT", f"/v1/tasks/{second['id']}/status", failed, free_form=False)

    read_everything(api, base["id"])
    if created is not None:
        read_everything(api, created["id"])
