"""Idempotency-Key over HTTP: replay, reuse refused, expiry, failures."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient

from jobnik.api.main import app_from_env
from tests.api.conftest import Api

MISSING = "00000000-0000-4000-8000-000000000000"
JOB = {"name": "nightly", "data": {"mapId": "map-123"}, "priority": "HIGH"}


def post(api: Api, path: str, body: Any, key: str | None = None) -> Any:
    headers = {"Idempotency-Key": key} if key is not None else {}
    return api.http.post(path, json=body, headers=headers)


def job_count(api: Api) -> int:
    return len(api.http.get("/v1/jobs").json())


def test_a_retried_job_creation_answers_the_first_response_and_creates_nothing(api: Api) -> None:
    first = post(api, "/v1/jobs", JOB, key="job-1")

    with api.nothing_written():
        again = post(api, "/v1/jobs", {"priority": "HIGH", **JOB}, key="job-1")  # key order

    assert first.status_code == again.status_code == 201
    assert again.content == first.content
    assert again.headers["Idempotent-Replayed"] == "true"
    assert "Idempotent-Replayed" not in first.headers
    assert again.headers["X-Jobnik-Position"] == first.headers["X-Jobnik-Position"]
    assert job_count(api) == 1
    assert api.job(first.json()["id"])["name"] == "nightly"


def test_a_keyed_response_has_the_shape_of_an_unkeyed_one(api: Api) -> None:
    keyed = post(api, "/v1/jobs", JOB, key="shape").json()
    plain = post(api, "/v1/jobs", JOB).json()

    assert keyed.keys() == plain.keys()
    assert keyed == api.job(keyed["id"])


def test_retried_stage_and_task_creations_create_once(api: Api) -> None:
    job = api.create_job()
    stage_body = {"type": "process-tiles", "data": {"resolution": "high"}}
    tasks_body = [{"data": {"tileId": "tile-001"}}, {"data": {"tileId": "tile-002"}}]

    stage = post(api, f"/v1/jobs/{job['id']}/stage", stage_body, key="stage-1")
    stage_again = post(api, f"/v1/jobs/{job['id']}/stage", stage_body, key="stage-1")
    tasks = post(api, f"/v1/stages/{stage.json()['id']}/tasks", tasks_body, key="tasks-1")
    with api.nothing_written():
        tasks_again = post(api, f"/v1/stages/{stage.json()['id']}/tasks", tasks_body, "tasks-1")

    assert (stage.status_code, stage_again.status_code) == (201, 201)
    assert stage_again.content == stage.content
    assert (tasks.status_code, tasks_again.status_code) == (201, 201)
    assert tasks_again.content == tasks.content
    assert tasks_again.headers["Idempotent-Replayed"] == "true"
    assert len(api.http.get(f"/v1/jobs/{job['id']}/stages").json()) == 1
    assert len(api.http.get(f"/v1/stages/{stage.json()['id']}/tasks").json()) == 2


def test_the_key_with_another_body_is_refused_and_creates_nothing(api: Api) -> None:
    post(api, "/v1/jobs", JOB, key="job-1")

    with api.nothing_written():
        r = post(api, "/v1/jobs", {**JOB, "priority": "LOW"}, key="job-1")

    assert r.status_code == 422
    assert r.json()["code"] == "IDEMPOTENCY_KEY_REUSED"
    assert job_count(api) == 1


def test_the_key_on_another_endpoint_is_refused(api: Api) -> None:
    job = post(api, "/v1/jobs", JOB, key="shared").json()
    other = api.create_job()
    post(api, f"/v1/jobs/{other['id']}/stage", {"type": "t", "data": {}}, key="s")

    with api.nothing_written():
        stage = post(api, f"/v1/jobs/{job['id']}/stage", {"type": "t", "data": {}}, "shared")
        # the same route with another job in its path is another request
        elsewhere = post(api, f"/v1/jobs/{job['id']}/stage", {"type": "t", "data": {}}, "s")

    assert (stage.status_code, stage.json()["code"]) == (422, "IDEMPOTENCY_KEY_REUSED")
    assert (elsewhere.status_code, elsewhere.json()["code"]) == (422, "IDEMPOTENCY_KEY_REUSED")
    assert api.http.get(f"/v1/jobs/{job['id']}/stages").json() == []


def test_a_failing_command_records_no_key(api: Api) -> None:
    body = {"type": "t", "data": {}}

    with api.nothing_written():
        missing = post(api, f"/v1/jobs/{MISSING}/stage", body, key="k")
    job = post(api, "/v1/jobs", JOB, key="k")  # the key is still free

    assert (missing.status_code, missing.json()["code"]) == (404, "JOB_NOT_FOUND")
    assert "Idempotent-Replayed" not in missing.headers
    assert job.status_code == 201
    assert "Idempotent-Replayed" not in job.headers


def test_an_invalid_body_records_no_key(api: Api) -> None:
    refused = post(api, "/v1/jobs", {"name": "x"}, key="k")
    created = post(api, "/v1/jobs", JOB, key="k")

    assert (refused.status_code, refused.json()["code"]) == (400, "VALIDATION_ERROR")
    assert created.status_code == 201


def test_a_malformed_key_is_a_validation_error(api: Api) -> None:
    with api.nothing_written():
        r = post(api, "/v1/jobs", JOB, key="has space")

    assert (r.status_code, r.json()["code"]) == (400, "VALIDATION_ERROR")


def test_two_keys_on_one_request_are_refused_as_ambiguous(api: Api) -> None:
    two = [("Idempotency-Key", "first"), ("Idempotency-Key", "second")]
    with api.nothing_written():
        r = api.http.post("/v1/jobs", json=JOB, headers=two)

    assert (r.status_code, r.json()["code"]) == (400, "VALIDATION_ERROR"), r.text
    assert "Idempotency-Key" in r.json()["message"]


@pytest.fixture
def short_ttl_client(database_url: str) -> Iterator[TestClient]:
    env = {
        "JOBNIK_DATABASE_URL": database_url,
        "JOBNIK_IDEMPOTENCY_TTL": "60",
        "JOBNIK_SWEEP_INTERVAL": "3600",  # the test runs the sweeper's round itself
    }
    with TestClient(app_from_env(env)) as c:
        yield c


def test_an_expired_key_may_be_used_again(short_ttl_client: TestClient) -> None:
    api = Api(short_ttl_client)
    keys = short_ttl_client.app.state.idempotency  # type: ignore[attr-defined]
    first = post(api, "/v1/jobs", JOB, key="daily")
    later = datetime.now(UTC) + timedelta(seconds=61)

    keys.clock = lambda: later - timedelta(seconds=2)  # within the TTL: still a replay
    replay = post(api, "/v1/jobs", {**JOB, "priority": "LOW"}, key="daily")
    keys.clock = lambda: later
    reused = post(api, "/v1/jobs", {**JOB, "priority": "LOW"}, key="daily")
    repeat = post(api, "/v1/jobs", {**JOB, "priority": "LOW"}, key="daily")

    assert keys.ttl == 60
    assert replay.status_code == 422
    assert reused.status_code == 201
    assert reused.json()["id"] != first.json()["id"]
    assert "Idempotent-Replayed" not in reused.headers
    assert repeat.headers["Idempotent-Replayed"] == "true"
    assert job_count(api) == 2


def test_the_sweeper_purges_expired_keys(short_ttl_client: TestClient) -> None:
    api = Api(short_ttl_client)
    state = short_ttl_client.app.state  # type: ignore[attr-defined]
    post(api, "/v1/jobs", JOB, key="old")
    state.idempotency.clock = lambda: datetime.now(UTC) + timedelta(seconds=61)
    post(api, "/v1/jobs", JOB, key="new")

    state.sweeper.sweep_once()

    assert state.idempotency.purge() == 0  # the sweeper purged "old"; "new" is not expired
    assert post(api, "/v1/jobs", JOB, key="new").headers["Idempotent-Replayed"] == "true"
