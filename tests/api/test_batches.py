from __future__ import annotations

import uuid

from fastapi.testclient import TestClient

from jobnik.api.main import app_from_env

from .conftest import Api, Secured


def queued(api: Api, count: int, **fields: object) -> str:
    stage = api.add_stage(api.create_job()["id"])
    api.add_tasks(stage["id"], count, **fields)
    return str(stage["type"])


def test_a_batched_dequeue_answers_an_array_and_an_empty_one_when_nothing_is_queued(
    api: Api,
) -> None:
    stage_type = queued(api, 3)
    url = f"/v1/stages/{stage_type}/tasks/dequeue"

    first = api.http.patch(url, params={"count": 2})
    rest = api.http.patch(url, params={"count": 2, "lease_seconds": 60})
    with api.nothing_written():
        empty = api.http.patch(url, params={"count": 2})
    single = api.http.patch(url)

    assert (first.status_code, rest.status_code, empty.status_code) == (200, 200, 200)
    assert [t["data"]["i"] for t in first.json() + rest.json()] == [0, 1, 2]
    assert {(t["status"], t["attempt"]) for t in first.json() + rest.json()} == {("IN_PROGRESS", 1)}
    assert empty.json() == []
    assert (single.status_code, single.json()["code"]) == (404, "TASK_NOT_FOUND")


def test_a_batch_beyond_the_setting_is_refused_whole(database_url: str) -> None:
    env = {"JOBNIK_DATABASE_URL": database_url, "JOBNIK_MAX_BATCH_SIZE": "2"}
    with TestClient(app_from_env(env)) as http:
        api = Api(http)
        stage_type = queued(api, 3)
        tasks = [api.dequeue(stage_type) for _ in range(3)]
        reports = [{"id": t["id"], "attempt": 1, "status": "COMPLETED"} for t in tasks]

        with api.nothing_written():
            claimed = http.patch(f"/v1/stages/{stage_type}/tasks/dequeue", params={"count": 3})
            reported = http.put("/v1/tasks/status", json=reports)

    assert (claimed.status_code, claimed.json()) == (
        400,
        {
            "message": "a batch of 3 tasks; at most 2 per request",
            "code": "BATCH_TOO_LARGE",
        },
    )
    assert (reported.status_code, reported.json()["code"]) == (400, "BATCH_TOO_LARGE")


def test_a_batched_report_answers_each_item_with_what_a_single_report_would(api: Api) -> None:
    stage_type = queued(api, 4, maxAttempts=1)
    done, stale, failed, illegal = api.http.patch(
        f"/v1/stages/{stage_type}/tasks/dequeue", params={"count": 4}
    ).json()
    missing = str(uuid.uuid4())
    single = api.http.put(
        f"/v1/tasks/{stale['id']}/status", json={"status": "COMPLETED", "attempt": 2}
    )

    r = api.http.put(
        "/v1/tasks/status",
        json=[
            {"id": done["id"], "attempt": 1, "status": "COMPLETED", "result": {"tiles": 3}},
            {"id": stale["id"], "attempt": 2, "status": "COMPLETED"},
            {"id": failed["id"], "attempt": 1, "status": "FAILED", "reason": "boom"},
            {"id": illegal["id"], "attempt": 1, "status": "DELEGATED"},
            {"id": missing, "attempt": 1, "status": "COMPLETED"},
        ],
    )

    assert r.status_code == 200
    answers = r.json()
    assert [a["id"] for a in answers] == [
        done["id"],
        stale["id"],
        failed["id"],
        illegal["id"],
        missing,
    ]
    assert answers[0] == {
        "id": done["id"],
        "ok": True,
        "httpStatus": 200,
        "status": "COMPLETED",
        "attempt": 1,
    }
    assert answers[1] == {
        "id": stale["id"],
        "ok": False,
        "httpStatus": single.status_code,
        "code": single.json()["code"],
        "message": single.json()["message"],
    }
    assert (answers[2]["ok"], answers[2]["status"]) == (True, "FAILED")
    assert [(a["ok"], a["httpStatus"], a.get("code")) for a in answers[3:]] == [
        (False, 400, "DELEGATION_REFUSED"),
        (False, 404, "TASK_NOT_FOUND"),
    ]
    assert api.task(done["id"])["result"] == {"tiles": 3}
    assert api.task(stale["id"])["status"] == "IN_PROGRESS"
    assert api.events_of(stale["id"])[-2:] == ["TaskAttemptRefused", "TaskAttemptRefused"]


def test_a_batched_report_with_an_idempotency_key_is_answered_once(api: Api) -> None:
    stage_type = queued(api, 1)
    task = api.dequeue(stage_type)
    body = [{"id": task["id"], "attempt": 1, "status": "COMPLETED"}]
    headers = {"Idempotency-Key": "batch-1"}

    first = api.http.put("/v1/tasks/status", json=body, headers=headers)
    with api.nothing_written():
        again = api.http.put("/v1/tasks/status", json=body, headers=headers)

    assert first.json()[0]["ok"] is True
    assert again.json() == first.json()
    assert again.headers["Idempotent-Replayed"] == "true"


def test_a_batched_report_item_needs_its_attempt(api: Api) -> None:
    with api.nothing_written():
        r = api.http.put(
            "/v1/tasks/status", json=[{"id": str(uuid.uuid4()), "status": "COMPLETED"}]
        )

    assert (r.status_code, r.json()["code"]) == (400, "VALIDATION_ERROR")


def test_a_worker_token_batches_only_its_stage_types_and_its_own_attempts(
    secured: Secured,
) -> None:
    api = secured.api
    mine, theirs = queued(api, 2), queued(api, 1)
    tiler = secured.issue("tiler", "worker", stage_types=[mine])
    other = secured.issue("other", "worker", stage_types=[mine])
    held = secured.call(other, "PATCH", f"/v1/stages/{mine}/tasks/dequeue").json()
    foreign = api.dequeue(theirs)

    refused = secured.call(tiler, "PATCH", f"/v1/stages/{theirs}/tasks/dequeue?count=2")
    claimed = secured.call(tiler, "PATCH", f"/v1/stages/{mine}/tasks/dequeue?count=2").json()
    r = secured.call(
        tiler,
        "PUT",
        "/v1/tasks/status",
        [
            {"id": held["id"], "attempt": 1, "status": "COMPLETED"},
            {"id": foreign["id"], "attempt": 1, "status": "COMPLETED"},
            {"id": claimed[0]["id"], "attempt": 1, "status": "COMPLETED"},
        ],
    )

    assert refused.status_code == 403
    assert len(claimed) == 1
    assert [(a["ok"], a["httpStatus"]) for a in r.json()] == [
        (False, 403),
        (False, 403),
        (True, 200),
    ]
    assert api.task(held["id"])["status"] == "IN_PROGRESS"


def test_the_batched_protocol_is_in_the_openapi_document(api: Api) -> None:
    doc = api.http.get("/openapi.json").json()

    dequeue = doc["paths"]["/v1/stages/{stageType}/tasks/dequeue"]["patch"]
    report = doc["paths"]["/v1/tasks/status"]["put"]
    assert "count" in [p["name"] for p in dequeue["parameters"]]
    assert "oneOf" in dequeue["responses"]["200"]["content"]["application/json"]["schema"]
    assert "BATCH_TOO_LARGE" in dequeue["responses"]["400"]["description"]
    assert "BATCH_TOO_LARGE" in report["responses"]["400"]["description"]
    assert report["requestBody"]["content"]["application/json"]["schema"]["items"]["$ref"].endswith(
        "TaskReport"
    )
