"""The OpenAPI document: the errors every operation answers, and the limits the server enforces
under the settings the app is built with."""

from __future__ import annotations

import json
from typing import Any

import pytest
from fastapi.testclient import TestClient

from jobnik.api.main import app_from_env

from .conftest import Api

ERROR = {"$ref": "#/components/schemas/ErrorBody"}


def operations(api: Api) -> list[tuple[str, str, dict[str, object]]]:
    schema = api.http.get("/openapi.json").json()
    return [(m, p, o) for p, ops in schema["paths"].items() for m, o in ops.items()]


def test_every_operation_documents_its_errors_with_the_error_body(api: Api) -> None:
    schema = api.http.get("/openapi.json").json()

    for method, path, op in operations(api):
        responses = op["responses"]
        assert isinstance(responses, dict)
        assert {"400", "500"} <= set(responses), (method, path)
        for status, answer in responses.items():
            if status.startswith(("4", "5")):
                assert answer["content"]["application/json"]["schema"] == ERROR, (method, path)
    assert set(schema["components"]["schemas"]["ErrorBody"]["required"]) == {"message", "code"}
    assert "HTTPValidationError" not in schema["components"]["schemas"]


def test_the_statuses_follow_what_an_operation_does(api: Api) -> None:
    documented = {(m, p): set(o["responses"]) for m, p, o in operations(api)}  # type: ignore[arg-type]

    assert {"404", "409", "413"} <= documented["put", "/v1/tasks/{taskId}/status"]
    assert {"404", "409"} <= documented["patch", "/v1/stages/{stageType}/tasks/dequeue"]
    assert "422" in documented["post", "/v1/jobs"]
    assert "503" in documented["get", "/v1/job-definitions/{name}"]
    assert "422" not in documented["get", "/v1/jobs"]


def test_a_tasks_attempts_and_attempt_say_what_each_counts(api: Api) -> None:
    task = api.http.get("/openapi.json").json()["components"]["schemas"]["TaskOut"]["properties"]

    assert "attempts spent" in task["attempts"]["description"]
    assert "attempts 0 and attempt 1" in task["attempts"]["description"]
    assert "latest dequeue" in task["attempt"]["description"]


# -- the limits the server enforces, stated from its settings -----------------------------------


def test_the_document_states_the_limits_of_the_settings_the_app_is_built_with(
    database_url: str,
) -> None:
    env = {
        "JOBNIK_DATABASE_URL": database_url,
        "JOBNIK_MAX_BATCH_SIZE": "7",
        "JOBNIK_MAX_TASKS_PER_REQUEST": "30",
        "JOBNIK_MAX_PAGE_SIZE": "40",
        "JOBNIK_MAX_STRING_LENGTH": "5000",
    }
    with TestClient(app_from_env(env)) as http:
        doc = http.get("/openapi.json").json()
    paths, components = doc["paths"], doc["components"]["schemas"]

    def parameter(path: str, method: str, name: str) -> Any:
        return next(p for p in paths[path][method]["parameters"] if p["name"] == name)["schema"]

    def body(path: str, method: str) -> Any:
        return paths[path][method]["requestBody"]["content"]["application/json"]["schema"]

    assert parameter("/v1/stages/{stageType}/tasks/dequeue", "patch", "count")["maximum"] == 7
    assert parameter("/v1/tasks", "get", "page_size")["maximum"] == 40
    assert body("/v1/tasks/status", "put")["maxItems"] == 7
    assert body("/v1/stages/{stageId}/tasks", "post")["maxItems"] == 30
    assert components["JsonObject"]["propertyNames"]["maxLength"] == 5000
    assert components["JsonValue"]["maxLength"] == 5000
    assert "x-jobnik" not in json.dumps(doc).replace("x-jobnik-permission", "").replace(
        "x-jobnik-roles", ""
    )


def test_every_free_form_payload_is_a_json_object_of_what_the_gate_takes(api: Api) -> None:
    doc = api.http.get("/openapi.json").json()
    components = doc["components"]["schemas"]
    json_object = {"$ref": "#/components/schemas/JsonObject"}

    assert components["CreateJob"]["properties"]["data"] == {**json_object, "title": "Data"}
    assert components["TaskStatusChange"]["properties"]["result"]["anyOf"][0] == json_object
    metadata = doc["paths"]["/v1/jobs/{jobId}/user-metadata"]["patch"]["requestBody"]
    assert metadata["content"]["application/json"]["schema"]["$ref"] == json_object["$ref"]
    described = components["JsonObject"]["description"]
    for rule in ("NUL", "64 bits", "`_type_` and `_data_`", "JOBNIK_MAX_JSON_DEPTH"):
        assert rule in described


def test_as_of_is_a_log_position_or_a_date_time(api: Api) -> None:
    doc = api.http.get("/openapi.json").json()
    parameters = doc["paths"]["/v1/jobs/{jobId}"]["get"]["parameters"]

    as_of = next(p for p in parameters if p["name"] == "as_of")["schema"]

    assert as_of["anyOf"] == [
        {"type": "integer", "minimum": 0, "maximum": 2**63 - 1},
        {"type": "string", "format": "date-time"},
    ]


@pytest.mark.parametrize(
    "moment", ["9999-12-31T23:59:59-14:00", "0001-01-01T00:00:00+05:00"], ids=["late", "early"]
)
def test_a_date_time_beyond_the_calendar_in_utc_is_taken_as_its_end(api: Api, moment: str) -> None:
    job = api.create_job()
    late = moment.startswith("9999")

    listed = api.http.get("/v1/tasks", params={"from_date": moment})
    as_of = api.http.get(f"/v1/jobs/{job['id']}", params={"as_of": moment})

    assert listed.status_code == 200
    assert as_of.status_code == (200 if late else 404), as_of.text


def test_a_paths_allow_names_only_its_own_methods(api: Api) -> None:
    r = api.http.options("/v1/tasks/status")

    assert (r.status_code, r.headers["Allow"]) == (405, "PUT")
