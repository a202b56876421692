"""Every v1 endpoint answering its success case: shapes, defaults, filters, metadata."""

from __future__ import annotations

from typing import Any
from uuid import UUID

import pytest
from fastapi.testclient import TestClient
from starlette.routing import Match

from jobnik.api.routes import stages, tasks

from .conftest import (
    EMPTY_SUMMARY,
    NO_TRACE,
    OTHER_TRACE,
    TRACE,
    Api,
    Json,
    parse_time,
)

JOB_FIELDS = {
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
    "mode",  # jobnik's additive field (job modes)
}
STAGE_FIELDS = {
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
    "completion",  # jobnik's additive field (completion stages)
}
TASK_FIELDS = {
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
TIMES = {"startTime", "endTime"}  # jobnik's additive fields, present once set
# jobnik's additive task fields: leases, delegations
LEASE_FIELDS = {"attempt", "leaseExpiresAt", "delegations"}


def task_keys(task: Json) -> set[str]:
    """The task's fields other than jobnik's lease fields, which are additive."""
    return set(task) - LEASE_FIELDS


def workflow(api: Api) -> tuple[Json, Json, list[Json]]:
    job = api.create_job()
    stage = api.add_stage(job["id"])
    return job, stage, api.add_tasks(stage["id"], count=2)


# -- shapes and defaults -----------------------------------------------------------------


def test_created_job_has_the_contract_shape_and_defaults(api: Api) -> None:
    r = api.http.post("/v1/jobs", json={"name": "nightly", "data": {"bbox": [0, 0, 1, 1]}})

    job = r.json()
    assert r.status_code == 201
    assert set(job) == JOB_FIELDS
    assert job["name"] == "nightly"
    assert job["data"] == {"bbox": [0, 0, 1, 1]}
    assert (job["status"], job["percentage"], job["priority"]) == ("PENDING", 0, "MEDIUM")
    assert job["userMetadata"] == {}
    assert job["traceparent"] == NO_TRACE
    assert job["creationTime"] == job["updateTime"]
    parse_time(job["creationTime"])


def test_job_fields_given_on_creation_are_kept(api: Api) -> None:
    job = api.create_job(
        name="xy",
        priority="VERY_LOW",
        userMetadata={"owner": "ops"},
        traceparent=TRACE,
        tracestate="vendor=1",
    )

    again = api.job(job["id"])

    assert again == job
    assert set(job) == JOB_FIELDS | {"tracestate"}
    assert (job["priority"], job["userMetadata"]) == ("VERY_LOW", {"owner": "ops"})
    assert (job["traceparent"], job["tracestate"]) == (TRACE, "vendor=1")


def test_created_stage_has_the_contract_shape_plus_jobniks_creation_and_update_times(
    api: Api,
) -> None:
    job = api.create_job()

    stage = api.add_stage(job["id"], type="tiles")

    assert set(stage) == STAGE_FIELDS | {"creationTime", "updateTime"}


def test_created_stage_has_the_contract_fields(api: Api) -> None:
    job = api.create_job()

    stage = api.add_stage(job["id"], type="tiles")

    assert set(stage) >= STAGE_FIELDS
    assert not TIMES & set(stage)
    assert (stage["jobId"], stage["type"], stage["order"]) == (job["id"], "tiles", 1)
    assert (stage["status"], stage["percentage"]) == ("PENDING", 0)
    assert stage["summary"] == EMPTY_SUMMARY
    assert (stage["data"], stage["userMetadata"]) == ({"s": 1}, {})
    assert stage["traceparent"] == NO_TRACE
    assert stage == api.stage(stage["id"])


def test_created_tasks_have_the_contract_shape_and_defaults(api: Api) -> None:
    job = api.create_job()
    stage = api.add_stage(job["id"])

    r = api.http.post(
        f"/v1/stages/{stage['id']}/tasks",
        json=[{"data": {"n": 1}}, {"data": {"n": 2}, "maxAttempts": 5, "userMetadata": {"k": 1}}],
    )

    first, second = r.json()
    assert r.status_code == 201
    assert task_keys(first) == task_keys(second) == TASK_FIELDS
    assert (first["status"], first["attempts"], first["maxAttempts"]) == ("PENDING", 0, 3)
    assert (first["stageId"], first["data"], first["userMetadata"]) == (stage["id"], {"n": 1}, {})
    assert (second["maxAttempts"], second["userMetadata"]) == (5, {"k": 1})
    assert first["traceparent"] == NO_TRACE
    assert api.task(first["id"]) == first


def test_running_and_finished_entities_carry_start_and_end_times(api: Api) -> None:
    job = api.create_job()
    stage = api.add_stage(job["id"])
    api.add_tasks(stage["id"])

    task = api.dequeue(stage["type"])
    running = (api.job(job["id"]), api.stage(stage["id"]), task)
    done = api.report(task["id"], "COMPLETED")
    finished = (api.job(job["id"]), api.stage(stage["id"]), done)

    for entity in running:
        assert "startTime" in entity
        assert "endTime" not in entity
    for entity in finished:
        assert set(entity) >= TIMES
        assert parse_time(entity["startTime"]) <= parse_time(entity["endTime"])
    assert set(finished[0]) == JOB_FIELDS | TIMES
    assert task_keys(done) == TASK_FIELDS | TIMES


def test_stages_appear_only_when_asked(api: Api) -> None:
    job = api.create_job()
    empty = api.create_job()
    stage = api.add_stage(job["id"])

    plain = api.job(job["id"])
    asked = api.job(job["id"], should_return_stages="true")
    declined = api.job(job["id"], should_return_stages="false")
    none_yet = api.job(empty["id"], should_return_stages="true")

    assert "stages" not in plain
    assert "stages" not in declined
    assert [s["id"] for s in asked["stages"]] == [stage["id"]]
    assert "tasks" not in asked["stages"][0]
    assert none_yet["stages"] == []


def test_tasks_appear_only_when_asked(api: Api) -> None:
    job, stage, tasks = workflow(api)
    ids = sorted(t["id"] for t in tasks)

    plain = api.stage(stage["id"])
    asked = api.stage(stage["id"], should_return_tasks="true")
    listed = api.http.get("/v1/stages", params={"job_id": job["id"], "should_return_tasks": True})
    of_job = api.http.get(f"/v1/jobs/{job['id']}/stages", params={"should_return_tasks": True})

    assert "tasks" not in plain
    assert sorted(t["id"] for t in asked["tasks"]) == ids
    assert sorted(t["id"] for t in listed.json()[0]["tasks"]) == ids
    assert sorted(t["id"] for t in of_job.json()[0]["tasks"]) == ids
    assert "tasks" not in api.http.get(f"/v1/jobs/{job['id']}/stages").json()[0]


# -- trace context ------------------------------------------------------------------------


def test_trace_context_comes_from_the_request_header_when_the_body_has_none(api: Api) -> None:
    headers = {"traceparent": TRACE, "tracestate": "vendor=1"}

    job = api.http.post("/v1/jobs", json={"name": "ab", "data": {}}, headers=headers).json()
    stage = api.http.post(
        f"/v1/jobs/{job['id']}/stage", json={"type": "t", "data": {}}, headers=headers
    ).json()
    (task,) = api.http.post(
        f"/v1/stages/{stage['id']}/tasks", json=[{"data": {}}], headers=headers
    ).json()

    for entity in (job, stage, task):
        assert (entity["traceparent"], entity["tracestate"]) == (TRACE, "vendor=1")


def test_trace_context_in_the_body_wins_over_the_header(api: Api) -> None:
    headers = {"traceparent": TRACE}

    job = api.http.post(
        "/v1/jobs", json={"name": "ab", "data": {}, "traceparent": OTHER_TRACE}, headers=headers
    ).json()
    stage = api.http.post(
        f"/v1/jobs/{job['id']}/stage",
        json={"type": "t", "data": {}, "traceparent": OTHER_TRACE},
        headers=headers,
    ).json()
    (task,) = api.http.post(
        f"/v1/stages/{stage['id']}/tasks",
        json=[{"data": {}, "traceparent": OTHER_TRACE}],
        headers=headers,
    ).json()

    assert job["traceparent"] == stage["traceparent"] == task["traceparent"] == OTHER_TRACE
    assert "tracestate" not in job


def test_an_invalid_traceparent_header_is_ignored(api: Api) -> None:
    r = api.http.post("/v1/jobs", json={"name": "ab", "data": {}}, headers={"traceparent": "x"})

    assert (r.status_code, r.json()["traceparent"]) == (201, NO_TRACE)


def test_length_limits_are_inclusive(api: Api) -> None:
    longest = "t" * 50

    short_name = api.http.post("/v1/jobs", json={"name": "ab", "data": {}})
    long_name = api.http.post("/v1/jobs", json={"name": "n" * 50, "data": {}})
    stage = api.add_stage(short_name.json()["id"], type=longest)
    api.add_tasks(stage["id"])

    assert (short_name.status_code, long_name.status_code) == (201, 201)
    assert api.dequeue(longest)["stageId"] == stage["id"]
    assert [s["id"] for s in api.http.get("/v1/stages", params={"stage_type": longest}).json()] == [
        stage["id"]
    ]


# -- jobs ---------------------------------------------------------------------------------


def test_find_jobs_filters_by_name_and_priority(api: Api) -> None:
    a = api.create_job(name="alpha", priority="HIGH")
    b = api.create_job(name="alpha", priority="LOW")
    c = api.create_job(name="gamma", priority="HIGH")

    def ids(**params: Any) -> set[str]:
        r = api.http.get("/v1/jobs", params=params)
        assert r.status_code == 200
        return {j["id"] for j in r.json()}

    assert ids() == {a["id"], b["id"], c["id"]}
    assert ids(job_name="alpha") == {a["id"], b["id"]}
    assert ids(priority="HIGH") == {a["id"], c["id"]}
    assert ids(job_name="alpha", priority="LOW") == {b["id"]}
    assert ids(job_name="nobody") == set()


def test_find_jobs_returns_an_empty_array_when_there_are_none(api: Api) -> None:
    r = api.http.get("/v1/jobs")

    assert (r.status_code, r.json()) == (200, [])


def test_find_jobs_with_stages(api: Api) -> None:
    job = api.create_job()
    first, second = api.add_stage(job["id"]), api.add_stage(job["id"])

    (found,) = api.http.get("/v1/jobs", params={"should_return_stages": True}).json()

    assert [s["id"] for s in found["stages"]] == [first["id"], second["id"]]


def test_date_filters_use_the_creation_time(api: Api) -> None:
    early, late = api.create_job(name="early"), api.create_job(name="later")
    api.http.patch(f"/v1/jobs/{early['id']}/user-metadata", json={"touched": True})

    def names(**params: str) -> list[str]:
        r = api.http.get("/v1/jobs", params=params)
        assert r.status_code == 200
        return sorted(j["name"] for j in r.json())

    assert names(from_date=late["creationTime"]) == ["later"]
    assert names(end_date=early["creationTime"]) == ["early"]
    assert names(from_date=early["creationTime"], end_date=late["creationTime"]) == [
        "early",
        "later",
    ]
    assert names(from_date="2999-01-01T00:00:00Z") == []


def test_delete_a_final_job_removes_it_but_keeps_its_history(api: Api) -> None:
    job = api.create_job()
    stage = api.add_stage(job["id"])
    (task,) = api.add_tasks(stage["id"])
    api.run_task(stage["type"])

    r = api.http.delete(f"/v1/jobs/{job['id']}")

    assert (r.status_code, r.json()) == (200, {"code": "JOB_DELETED_SUCCESSFULLY"})
    assert api.http.get(f"/v1/jobs/{job['id']}").status_code == 404
    assert api.http.get(f"/v1/jobs/{job['id']}/stages").status_code == 404
    assert api.http.get(f"/v1/stages/{stage['id']}").status_code == 404
    assert api.http.get(f"/v1/tasks/{task['id']}").status_code == 404
    assert api.http.get("/v1/jobs").json() == []
    assert api.http.get("/v1/stages").json() == []
    assert api.http.get("/v1/tasks").json() == []
    assert api.events_of(job["id"])[0] == "JobCreated"
    assert api.events_of(job["id"])[-1] == "JobDeleted"
    assert api.events_of(task["id"])[-1] == "TaskCompleted"
    with api.nothing_written():
        again = api.http.delete(f"/v1/jobs/{job['id']}")
    assert (again.status_code, again.json()["code"]) == (404, "JOB_NOT_FOUND")


def test_a_report_for_a_task_of_a_deleted_job_is_not_found(api: Api) -> None:
    job = api.create_job()
    stage = api.add_stage(job["id"])
    api.add_tasks(stage["id"])
    task = api.dequeue(stage["type"])
    api.set_job_status(job["id"], "ABORTED")
    api.http.delete(f"/v1/jobs/{job['id']}")

    with api.nothing_written():
        r = api.http.put(f"/v1/tasks/{task['id']}/status", json={"status": "COMPLETED"})

    assert (r.status_code, r.json()) == (
        404,
        {"message": "TASK_NOT_FOUND", "code": "TASK_NOT_FOUND"},
    )


@pytest.mark.parametrize("status", ["FAILED", "ABORTED"])
def test_failed_and_aborted_jobs_can_be_deleted(api: Api, status: str) -> None:
    job = api.job_in(status)

    r = api.http.delete(f"/v1/jobs/{job['id']}")

    assert (r.status_code, r.json()) == (200, {"code": "JOB_DELETED_SUCCESSFULLY"})
    assert api.http.get(f"/v1/jobs/{job['id']}").status_code == 404


def test_user_metadata_is_replaced_not_merged(api: Api) -> None:
    job = api.create_job(userMetadata={"b": 2})

    r = api.http.patch(f"/v1/jobs/{job['id']}/user-metadata", json={"a": 1})
    replaced = api.job(job["id"])
    api.http.patch(f"/v1/jobs/{job['id']}/user-metadata", json={})
    cleared = api.job(job["id"])

    assert (r.status_code, r.json()) == (200, {"code": "JOB_MODIFIED_SUCCESSFULLY"})
    assert replaced["userMetadata"] == {"a": 1}
    assert parse_time(replaced["updateTime"]) > parse_time(job["updateTime"])
    assert (replaced["status"], replaced["percentage"]) == ("PENDING", 0)
    assert cleared["userMetadata"] == {}


@pytest.mark.parametrize("status", ["COMPLETED", "FAILED", "ABORTED"])
def test_final_jobs_take_new_user_metadata_and_priority(api: Api, status: str) -> None:
    job = api.job_in(status)

    metadata = api.http.patch(f"/v1/jobs/{job['id']}/user-metadata", json={"note": "late"})
    priority = api.http.patch(f"/v1/jobs/{job['id']}/priority", json={"priority": "VERY_HIGH"})

    assert (metadata.status_code, metadata.json()) == (200, {"code": "JOB_MODIFIED_SUCCESSFULLY"})
    assert (priority.status_code, priority.json()) == (200, {"code": "JOB_MODIFIED_SUCCESSFULLY"})
    after = api.job(job["id"])
    assert (after["userMetadata"], after["priority"], after["status"]) == (
        {"note": "late"},
        "VERY_HIGH",
        status,
    )


def test_priority_change(api: Api) -> None:
    job = api.create_job()

    r = api.http.patch(f"/v1/jobs/{job['id']}/priority", json={"priority": "LOW"})

    assert (r.status_code, r.json()) == (200, {"code": "JOB_MODIFIED_SUCCESSFULLY"})
    assert api.job(job["id"])["priority"] == "LOW"


def test_stages_of_a_job_are_ordered_by_order(api: Api) -> None:
    job = api.create_job()
    other = api.create_job()
    added = [api.add_stage(job["id"], type=t) for t in ("c", "a", "b")]
    api.add_stage(other["id"])

    r = api.http.get(f"/v1/jobs/{job['id']}/stages")

    assert r.status_code == 200
    assert [(s["order"], s["id"]) for s in r.json()] == [
        (i + 1, s["id"]) for i, s in enumerate(added)
    ]
    assert api.http.get(f"/v1/jobs/{api.create_job()['id']}/stages").json() == []


def test_stage_status_on_creation(api: Api) -> None:
    job = api.create_job()

    first = api.add_stage(job["id"])
    second = api.add_stage(job["id"])
    waiting = api.add_stage(job["id"], startAsWaiting=True)
    waiting_first = api.add_stage(api.create_job()["id"], startAsWaiting=True)

    assert [s["order"] for s in (first, second, waiting)] == [1, 2, 3]
    assert [s["status"] for s in (first, second, waiting, waiting_first)] == [
        "PENDING",
        "CREATED",
        "WAITING",
        "WAITING",
    ]


def test_stages_can_be_added_to_a_paused_or_running_job(api: Api) -> None:
    paused, running = api.job_in("PAUSED"), api.job_in("IN_PROGRESS")

    a = api.http.post(f"/v1/jobs/{paused['id']}/stage", json={"type": "t", "data": {}})
    b = api.http.post(f"/v1/jobs/{running['id']}/stage", json={"type": "t", "data": {}})

    assert (a.status_code, a.json()["status"]) == (201, "PENDING")
    assert (b.status_code, b.json()["status"], b.json()["order"]) == (201, "CREATED", 2)


# -- stages -------------------------------------------------------------------------------


def test_find_stages_filters_by_job_type_and_status(api: Api) -> None:
    one, two = api.create_job(), api.create_job()
    a = api.add_stage(one["id"], type="tiles")
    b = api.add_stage(one["id"], type="merge")
    c = api.add_stage(two["id"], type="tiles")

    def ids(**params: Any) -> set[str]:
        r = api.http.get("/v1/stages", params=params)
        assert r.status_code == 200
        return {s["id"] for s in r.json()}

    assert ids() == {a["id"], b["id"], c["id"]}
    assert ids(job_id=one["id"]) == {a["id"], b["id"]}
    assert ids(stage_type="tiles") == {a["id"], c["id"]}
    assert ids(stage_operation_status="CREATED") == {b["id"]}
    assert ids(job_id=two["id"], stage_type="tiles", stage_operation_status="PENDING") == {c["id"]}
    assert ids(stage_type="none") == set()


def test_stage_summary(api: Api) -> None:
    _, stage, _ = workflow(api)
    api.dequeue(stage["type"])

    r = api.http.get(f"/v1/stages/{stage['id']}/summary")

    assert r.status_code == 200
    assert r.json() == {**EMPTY_SUMMARY, "pending": 1, "inProgress": 1, "total": 2}


def test_stage_user_metadata_is_replaced_in_any_status(api: Api) -> None:
    job = api.create_job()
    stage = api.add_stage(job["id"], userMetadata={"b": 2})
    api.set_job_status(job["id"], "ABORTED")

    r = api.http.patch(f"/v1/stages/{stage['id']}/user-metadata", json={"a": 1})

    assert (r.status_code, r.json()) == (200, {"code": "STAGE_MODIFIED_SUCCESSFULLY"})
    after = api.stage(stage["id"])
    assert (after["userMetadata"], after["status"]) == ({"a": 1}, "ABORTED")


def test_tasks_of_a_stage(api: Api) -> None:
    _, stage, tasks = workflow(api)
    other = api.add_stage(api.create_job()["id"])
    api.add_tasks(other["id"])

    r = api.http.get(f"/v1/stages/{stage['id']}/tasks")
    empty = api.http.get(f"/v1/stages/{api.add_stage(api.create_job()['id'])['id']}/tasks")

    assert r.status_code == 200
    assert sorted(t["id"] for t in r.json()) == sorted(t["id"] for t in tasks)
    assert (empty.status_code, empty.json()) == (200, [])


def test_tasks_can_be_added_to_created_and_waiting_stages(api: Api) -> None:
    job = api.create_job()
    api.add_stage(job["id"])
    created = api.add_stage(job["id"])
    waiting = api.add_stage(job["id"], startAsWaiting=True)

    a = api.http.post(f"/v1/stages/{created['id']}/tasks", json=[{"data": {}}])
    b = api.http.post(f"/v1/stages/{waiting['id']}/tasks", json=[{"data": {}}])

    assert (a.status_code, b.status_code) == (201, 201)
    assert api.stage(created["id"])["summary"]["pending"] == 1
    assert api.stage(waiting["id"])["summary"]["pending"] == 1


def test_adding_tasks_updates_the_summary(api: Api) -> None:
    _, stage, _ = workflow(api)

    api.add_tasks(stage["id"], count=3)

    after = api.stage(stage["id"])
    assert after["summary"] == {**EMPTY_SUMMARY, "pending": 5, "total": 5}
    assert (after["status"], after["percentage"]) == ("PENDING", 0)


def test_many_tasks_in_one_request(api: Api) -> None:
    job = api.create_job()
    stage = api.add_stage(job["id"])

    tasks = api.add_tasks(stage["id"], count=250)

    assert len({t["id"] for t in tasks}) == 250
    assert [t["data"] for t in tasks] == [{"i": i} for i in range(250)]
    assert api.stage(stage["id"])["summary"] == {**EMPTY_SUMMARY, "pending": 250, "total": 250}
    assert len(api.http.get(f"/v1/stages/{stage['id']}/tasks").json()) == 250


def test_dequeue_answers_the_task_in_progress(api: Api) -> None:
    _, stage, tasks = workflow(api)

    r = api.http.patch(f"/v1/stages/{stage['type']}/tasks/dequeue")

    task = r.json()
    assert r.status_code == 200
    assert task["id"] == tasks[0]["id"]
    assert (task["status"], task["attempts"]) == ("IN_PROGRESS", 0)
    assert task_keys(task) == TASK_FIELDS | {"startTime"}
    assert api.task(task["id"]) == task


# -- tasks --------------------------------------------------------------------------------


def test_find_tasks_filters(api: Api) -> None:
    job = api.create_job()
    s1 = api.add_stage(job["id"], type="tiles")
    s2 = api.add_stage(api.create_job()["id"], type="merge")
    a, b = api.add_tasks(s1["id"], count=2)
    (c,) = api.add_tasks(s2["id"])
    api.dequeue("tiles")

    def ids(**params: Any) -> set[str]:
        r = api.http.get("/v1/tasks", params=params)
        assert r.status_code == 200
        return {t["id"] for t in r.json()}

    assert ids() == {a["id"], b["id"], c["id"]}
    assert ids(stage_id=s1["id"]) == {a["id"], b["id"]}
    assert ids(stage_type="merge") == {c["id"]}
    assert ids(status="IN_PROGRESS") == {a["id"]}
    assert ids(status="PENDING", stage_type="tiles") == {b["id"]}
    assert ids(from_date=c["creationTime"]) == {c["id"]}
    assert ids(end_date=b["creationTime"]) == {a["id"], b["id"]}
    assert ids(status="FAILED") == set()


def test_task_user_metadata_is_replaced_in_any_status(api: Api) -> None:
    job = api.create_job()
    stage = api.add_stage(job["id"])
    (task,) = api.add_tasks(stage["id"], userMetadata={"b": 2})
    api.run_task(stage["type"])

    r = api.http.patch(f"/v1/tasks/{task['id']}/user-metadata", json={"a": 1})

    assert (r.status_code, r.json()) == (200, {"code": "TASK_MODIFIED_SUCCESSFULLY"})
    after = api.task(task["id"])
    assert (after["userMetadata"], after["status"]) == ({"a": 1}, "COMPLETED")
    assert parse_time(after["updateTime"]) > parse_time(task["updateTime"])


def test_task_report_answers_the_whole_task(api: Api) -> None:
    _, stage, _ = workflow(api)
    task = api.dequeue(stage["type"])

    r = api.http.put(f"/v1/tasks/{task['id']}/status", json={"status": "COMPLETED"})

    assert r.status_code == 200
    assert task_keys(r.json()) == TASK_FIELDS | TIMES
    assert r.json()["status"] == "COMPLETED"


# -- transport habits, health and docs ----------------------------------------------------


def test_json_content_type_without_a_body_is_fine(api: Api) -> None:
    json_header = {"Content-Type": "application/json"}
    _, stage, _ = workflow(api)
    done = api.job_in("COMPLETED")

    listed = api.http.get("/v1/jobs", headers=json_header)
    one = api.http.get(f"/v1/stages/{stage['id']}", headers=json_header)
    dequeued = api.http.patch(f"/v1/stages/{stage['type']}/tasks/dequeue", headers=json_header)
    deleted = api.http.delete(f"/v1/jobs/{done['id']}", headers=json_header)

    assert [r.status_code for r in (listed, one, dequeued, deleted)] == [200, 200, 200, 200]
    assert dequeued.json()["status"] == "IN_PROGRESS"


def test_liveness(api: Api) -> None:
    r = api.http.get("/liveness")

    assert r.status_code == 200


def test_docs_and_openapi(api: Api) -> None:
    docs = api.http.get("/docs")
    spec = api.http.get("/openapi.json")

    assert docs.status_code == 200
    assert "text/html" in docs.headers["content-type"]
    assert spec.status_code == 200
    paths = spec.json()["paths"]
    for path in (
        "/v1/jobs",
        "/v1/jobs/{jobId}",
        "/v1/jobs/{jobId}/user-metadata",
        "/v1/jobs/{jobId}/priority",
        "/v1/jobs/{jobId}/status",
        "/v1/jobs/{jobId}/stages",
        "/v1/jobs/{jobId}/stage",
        "/v1/stages",
        "/v1/stages/{stageId}",
        "/v1/stages/{stageId}/summary",
        "/v1/stages/{stageId}/user-metadata",
        "/v1/stages/{stageId}/status",
        "/v1/stages/{stageId}/tasks",
        "/v1/stages/{stageType}/tasks/dequeue",
        "/v1/tasks",
        "/v1/tasks/{taskId}",
        "/v1/tasks/{taskId}/user-metadata",
        "/v1/tasks/{taskId}/status",
    ):
        assert path in paths


TASK_OUT = {"$ref": "#/components/schemas/TaskOut"}


@pytest.mark.parametrize(
    ("method", "path", "schema"),
    [
        (  # one task, or with `count` an array of them
            "patch",
            "/v1/stages/{stageType}/tasks/dequeue",
            {"oneOf": [TASK_OUT, {"type": "array", "items": TASK_OUT}]},
        ),
        ("put", "/v1/tasks/{taskId}/status", TASK_OUT),
        ("post", "/v1/tasks/{taskId}/heartbeat", {"$ref": "#/components/schemas/HeartbeatOut"}),
    ],
)
def test_a_hot_route_that_serialises_its_own_answer_still_documents_its_shape(
    api: Api, method: str, path: str, schema: dict[str, Any]
) -> None:
    spec = api.http.get("/openapi.json").json()

    answer = spec["paths"][path][method]["responses"]["200"]["content"]["application/json"]
    assert answer["schema"] == schema


def test_no_other_route_takes_the_worker_routes_requests(
    client: TestClient,
) -> None:
    task = UUID(int=1)
    samples = {  # each worker route's requests, with path values of every shape it takes
        stages.dequeue_task: [
            ("PATCH", "/v1/stages/tiles/tasks/dequeue"),
            ("PATCH", "/v1/stages/a/b/tasks/dequeue"),  # a type with "/" (%2F)
        ],
        tasks.update_task_status: [("PUT", f"/v1/tasks/{task}/status")],
        tasks.update_task_statuses: [("PUT", "/v1/tasks/status")],
        tasks.heartbeat: [("POST", f"/v1/tasks/{task}/heartbeat")],
    }
    routes = client.app.router.routes  # type: ignore[attr-defined]

    for route in routes:
        for endpoint, requests in samples.items():
            for method, path in requests:
                scope = {"type": "http", "method": method, "path": path, "root_path": ""}
                full = route.matches(scope)[0] == Match.FULL
                assert full == (getattr(route, "endpoint", None) is endpoint), (route, path)
