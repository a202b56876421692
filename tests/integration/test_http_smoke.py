"""The HTTP API on each real database: the README's walk-through, and the worker's requests
(alone, grouped, batched, heartbeats, logs) down to the read models and the history. The HTTP
tests (tests/api) run on a database in memory; these show that every route reaches SQLite files
and PostgreSQL alike."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from fastapi.testclient import TestClient

from jobnik.api.main import app_from_env
from jobnik.projections.rebuild.verify import verify


@pytest.fixture
def http(database_url: str) -> Iterator[TestClient]:
    app = app_from_env({"JOBNIK_DATABASE_URL": database_url})
    with TestClient(app) as client:
        yield client


def test_the_readmes_two_stage_job_runs_to_completed(http: TestClient) -> None:
    job = http.post(
        "/v1/jobs", json={"name": "create-map", "data": {"mapId": "m"}, "priority": "HIGH"}
    ).json()
    s1 = http.post(f"/v1/jobs/{job['id']}/stage", json={"type": "process", "data": {}}).json()
    s2 = http.post(f"/v1/jobs/{job['id']}/stage", json={"type": "upload", "data": {}}).json()
    http.post(f"/v1/stages/{s1['id']}/tasks", json=[{"data": {"t": 1}}, {"data": {"t": 2}}])
    http.post(f"/v1/stages/{s2['id']}/tasks", json=[{"data": {"b": "s3"}}])

    for _ in range(2):
        task = http.patch("/v1/stages/process/tasks/dequeue").json()
        assert http.put(f"/v1/tasks/{task['id']}/status", json={"status": "COMPLETED"}).is_success
    assert http.get(f"/v1/jobs/{job['id']}").json()["percentage"] == 50
    task = http.patch("/v1/stages/upload/tasks/dequeue").json()
    http.put(f"/v1/tasks/{task['id']}/status", json={"status": "COMPLETED"})

    done = http.get(f"/v1/jobs/{job['id']}").json()
    assert (done["status"], done["percentage"]) == ("COMPLETED", 100)
    assert http.patch("/v1/stages/process/tasks/dequeue").status_code == 404
    history = http.get(f"/v1/jobs/{job['id']}/history", params={"limit": 100}).json()
    assert history["items"][-1]["type"] == "JobCompleted"


def test_the_workers_requests_reach_the_read_models_and_a_rebuild_agrees(
    http: TestClient,
) -> None:
    job = http.post("/v1/jobs", json={"name": "smoke", "data": {}}).json()
    stage = http.post(f"/v1/jobs/{job['id']}/stage", json={"type": "smoke", "data": {}}).json()
    http.post(f"/v1/stages/{stage['id']}/tasks", json=[{"data": {"n": n}} for n in range(30)])

    batch = http.patch("/v1/stages/smoke/tasks/dequeue", params={"count": 10}).json()
    reports = [{"id": t["id"], "attempt": t["attempt"], "status": "COMPLETED"} for t in batch]
    answers = http.put("/v1/tasks/status", json=reports).json()
    beat_task = http.patch("/v1/stages/smoke/tasks/dequeue", params={"lease_seconds": 60}).json()
    beat = http.post(
        f"/v1/tasks/{beat_task['id']}/heartbeat", json={"attempt": beat_task["attempt"]}
    ).json()
    logged = http.post(
        f"/v1/tasks/{beat_task['id']}/logs",
        json={"lines": ["a", "b"], "attempt": beat_task["attempt"]},
    )

    def one_task() -> int:  # alone or grouped, as they arrive
        task = http.patch("/v1/stages/smoke/tasks/dequeue").json()
        answer = http.put(
            f"/v1/tasks/{task['id']}/status",
            json={"status": "COMPLETED", "attempt": task["attempt"]},
        )
        return answer.status_code

    with ThreadPoolExecutor(4) as pool:
        codes = list(pool.map(lambda _: one_task(), range(19)))
    http.put(
        f"/v1/tasks/{beat_task['id']}/status",
        json={"status": "COMPLETED", "attempt": beat_task["attempt"]},
    )

    assert all(a["ok"] for a in answers)
    assert beat["cancelled"] is False
    assert logged.status_code == 201
    assert codes == [200] * 19
    summary = http.get(f"/v1/stages/{stage['id']}").json()["summary"]
    assert (summary["completed"], summary["total"]) == (30, 30)
    assert http.get(f"/v1/jobs/{job['id']}").json()["status"] == "COMPLETED"
    lines = http.get(f"/v1/tasks/{beat_task['id']}/logs").json()["items"]
    assert [line["line"] for line in lines] == ["a", "b"]
    assert verify(http.app.state.store) == []  # type: ignore[attr-defined]
