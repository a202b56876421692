from __future__ import annotations

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
