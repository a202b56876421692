"""Write responses carry their log position; catch-up reads wait for it (`min_position`)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from jobnik.api.main import app_from_env
from jobnik.projections.catchup.registry import CATCH_UP
from jobnik.projections.catchup.runner import catch_up

from .conftest import SpawnServer
from .locks import advisory_holders

POSITION, SERVED = "X-Jobnik-Position", "X-Jobnik-Projection-Position"


@pytest.fixture
def client(database_url: str) -> Iterator[TestClient]:
    env = {"JOBNIK_DATABASE_URL": database_url, "JOBNIK_SWEEP_INTERVAL": "0"}
    with TestClient(app_from_env(env)) as c:
        yield c


def a_failed_task(http: Any, name: str, stage_type: str) -> tuple[str, int]:
    """A job whose one task failed once (RETRIED); returns the job id and the last position."""
    job = http.post("/v1/jobs", json={"name": name, "data": {}}).json()
    stage = http.post(f"/v1/jobs/{job['id']}/stage", json={"type": stage_type, "data": {}}).json()
    http.post(f"/v1/stages/{stage['id']}/tasks", json=[{"data": {}, "maxAttempts": 2}])
    task = http.patch(f"/v1/stages/{stage_type}/tasks/dequeue").json()
    r = http.put(f"/v1/tasks/{task['id']}/status", json={"status": "FAILED"})
    assert r.status_code == 200, r.text
    return job["id"], int(r.headers[POSITION])


def test_every_write_response_carries_the_position_it_reached(client: TestClient) -> None:
    created = client.post("/v1/jobs", json={"name": "nightly", "data": {}})
    read = client.get(f"/v1/jobs/{created.json()['id']}")
    changed = client.patch(f"/v1/jobs/{created.json()['id']}/user-metadata", json={"owner": "ops"})
    refused = client.put(f"/v1/jobs/{created.json()['id']}/status", json={"status": "COMPLETED"})

    assert int(created.headers[POSITION]) == 1
    assert int(changed.headers[POSITION]) == 2
    assert POSITION not in read.headers
    assert refused.status_code == 400
    assert POSITION not in refused.headers  # refused: nothing written


def test_a_read_with_min_position_sees_the_write(client: TestClient) -> None:
    job_id, position = a_failed_task(client, "ryw", "ryw")

    definition = client.get("/v1/job-definitions/ryw", params={"min_position": position})
    stats = client.get(f"/v1/jobs/{job_id}/statistics", params={"min_position": position})

    assert definition.status_code == 200, definition.text
    assert int(definition.headers[SERVED]) >= position
    assert definition.json()["lastStatus"] == "IN_PROGRESS"
    assert definition.json()["lastJobId"] == job_id
    assert stats.status_code == 200, stats.text
    assert int(stats.headers[SERVED]) >= position
    assert stats.json()["createdTaskCount"] == 2
    assert stats.json()["retriedAfterErrorTaskCount"] == 1
    assert stats.json()["stages"][0]["type"] == "ryw"


def test_a_read_that_cannot_catch_up_answers_in_time_with_the_position_it_has(
    database_url: str,
) -> None:
    env = {
        "JOBNIK_DATABASE_URL": database_url,
        "JOBNIK_SWEEP_INTERVAL": "0",
        "JOBNIK_CATCHUP_INTERVAL": "0",  # no runner in this process
        "JOBNIK_MIN_POSITION_WAIT": "0.3",
    }
    with TestClient(app_from_env(env)) as http:
        job_id, position = a_failed_task(http, "lagging", "lagging")
        started = time.monotonic()
        behind = http.get(f"/v1/jobs/{job_id}/statistics", params={"min_position": position})
        waited = time.monotonic() - started
        for projection in CATCH_UP:
            while catch_up(http.app.state.store, projection):  # type: ignore[attr-defined]
                pass
        caught_up = http.get(f"/v1/jobs/{job_id}/statistics", params={"min_position": position})

    assert behind.status_code == 404  # not in the projection yet: never a 503
    assert int(behind.headers[SERVED]) < position
    assert 0.3 <= waited < 3
    assert caught_up.status_code == 200
    assert int(caught_up.headers[SERVED]) >= position


def test_min_position_must_be_a_position(client: TestClient) -> None:
    r = client.get("/v1/job-definitions/x", params={"min_position": -1})

    assert r.status_code == 400
    assert r.json()["code"] == "VALIDATION_ERROR"


@pytest.mark.slow
@pytest.mark.parametrize(
    "database_url",
    ["postgres"],
    indirect=True,
    ids=["postgres-only(an-sqlite-file-has-one-server-process)"],
)
def test_with_two_api_processes_one_runs_the_projections_and_both_serve_read_your_writes(
    database_url: str, spawn_server: SpawnServer, tmp_path: Path
) -> None:
    server = spawn_server(database_url, workers=2, env={"JOBNIK_SWEEP_INTERVAL": "0"})
    with httpx.Client(base_url=server.url, timeout=30) as http:
        for i in range(8):  # writes and reads land on either process
            job_id, position = a_failed_task(http, f"multi-{i % 2}", f"multi-{i}")
            r = http.get(f"/v1/jobs/{job_id}/statistics", params={"min_position": position})
            assert r.status_code == 200, r.text
            assert int(r.headers[SERVED]) >= position
            assert r.json()["retriedAfterErrorTaskCount"] == 1

    assert len(server.serving_pids("/statistics")) >= 1
    assert leaders(database_url) == 1


def leaders(database_url: str) -> int:
    """How many processes hold the catch-up leader lock."""
    return advisory_holders(database_url, "catchup")
