"""Idempotency-Key against the real server: concurrent requests with one key create once.

PostgreSQL: two server processes sharing the database (the key's lookup and insert happen under
the writer lock, which spans processes); SQLite: one process.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import httpx

THREADS = 8


def is_postgres(url: str) -> bool:
    return url.startswith(("postgresql://", "postgres://"))


def race(url: str, path: str, body: Any, key: str) -> list[httpx.Response]:
    """THREADS clients POST the same request at the same moment; their responses."""
    start = threading.Barrier(THREADS)
    answers: list[httpx.Response | BaseException] = [RuntimeError("no answer")] * THREADS

    def one(i: int) -> None:
        try:
            with httpx.Client(base_url=url, timeout=60) as c:
                c.get("/liveness")  # connect first, so the POSTs leave together
                start.wait(timeout=30)
                answers[i] = c.post(path, json=body, headers={"Idempotency-Key": key})
        except Exception as e:  # noqa: BLE001 - reported by the main thread
            answers[i] = e

    threads = [threading.Thread(target=one, args=(i,)) for i in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    failed = [a for a in answers if isinstance(a, BaseException)]
    assert not failed, failed
    return [a for a in answers if isinstance(a, httpx.Response)]


def test_concurrent_requests_with_one_key_create_once(
    database_url: str, spawn_server: Callable[..., Any]
) -> None:
    server = spawn_server(database_url, workers=2 if is_postgres(database_url) else 1)
    body = {"name": "concurrent", "data": {"n": 1}}

    jobs = race(server.url, "/v1/jobs", body, key="one-job")
    job = jobs[0].json()
    stage = httpx.post(
        f"{server.url}/v1/jobs/{job['id']}/stage", json={"type": "race", "data": {}}
    ).json()
    tasks = race(server.url, f"/v1/stages/{stage['id']}/tasks", [{"data": {}}] * 3, key="tasks")

    for answers in (jobs, tasks):
        assert [r.status_code for r in answers] == [201] * THREADS
        assert len({r.content for r in answers}) == 1  # every client got the same body
        replayed = [r.headers.get("Idempotent-Replayed") for r in answers]
        assert sorted(replayed, key=str) == [None] + ["true"] * (THREADS - 1)
    found = httpx.get(f"{server.url}/v1/jobs", params={"job_name": "concurrent"}).json()
    assert [j["id"] for j in found] == [job["id"]]
    assert len(httpx.get(f"{server.url}/v1/stages/{stage['id']}/tasks").json()) == 3
