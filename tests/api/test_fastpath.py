"""The worker's hot routes (api/fastpath.py) answer as FastAPI's handlers of the same routes do:
each request below is sent once through the fast path and once through the FastAPI handler it
falls back to, and the answers compare equal (status, body, content type, which headers)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest
from fastapi.routing import APIRoute

from jobnik.api.fastpath import SHAPES, FastRoute
from tests.api.conftest import TRACE, Api


def _fast_routes(api: Api) -> list[APIRoute]:
    routes = [r for r in api.http.app.router.routes if isinstance(r, APIRoute)]  # type: ignore[attr-defined]
    return [r for r in routes if r.endpoint in SHAPES]


@contextmanager
def _fastapi_only(api: Api) -> Iterator[None]:
    """The hot routes served by their FastAPI handlers while the block runs."""
    routes = _fast_routes(api)
    fast = [r.app for r in routes]
    for route in routes:
        assert isinstance(route.app, FastRoute)
        route.app = route.app.fallback
    try:
        yield
    finally:
        for route, app in zip(routes, fast, strict=True):
            route.app = app


def _answer(r: httpx.Response, same: bool = True) -> tuple[Any, ...]:
    """What a client sees of an answer; with `same` off, of its body only the keys, the
    types of their values, and the status and attempt (two tasks' answers then compare)."""
    body: Any = r.text
    if not same:
        answer = r.json()
        body = {
            k: answer[k] if k in ("status", "attempt") else type(v).__name__
            for k, v in answer.items()
        }
    headers = sorted(h for h in r.headers if h != "content-length")
    return r.status_code, r.headers.get("content-type"), headers, body


def test_the_hot_routes_are_served_by_the_fast_path(api: Api) -> None:
    assert {r.endpoint.__name__ for r in _fast_routes(api)} == {
        "dequeue_task",
        "update_task_status",
        "update_task_statuses",
        "heartbeat",
    }
    assert all(isinstance(r.app, FastRoute) for r in _fast_routes(api))


@pytest.mark.parametrize(
    ("method", "path", "kwargs"),
    [
        ("PUT", "/v1/tasks/not-a-uuid/status", {"json": {"status": "COMPLETED"}}),
        ("PUT", "/v1/tasks/{missing}/status", {"json": {"status": "COMPLETED"}}),
        ("PUT", "/v1/tasks/{task}/status", {"json": {"status": "PENDING"}}),
        ("PUT", "/v1/tasks/{task}/status", {"json": {"status": "COMPLETED", "extra": 1}}),
        ("PUT", "/v1/tasks/{task}/status", {"json": {"status": "COMPLETED", "attempt": 9}}),
        ("PUT", "/v1/tasks/{task}/status", {"json": ["COMPLETED"]}),
        ("PUT", "/v1/tasks/{task}/status", {}),
        ("PUT", "/v1/tasks/{task}/status?x=1", {"json": {"status": "COMPLETED"}}),
        (
            "PUT",
            "/v1/tasks/{task}/status",
            {"content": b'{"status": "COMPLETED"}', "headers": {"Content-Type": "text/plain"}},
        ),
        ("POST", "/v1/tasks/{task}/heartbeat", {"json": {}}),
        ("POST", "/v1/tasks/{task}/heartbeat", {"json": {"attempt": 0}}),
        ("POST", "/v1/tasks/{task}/heartbeat", {"json": {"attempt": 7}}),
        ("POST", "/v1/tasks/{missing}/heartbeat", {"json": {"attempt": 1}}),
        ("PATCH", "/v1/stages/{long}/tasks/dequeue", {}),
        ("PATCH", "/v1/stages/{type}/tasks/dequeue?count=0", {}),
        ("PATCH", "/v1/stages/{type}/tasks/dequeue?unknown=1", {}),
        ("PATCH", "/v1/stages/nothing-queued/tasks/dequeue", {}),
        ("PATCH", "/v1/stages/{type}/tasks/dequeue?count=x", {}),
        ("PATCH", "/v1/stages/{type}/tasks/dequeue?count=101", {}),
        ("PATCH", "/v1/stages/{type}/tasks/dequeue?count=2&count=200", {}),
        ("PATCH", "/v1/stages/{type}/tasks/dequeue?count=2&lease_seconds=0", {}),
        ("PATCH", "/v1/stages/{type}/tasks/dequeue?lease_seconds=", {}),
        ("PATCH", "/v1/stages/{long}/tasks/dequeue?count=2", {}),
        ("PUT", "/v1/tasks/status", {"json": []}),
        ("PUT", "/v1/tasks/status", {"json": {"id": "{task}"}}),
        ("PUT", "/v1/tasks/status", {"json": [{"id": "{task}", "status": "COMPLETED"}]}),
        ("PUT", "/v1/tasks/status", {"json": [{"id": "x", "attempt": 1, "status": "DONE"}]}),
        ("PUT", "/v1/tasks/status", {}),
        ("PUT", "/v1/tasks/status?x=1", {"json": [{"id": "{task}", "status": "COMPLETED"}]}),
        (
            "PUT",
            "/v1/tasks/status",
            {"content": b'[{"status": "COMPLETED"}]', "headers": {"Content-Type": "text/plain"}},
        ),
    ],
)
def test_a_refusal_answers_as_fastapi_does(
    api: Api, method: str, path: str, kwargs: dict[str, Any]
) -> None:
    stage_type = api.new_type()
    job = api.create_job()
    stage = api.add_stage(job["id"], type=stage_type)
    api.add_tasks(stage["id"])
    task = api.dequeue(stage_type)
    target = path.format(
        task=task["id"],
        missing="00000000-0000-4000-8000-000000000000",
        long="x" * 51,
        type=stage_type,
    )

    if "json" in kwargs:
        kwargs = {
            **kwargs,
            "json": json.loads(json.dumps(kwargs["json"]).replace("{task}", task["id"])),
        }

    fast = api.http.request(method, target, **kwargs)
    with _fastapi_only(api):
        slow = api.http.request(method, target, **kwargs)
    assert fast.status_code >= 400, fast.text
    assert _answer(fast) == _answer(slow)


def test_a_worker_cycle_answers_as_fastapi_does(api: Api) -> None:
    stage_type = api.new_type()
    job = api.create_job()
    stage = api.add_stage(job["id"], type=stage_type)
    api.add_tasks(stage["id"], count=2)
    headers = {"traceparent": TRACE, "X-Request-Id": "the-same-id"}

    def cycle() -> tuple[tuple[Any, ...], ...]:
        dequeued = api.http.patch(f"/v1/stages/{stage_type}/tasks/dequeue", headers=headers)
        task = dequeued.json()
        beat = api.http.post(
            f"/v1/tasks/{task['id']}/heartbeat", json={"attempt": 1}, headers=headers
        )
        report = api.http.put(
            f"/v1/tasks/{task['id']}/status",
            json={"status": "COMPLETED", "attempt": 1, "result": {"n": 1}},
            headers=headers,
        )
        return tuple(_answer(r, same=False) for r in (dequeued, beat, report))

    fast = cycle()
    with _fastapi_only(api):
        slow = cycle()
    assert [a[0] for a in fast] == [200, 200, 200]
    assert "x-jobnik-position" in fast[2][2]
    assert fast == slow


def test_a_batched_worker_cycle_answers_as_fastapi_does(api: Api) -> None:
    headers = {"traceparent": TRACE, "X-Request-Id": "the-same-id"}

    def cycle() -> tuple[Any, ...]:
        stage_type = api.new_type()  # (a failed task fails its job: a job per cycle)
        stage = api.add_stage(api.create_job()["id"], type=stage_type)
        api.add_tasks(stage["id"], count=3, maxAttempts=1)
        dequeued = api.http.patch(
            f"/v1/stages/{stage_type}/tasks/dequeue",
            params={"count": 3, "lease_seconds": 60},
            headers=headers,
        )
        # the first completes, the second reports a stale attempt, the third fails its job
        outcomes = zip(
            dequeued.json(), (1, 2, 1), ("COMPLETED", "COMPLETED", "FAILED"), strict=True
        )
        reported = api.http.put(
            "/v1/tasks/status",
            json=[{"id": t["id"], "attempt": n, "status": s} for t, n, s in outcomes],
            headers=headers,
        )
        answers = [
            {k: v for k, v in a.items() if k not in ("id", "message")} for a in reported.json()
        ]
        return (
            [_answer(r)[:3] for r in (dequeued, reported)],
            [(t["status"], t["attempt"], t["leaseExpiresAt"] is not None) for t in dequeued.json()],
            answers,
        )

    fast = cycle()
    with _fastapi_only(api):
        slow = cycle()
    assert [a[0] for a in fast[0]] == [200, 200]
    assert [a["ok"] for a in fast[2]] == [True, False, True]
    assert fast == slow
