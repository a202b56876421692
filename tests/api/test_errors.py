"""Every error the v1 API answers: status, `code` and (where the rules fix it) `message`.

Each refused request must leave the event log where it was.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from uuid import uuid4

import pytest

from .conftest import TRACE, Api

MISSING = str(uuid4())
BAD_TRACE = "00-xyz-123-01"
LONG_TYPE = "t" * 51
ONE_MB = 1024 * 1024

Request = tuple[str, str, dict[str, Any]]


@dataclass(frozen=True)
class Case:
    id: str
    request: Callable[[Api], Request]
    status: int
    code: str
    message: str | None = None  # None: any message
    marks: list[Any] = field(default_factory=list)


def job_id(api: Api) -> str:
    return str(api.create_job()["id"])


def stage_id(api: Api) -> str:
    return str(api.add_stage(job_id(api))["id"])


def task_id(api: Api) -> str:
    return str(api.add_tasks(stage_id(api))[0]["id"])


def enum_message(where: str, *allowed: str) -> str:
    return f"{where} must be equal to one of the allowed values: {', '.join(allowed)}"


PRIORITIES = ("VERY_HIGH", "HIGH", "MEDIUM", "LOW", "VERY_LOW")
VALIDATION = [
    # -- path parameters
    Case(
        "bad-job-uuid",
        lambda a: ("GET", "/v1/jobs/not-a-uuid", {}),
        400,
        "VALIDATION_ERROR",
        'request/params/jobId must match format "uuid"',
    ),
    Case(
        "bad-job-uuid-delete",
        lambda a: ("DELETE", "/v1/jobs/123", {}),
        400,
        "VALIDATION_ERROR",
        'request/params/jobId must match format "uuid"',
    ),
    Case(
        "bad-stage-uuid",
        lambda a: ("GET", "/v1/stages/not-a-uuid", {}),
        400,
        "VALIDATION_ERROR",
        'request/params/stageId must match format "uuid"',
    ),
    Case(
        "bad-stage-uuid-tasks",
        lambda a: ("POST", "/v1/stages/x/tasks", {"json": [{"data": {}}]}),
        400,
        "VALIDATION_ERROR",
        'request/params/stageId must match format "uuid"',
    ),
    Case(
        "bad-task-uuid",
        lambda a: ("GET", "/v1/tasks/not-a-uuid", {}),
        400,
        "VALIDATION_ERROR",
        'request/params/taskId must match format "uuid"',
    ),
    Case(
        "bad-task-uuid-status",
        lambda a: ("PUT", "/v1/tasks/nope/status", {"json": {"status": "COMPLETED"}}),
        400,
        "VALIDATION_ERROR",
        'request/params/taskId must match format "uuid"',
    ),
    Case(
        "dequeue-type-too-long",
        lambda a: ("PATCH", f"/v1/stages/{LONG_TYPE}/tasks/dequeue", {}),
        400,
        "VALIDATION_ERROR",
    ),
    # -- unknown query parameters, on every route family
    Case(
        "unknown-query-jobs",
        lambda a: ("GET", "/v1/jobs?x=1", {}),
        400,
        "VALIDATION_ERROR",
        "Unknown query parameter 'x'",
    ),
    Case(
        "unknown-query-job",
        lambda a: ("GET", f"/v1/jobs/{MISSING}?x=1", {}),
        400,
        "VALIDATION_ERROR",
        "Unknown query parameter 'x'",
    ),
    Case(
        "unknown-query-stages",
        lambda a: ("GET", "/v1/stages?x=1", {}),
        400,
        "VALIDATION_ERROR",
        "Unknown query parameter 'x'",
    ),
    Case(
        "unknown-query-tasks",
        lambda a: ("GET", "/v1/tasks?x=1", {}),
        400,
        "VALIDATION_ERROR",
        "Unknown query parameter 'x'",
    ),
    Case(
        "unknown-query-create-job",
        lambda a: ("POST", "/v1/jobs?x=1", {"json": {"name": "ab", "data": {}}}),
        400,
        "VALIDATION_ERROR",
        "Unknown query parameter 'x'",
    ),
    Case(
        "unknown-query-dequeue",
        lambda a: ("PATCH", "/v1/stages/t/tasks/dequeue?x=1", {}),
        400,
        "VALIDATION_ERROR",
        "Unknown query parameter 'x'",
    ),
    Case(
        "unknown-query-report",
        lambda a: ("PUT", f"/v1/tasks/{task_id(a)}/status?x=1", {"json": {"status": "FAILED"}}),
        400,
        "VALIDATION_ERROR",
        "Unknown query parameter 'x'",
    ),
    # -- bad query values
    Case(
        "query-bad-priority",
        lambda a: ("GET", "/v1/jobs?priority=URGENT", {}),
        400,
        "VALIDATION_ERROR",
        enum_message("request/query/priority", *PRIORITIES),
        [],
    ),
    Case(
        "query-short-job-name",
        lambda a: ("GET", "/v1/jobs?job_name=a", {}),
        400,
        "VALIDATION_ERROR",
    ),
    Case(
        "query-bad-date",
        lambda a: ("GET", "/v1/jobs?from_date=yesterday", {}),
        400,
        "VALIDATION_ERROR",
    ),
    Case(
        "query-date-without-offset",
        lambda a: ("GET", "/v1/jobs?from_date=2026-01-01T00:00:00", {}),
        400,
        "VALIDATION_ERROR",
        None,
        [],
    ),
    Case(
        "query-state-on-jobs",
        lambda a: ("GET", "/v1/jobs?state=PENDING", {}),
        400,
        "VALIDATION_ERROR",
        "Unknown query parameter 'state'",
    ),
    Case(
        "query-bad-bool",
        lambda a: ("GET", "/v1/jobs?should_return_stages=perhaps", {}),
        400,
        "VALIDATION_ERROR",
    ),
    Case(
        "query-stage-type-too-long",
        lambda a: ("GET", f"/v1/stages?stage_type={LONG_TYPE}", {}),
        400,
        "VALIDATION_ERROR",
    ),
    Case(
        "query-bad-stage-status",
        lambda a: ("GET", "/v1/stages?stage_operation_status=DONE", {}),
        400,
        "VALIDATION_ERROR",
    ),
    Case(
        "query-bad-stage-job-id",
        lambda a: ("GET", "/v1/stages?job_id=12", {}),
        400,
        "VALIDATION_ERROR",
    ),
    Case(
        "query-task-type-too-long",
        lambda a: ("GET", f"/v1/tasks?stage_type={LONG_TYPE}", {}),
        400,
        "VALIDATION_ERROR",
    ),
    Case(
        "query-bad-task-status",
        lambda a: ("GET", "/v1/tasks?status=DONE", {}),
        400,
        "VALIDATION_ERROR",
    ),
    # -- job bodies
    Case(
        "job-missing-name",
        lambda a: ("POST", "/v1/jobs", {"json": {"data": {}}}),
        400,
        "VALIDATION_ERROR",
        "request/body must have required property 'name'",
    ),
    Case(
        "job-missing-data",
        lambda a: ("POST", "/v1/jobs", {"json": {"name": "ab"}}),
        400,
        "VALIDATION_ERROR",
        "request/body must have required property 'data'",
    ),
    Case(
        "job-name-too-short",
        lambda a: ("POST", "/v1/jobs", {"json": {"name": "a", "data": {}}}),
        400,
        "VALIDATION_ERROR",
        "request/body/name must NOT have fewer than 2 characters",
    ),
    Case(
        "job-name-too-long",
        lambda a: ("POST", "/v1/jobs", {"json": {"name": "n" * 51, "data": {}}}),
        400,
        "VALIDATION_ERROR",
        "request/body/name must NOT have more than 50 characters",
    ),
    Case(
        "job-data-not-object",
        lambda a: ("POST", "/v1/jobs", {"json": {"name": "ab", "data": [1]}}),
        400,
        "VALIDATION_ERROR",
    ),
    Case(
        "job-bad-priority",
        lambda a: ("POST", "/v1/jobs", {"json": {"name": "ab", "data": {}, "priority": "NOW"}}),
        400,
        "VALIDATION_ERROR",
    ),
    Case(
        "job-bad-traceparent",
        lambda a: (
            "POST",
            "/v1/jobs",
            {"json": {"name": "ab", "data": {}, "traceparent": BAD_TRACE}},
        ),
        400,
        "VALIDATION_ERROR",
    ),
    Case(
        "job-unknown-field",
        lambda a: ("POST", "/v1/jobs", {"json": {"name": "ab", "data": {}, "x": 1}}),
        400,
        "VALIDATION_ERROR",
    ),
    Case(
        "job-metadata-not-object",
        lambda a: ("POST", "/v1/jobs", {"json": {"name": "ab", "data": {}, "userMetadata": 3}}),
        400,
        "VALIDATION_ERROR",
    ),
    Case(
        "job-body-not-object",
        lambda a: ("POST", "/v1/jobs", {"json": [1, 2]}),
        400,
        "VALIDATION_ERROR",
    ),
    Case(
        "job-malformed-json",
        lambda a: (
            "POST",
            "/v1/jobs",
            {"content": b'{"name": "ab",', "headers": {"content-type": "application/json"}},
        ),
        400,
        "VALIDATION_ERROR",
    ),
    Case(
        "job-empty-body",
        lambda a: (
            "POST",
            "/v1/jobs",
            {"content": b"", "headers": {"content-type": "application/json"}},
        ),
        400,
        "VALIDATION_ERROR",
    ),
    # -- stage bodies
    Case(
        "stage-missing-type",
        lambda a: ("POST", f"/v1/jobs/{job_id(a)}/stage", {"json": {"data": {}}}),
        400,
        "VALIDATION_ERROR",
        "request/body must have required property 'type'",
    ),
    Case(
        "stage-missing-data",
        lambda a: ("POST", f"/v1/jobs/{job_id(a)}/stage", {"json": {"type": "t"}}),
        400,
        "VALIDATION_ERROR",
        "request/body must have required property 'data'",
    ),
    Case(
        "stage-type-too-long",
        lambda a: (
            "POST",
            f"/v1/jobs/{job_id(a)}/stage",
            {"json": {"type": LONG_TYPE, "data": {}}},
        ),
        400,
        "VALIDATION_ERROR",
        "request/body/type must NOT have more than 50 characters",
    ),
    Case(
        "stage-type-empty",
        lambda a: ("POST", f"/v1/jobs/{job_id(a)}/stage", {"json": {"type": "", "data": {}}}),
        400,
        "VALIDATION_ERROR",
        "request/body/type must NOT have fewer than 1 characters",
    ),
    Case(
        "stage-unknown-field",
        lambda a: (
            "POST",
            f"/v1/jobs/{job_id(a)}/stage",
            {"json": {"type": "t", "data": {}, "x": 1}},
        ),
        400,
        "VALIDATION_ERROR",
    ),
    Case(
        "stage-bad-traceparent",
        lambda a: (
            "POST",
            f"/v1/jobs/{job_id(a)}/stage",
            {"json": {"type": "t", "data": {}, "traceparent": BAD_TRACE}},
        ),
        400,
        "VALIDATION_ERROR",
    ),
    Case(
        "stage-metadata-not-object",
        lambda a: (
            "POST",
            f"/v1/jobs/{job_id(a)}/stage",
            {"json": {"type": "t", "data": {}, "userMetadata": "x"}},
        ),
        400,
        "VALIDATION_ERROR",
    ),
    # -- task bodies
    Case(
        "tasks-empty-array",
        lambda a: ("POST", f"/v1/stages/{stage_id(a)}/tasks", {"json": []}),
        400,
        "VALIDATION_ERROR",
    ),
    Case(
        "tasks-not-array",
        lambda a: ("POST", f"/v1/stages/{stage_id(a)}/tasks", {"json": {"data": {}}}),
        400,
        "VALIDATION_ERROR",
    ),
    Case(
        "tasks-missing-data",
        lambda a: ("POST", f"/v1/stages/{stage_id(a)}/tasks", {"json": [{"maxAttempts": 2}]}),
        400,
        "VALIDATION_ERROR",
        "request/body/0 must have required property 'data'",
    ),
    Case(
        "tasks-unknown-field",
        lambda a: ("POST", f"/v1/stages/{stage_id(a)}/tasks", {"json": [{"data": {}, "x": 1}]}),
        400,
        "VALIDATION_ERROR",
    ),
    Case(
        "tasks-zero-attempts",
        lambda a: (
            "POST",
            f"/v1/stages/{stage_id(a)}/tasks",
            {"json": [{"data": {}, "maxAttempts": 0}]},
        ),
        400,
        "VALIDATION_ERROR",
    ),
    Case(
        "tasks-bad-traceparent",
        lambda a: (
            "POST",
            f"/v1/stages/{stage_id(a)}/tasks",
            {"json": [{"data": {}}, {"data": {}, "traceparent": BAD_TRACE}]},
        ),
        400,
        "VALIDATION_ERROR",
    ),
    # -- status, priority and metadata bodies
    Case(
        "job-status-not-allowed",
        lambda a: ("PUT", f"/v1/jobs/{job_id(a)}/status", {"json": {"status": "COMPLETED"}}),
        400,
        "VALIDATION_ERROR",
        enum_message("request/body/status", "PENDING", "PAUSED", "ABORTED"),
        [],
    ),
    Case(
        "job-status-missing",
        lambda a: ("PUT", f"/v1/jobs/{job_id(a)}/status", {"json": {}}),
        400,
        "VALIDATION_ERROR",
        "request/body must have required property 'status'",
    ),
    Case(
        "stage-status-not-allowed",
        lambda a: ("PUT", f"/v1/stages/{stage_id(a)}/status", {"json": {"status": "IN_PROGRESS"}}),
        400,
        "VALIDATION_ERROR",
        "request/body/status must be equal to one of the allowed values: PENDING",
        [],
    ),
    Case(
        "task-status-not-allowed",
        lambda a: ("PUT", f"/v1/tasks/{task_id(a)}/status", {"json": {"status": "RETRIED"}}),
        400,
        "VALIDATION_ERROR",
        enum_message("request/body/status", "COMPLETED", "FAILED", "DELEGATED"),
        [],
    ),
    Case(
        "job-status-unknown-field",
        lambda a: ("PUT", f"/v1/jobs/{job_id(a)}/status", {"json": {"status": "PAUSED", "x": 1}}),
        400,
        "VALIDATION_ERROR",
    ),
    Case(
        "priority-not-allowed",
        lambda a: ("PATCH", f"/v1/jobs/{job_id(a)}/priority", {"json": {"priority": "URGENT"}}),
        400,
        "VALIDATION_ERROR",
        enum_message("request/body/priority", *PRIORITIES),
        [],
    ),
    Case(
        "job-metadata-array",
        lambda a: ("PATCH", f"/v1/jobs/{job_id(a)}/user-metadata", {"json": [1]}),
        400,
        "VALIDATION_ERROR",
    ),
    Case(
        "job-metadata-string",
        lambda a: ("PATCH", f"/v1/jobs/{job_id(a)}/user-metadata", {"json": "meta"}),
        400,
        "VALIDATION_ERROR",
    ),
    Case(
        "job-metadata-malformed",
        lambda a: (
            "PATCH",
            f"/v1/jobs/{job_id(a)}/user-metadata",
            {"content": b"{oops", "headers": {"content-type": "application/json"}},
        ),
        400,
        "VALIDATION_ERROR",
    ),
    Case(
        "stage-metadata-array",
        lambda a: ("PATCH", f"/v1/stages/{stage_id(a)}/user-metadata", {"json": [1]}),
        400,
        "VALIDATION_ERROR",
    ),
    Case(
        "task-metadata-number",
        lambda a: ("PATCH", f"/v1/tasks/{task_id(a)}/user-metadata", {"json": 7}),
        400,
        "VALIDATION_ERROR",
    ),
]


def not_found(code: str) -> tuple[str, str]:
    return code, code


NOT_FOUND = [
    Case("get-job", lambda a: ("GET", f"/v1/jobs/{MISSING}", {}), 404, *not_found("JOB_NOT_FOUND")),
    Case(
        "delete-job",
        lambda a: ("DELETE", f"/v1/jobs/{MISSING}", {}),
        404,
        *not_found("JOB_NOT_FOUND"),
    ),
    Case(
        "job-metadata",
        lambda a: ("PATCH", f"/v1/jobs/{MISSING}/user-metadata", {"json": {}}),
        404,
        *not_found("JOB_NOT_FOUND"),
    ),
    Case(
        "job-priority",
        lambda a: ("PATCH", f"/v1/jobs/{MISSING}/priority", {"json": {"priority": "MEDIUM"}}),
        404,
        *not_found("JOB_NOT_FOUND"),
    ),
    Case(
        "job-status",
        lambda a: ("PUT", f"/v1/jobs/{MISSING}/status", {"json": {"status": "PAUSED"}}),
        404,
        *not_found("JOB_NOT_FOUND"),
    ),
    Case(
        "job-stages",
        lambda a: ("GET", f"/v1/jobs/{MISSING}/stages", {}),
        404,
        *not_found("JOB_NOT_FOUND"),
    ),
    Case(
        "add-stage",
        lambda a: ("POST", f"/v1/jobs/{MISSING}/stage", {"json": {"type": "t", "data": {}}}),
        404,
        *not_found("JOB_NOT_FOUND"),
    ),
    Case(
        "get-stage",
        lambda a: ("GET", f"/v1/stages/{MISSING}", {}),
        404,
        *not_found("STAGE_NOT_FOUND"),
    ),
    Case(
        "stage-summary",
        lambda a: ("GET", f"/v1/stages/{MISSING}/summary", {}),
        404,
        *not_found("STAGE_NOT_FOUND"),
    ),
    Case(
        "stage-metadata",
        lambda a: ("PATCH", f"/v1/stages/{MISSING}/user-metadata", {"json": {}}),
        404,
        *not_found("STAGE_NOT_FOUND"),
    ),
    Case(
        "stage-status",
        lambda a: ("PUT", f"/v1/stages/{MISSING}/status", {"json": {"status": "PENDING"}}),
        404,
        *not_found("STAGE_NOT_FOUND"),
    ),
    Case(
        "stage-tasks",
        lambda a: ("GET", f"/v1/stages/{MISSING}/tasks", {}),
        404,
        *not_found("STAGE_NOT_FOUND"),
    ),
    Case(
        "add-tasks",
        lambda a: ("POST", f"/v1/stages/{MISSING}/tasks", {"json": [{"data": {}}]}),
        404,
        *not_found("STAGE_NOT_FOUND"),
    ),
    Case(
        "get-task", lambda a: ("GET", f"/v1/tasks/{MISSING}", {}), 404, *not_found("TASK_NOT_FOUND")
    ),
    Case(
        "task-metadata",
        lambda a: ("PATCH", f"/v1/tasks/{MISSING}/user-metadata", {"json": {}}),
        404,
        *not_found("TASK_NOT_FOUND"),
    ),
    Case(
        "task-status",
        lambda a: ("PUT", f"/v1/tasks/{MISSING}/status", {"json": {"status": "COMPLETED"}}),
        404,
        *not_found("TASK_NOT_FOUND"),
    ),
    Case(
        "dequeue-unknown-type",
        lambda a: ("PATCH", "/v1/stages/nobody/tasks/dequeue", {}),
        404,
        *not_found("TASK_NOT_FOUND"),
    ),
    Case(
        "unknown-route",
        lambda a: ("GET", "/v1/nothing", {}),
        404,
        "ROUTE_NOT_FOUND",
        "not found: no route GET /v1/nothing (/docs lists them)",
    ),
    Case(
        "unknown-route-root",
        lambda a: ("GET", "/", {}),
        404,
        "ROUTE_NOT_FOUND",
        "not found: no route GET / (/docs lists them)",
    ),
    Case(
        "unknown-route-long",
        lambda a: ("GET", "/v1/" + "x" * 500, {}),
        404,
        "ROUTE_NOT_FOUND",
        f"not found: no route GET /v1/{'x' * 196}… (/docs lists them)",
    ),
    Case(
        "unknown-route-singular",
        lambda a: ("POST", "/v1/job", {"json": {"name": "ab", "data": {}}}),
        404,
        "ROUTE_NOT_FOUND",
        "not found: no route POST /v1/job (/docs lists them)",
    ),
]


def dequeue_waiting(api: Api) -> Request:
    stage = api.add_stage(job_id(api), startAsWaiting=True)
    api.add_tasks(stage["id"])
    return "PATCH", f"/v1/stages/{stage['type']}/tasks/dequeue", {}


def dequeue_created(api: Api) -> Request:
    job = api.create_job()
    api.add_tasks(api.add_stage(job["id"])["id"])
    second = api.add_stage(job["id"])
    api.add_tasks(second["id"])
    return "PATCH", f"/v1/stages/{second['type']}/tasks/dequeue", {}


def dequeue_paused(api: Api) -> Request:
    job = api.create_job()
    stage = api.add_stage(job["id"])
    api.add_tasks(stage["id"])
    api.set_job_status(job["id"], "PAUSED")
    return "PATCH", f"/v1/stages/{stage['type']}/tasks/dequeue", {}


def dequeue_aborted(api: Api) -> Request:
    job = api.create_job()
    stage = api.add_stage(job["id"])
    api.add_tasks(stage["id"])
    api.set_job_status(job["id"], "ABORTED")
    return "PATCH", f"/v1/stages/{stage['type']}/tasks/dequeue", {}


def dequeue_drained(api: Api) -> Request:
    stage = api.add_stage(job_id(api))
    api.add_tasks(stage["id"])
    api.dequeue(stage["type"])
    return "PATCH", f"/v1/stages/{stage['type']}/tasks/dequeue", {}


def delete_in(status: str) -> Callable[[Api], Request]:
    return lambda a: ("DELETE", f"/v1/jobs/{a.job_in(status)['id']}", {})


def add_stage_to(status: str) -> Callable[[Api], Request]:
    return lambda a: (
        "POST",
        f"/v1/jobs/{a.job_in(status)['id']}/stage",
        {"json": {"type": "late", "data": {}}},
    )


def add_tasks_to_stage_of_job(status: str) -> Callable[[Api], Request]:
    def request(api: Api) -> Request:
        job = api.job_in(status)
        (stage,) = api.http.get(f"/v1/jobs/{job['id']}/stages").json()
        return "POST", f"/v1/stages/{stage['id']}/tasks", {"json": [{"data": {}}]}

    return request


def add_tasks_to_in_progress(api: Api) -> Request:
    stage = api.add_stage(job_id(api))
    api.add_tasks(stage["id"], count=2)
    api.dequeue(stage["type"])
    return "POST", f"/v1/stages/{stage['id']}/tasks", {"json": [{"data": {}}]}


def add_tasks_to_aborted(api: Api) -> Request:
    job = api.create_job()
    stage = api.add_stage(job["id"])
    api.set_job_status(job["id"], "ABORTED")
    return "POST", f"/v1/stages/{stage['id']}/tasks", {"json": [{"data": {}}]}


STAGE_FINISHED = ("STAGE_IN_FINITE_STATE", "STAGE_ALREADY_FINISHED_TASKS_ERROR")
BUSINESS = [
    Case("dequeue-waiting-stage", dequeue_waiting, 404, *not_found("TASK_NOT_FOUND")),
    Case("dequeue-created-stage", dequeue_created, 404, *not_found("TASK_NOT_FOUND")),
    Case("dequeue-paused-job", dequeue_paused, 404, *not_found("TASK_NOT_FOUND")),
    Case("dequeue-aborted-job", dequeue_aborted, 404, *not_found("TASK_NOT_FOUND")),
    Case("dequeue-drained", dequeue_drained, 404, *not_found("TASK_NOT_FOUND")),
    *[
        Case(f"delete-{s.lower()}-job", delete_in(s), 400, *not_found("JOB_NOT_IN_FINITE_STATE"))
        for s in ("PENDING", "IN_PROGRESS", "PAUSED")
    ],
    *[
        Case(
            f"add-stage-to-{s.lower()}-job",
            add_stage_to(s),
            400,
            "JOB_IN_FINITE_STATE",
            "JOB_ALREADY_FINISHED_STAGES_ERROR",
        )
        for s in ("COMPLETED", "FAILED", "ABORTED")
    ],
    Case(
        "add-tasks-to-completed-stage", add_tasks_to_stage_of_job("COMPLETED"), 400, *STAGE_FINISHED
    ),
    Case("add-tasks-to-failed-stage", add_tasks_to_stage_of_job("FAILED"), 400, *STAGE_FINISHED),
    Case("add-tasks-to-aborted-stage", add_tasks_to_aborted, 400, *STAGE_FINISHED),
    Case(
        "add-tasks-to-in-progress-stage",
        add_tasks_to_in_progress,
        400,
        "NOT_ALLOWED_TO_ADD_TASKS_TO_IN_PROGRESS_STAGE",
        "ADD_TASK_NOT_ALLOWED",
    ),
]

CASES = [*VALIDATION, *NOT_FOUND, *BUSINESS]


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id, marks=c.marks) for c in CASES])
def test_error(api: Api, case: Case) -> None:
    method, url, kwargs = case.request(api)

    with api.nothing_written():
        r = api.http.request(method, url, **kwargs)

    assert r.status_code == case.status, r.text
    body = r.json()
    assert set(body) == {"message", "code"}
    assert body["code"] == case.code
    if case.message is not None:
        assert body["message"] == case.message
    assert isinstance(body["message"], str)
    assert body["message"]


def test_bad_task_traceparent_names_its_index(api: Api) -> None:
    stage = api.add_stage(job_id(api))

    with api.nothing_written():
        r = api.http.post(
            f"/v1/stages/{stage['id']}/tasks",
            json=[{"data": {}, "traceparent": TRACE}, {"data": {}, "traceparent": BAD_TRACE}],
        )

    assert (r.status_code, r.json()["code"]) == (400, "VALIDATION_ERROR")
    assert r.json()["message"].startswith("request/body/1/traceparent")


def test_a_body_over_one_megabyte_is_refused(api: Api) -> None:
    body = b'{"name": "big", "data": {"blob": "' + b"x" * ONE_MB + b'"}}'

    with api.nothing_written():
        r = api.http.post("/v1/jobs", content=body, headers={"content-type": "application/json"})

    assert r.status_code == 413
    assert set(r.json()) == {"message", "code"}


def test_a_chunked_body_over_one_megabyte_is_refused(api: Api) -> None:
    def chunks() -> Any:
        yield b'{"name": "big", "data": {"blob": "'
        for _ in range(11):
            yield b"x" * (100 * 1024)
        yield b'"}}'

    with api.nothing_written():
        r = api.http.post(
            "/v1/jobs", content=chunks(), headers={"content-type": "application/json"}
        )

    assert r.status_code == 413
    assert set(r.json()) == {"message", "code"}


def test_a_body_just_under_one_megabyte_is_accepted(api: Api) -> None:
    head, tail = b'{"name": "big", "data": {"blob": "', b'"}}'
    body = head + b"x" * (ONE_MB - len(head) - len(tail)) + tail

    r = api.http.post("/v1/jobs", content=body, headers={"content-type": "application/json"})

    assert len(body) == ONE_MB
    assert r.status_code == 201


def test_same_priority_answers_204_with_a_reason_and_no_body(api: Api) -> None:
    job = api.create_job(priority="HIGH")

    with api.nothing_written():
        r = api.http.patch(f"/v1/jobs/{job['id']}/priority", json={"priority": "HIGH"})

    assert r.status_code == 204
    assert r.headers["Reason"] == "PRIORITY_CANNOT_BE_UPDATED_TO_SAME_VALUE"
    assert r.content == b""


def test_no_error_ever_answers_5xx_for_stage_bodies_with_extra_fields(api: Api) -> None:
    job = api.create_job()

    with api.nothing_written():
        r = api.http.post(
            f"/v1/jobs/{job['id']}/stage", json={"type": "t", "data": {}, "summary": {"total": 9}}
        )

    assert (r.status_code, r.json()["code"]) == (400, "VALIDATION_ERROR")
