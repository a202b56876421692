from __future__ import annotations

import json
from typing import Any

import pytest
from fastapi.testclient import TestClient

from jobnik.api.main import app_from_env

from .conftest import Api


def nested(depth: int) -> str:
    return '{"a":' * depth + "1" + "}" * depth


def job_body(data: str) -> bytes:
    return ('{"name": "hostile", "data": ' + data + "}").encode()


UUID_HEX = "0" * 31 + "1"
HOSTILE_BODIES = [
    ("deep-300", job_body(nested(300)), "JSON_TOO_DEEP"),
    ("deep-2000", job_body(nested(2000)), "JSON_TOO_DEEP"),
    ("deep-array", job_body('{"a": ' + "[" * 65 + "]" * 65 + "}"), "JSON_TOO_DEEP"),
    ("nul-value", job_body('{"k": "a\\u0000b"}'), "INVALID_CHARACTER"),
    ("nul-key", job_body('{"a\\u0000": 1}'), "INVALID_CHARACTER"),
    ("nul-name", b'{"name": "ab\\u0000", "data": {}}', "INVALID_CHARACTER"),
    ("lone-low-surrogate", job_body('{"k": "\\udc00"}'), "INVALID_CHARACTER"),
    ("lone-high-surrogate", job_body('{"k": "x\\ud800y"}'), "INVALID_CHARACTER"),
    ("reserved-object", job_body('{"x": {"_type_": "unknown", "_data_": 1}}'), "RESERVED_OBJECT"),
    (
        "reserved-uuid",
        job_body(f'{{"_type_": "uuid_hex", "_data_": "{UUID_HEX}"}}'),
        "RESERVED_OBJECT",
    ),
    ("reserved-escaped", job_body('{"y": [{"\\u005ftype_": 1, "_data_": 2}]}'), "RESERVED_OBJECT"),
    ("nan", job_body('{"k": NaN}'), "NUMBER_OUT_OF_RANGE"),
    ("infinity", job_body('{"k": Infinity}'), "NUMBER_OUT_OF_RANGE"),
    ("minus-infinity", job_body('{"k": -Infinity}'), "NUMBER_OUT_OF_RANGE"),
    ("overflow", job_body('{"k": 1e400}'), "NUMBER_OUT_OF_RANGE"),
    ("huge-int", job_body('{"k": 9223372036854775808}'), "NUMBER_OUT_OF_RANGE"),
    ("huge-negative-int", job_body('{"k": -9223372036854775809}'), "NUMBER_OUT_OF_RANGE"),
    ("ten-thousand-digits", job_body('{"k": ' + "9" * 10_000 + "}"), "NUMBER_OUT_OF_RANGE"),
    ("not-json", b'{"name": "ab", "data": {', "VALIDATION_ERROR"),
    ("not-utf8", b'{"name": "ab", "data": {"k": "\xff\xfe"}}', "VALIDATION_ERROR"),
]


@pytest.mark.parametrize(("body", "code"), [pytest.param(b, c, id=i) for i, b, c in HOSTILE_BODIES])
def test_a_hostile_job_body_is_refused_and_writes_nothing(api: Api, body: bytes, code: str) -> None:
    with api.nothing_written():
        r = api.http.post("/v1/jobs", content=body, headers={"content-type": "application/json"})

    assert (r.status_code, r.json()["code"]) == (400, code), r.text
    assert set(r.json()) == {"message", "code"}


def test_objects_near_the_reserved_shape_are_kept_as_they_are(api: Api) -> None:
    data = {
        "only-type": {"_type_": "uuid_hex"},
        "three-keys": {"_type_": "uuid_hex", "_data_": UUID_HEX, "more": 1},
        "only-data": {"_data_": UUID_HEX},
    }
    job = api.create_job(data=data)

    history = api.http.get(f"/v1/jobs/{job['id']}/history").json()

    assert api.job(job["id"])["data"] == data
    assert history["items"][0]["payload"]["data"] == data


def test_a_reserved_object_in_a_report_is_refused(api: Api) -> None:
    job = api.create_job()
    stage = api.add_stage(job["id"])
    (task,) = api.add_tasks(stage["id"])
    api.dequeue(stage["type"])
    reserved = {"status": "COMPLETED", "result": {"_type_": "decimal_str", "_data_": "1"}}

    r = api.http.put(f"/v1/tasks/{task['id']}/status", json=reserved)

    assert (r.status_code, r.json()["code"]) == (400, "RESERVED_OBJECT"), r.text
    assert r.json()["message"].startswith("request/body/result is an object of only the keys")
    assert api.http.get(f"/v1/tasks/{task['id']}").json()["status"] == "IN_PROGRESS"


def test_the_limits_name_themselves(api: Api) -> None:
    deep = api.http.post("/v1/jobs", content=job_body(nested(65)))
    where = api.http.post("/v1/jobs", content=job_body('{"list": [1, {"k": "\\u0000"}]}'))

    assert deep.json()["message"] == "request/body nests deeper than 64 levels"
    assert where.json()["message"] == "request/body/data/list/1/k contains a NUL character (U+0000)"


def test_the_deepest_accepted_body_reads_back_everywhere(api: Api) -> None:
    data = json.loads(nested(62))  # the task list adds two levels: 64 in all
    job = api.create_job(data=data)
    stage = api.add_stage(job["id"], data=data, userMetadata=data)
    (task,) = api.add_tasks(stage["id"], data=data)
    api.dequeue(stage["type"])

    r = api.http.put(f"/v1/tasks/{task['id']}/status", json={"status": "COMPLETED", "result": data})

    assert r.status_code == 200, r.text
    assert api.job(job["id"], should_return_stages=True)["data"] == data
    for url in ("/v1/jobs", "/v1/stages", f"/v1/stages/{stage['id']}/tasks", "/v1/tasks"):
        assert api.http.get(url).status_code == 200, url
    history = api.http.get(f"/v1/jobs/{job['id']}/history")
    assert history.status_code == 200
    assert api.http.get("/v1/events").status_code == 200


@pytest.mark.parametrize(
    ("method", "url"),
    [
        ("GET", "/v1/stages?stage_type=a%00"),
        ("GET", "/v1/tasks?stage_type=a%00"),
        ("GET", "/v1/jobs?job_name=ab%00"),
        ("PATCH", "/v1/stages/a%00/tasks/dequeue"),
        ("GET", "/v1/job-definitions/ab%00"),
        ("GET", "/v1/jobs?job_name%00=ab"),
    ],
)
def test_nul_in_a_path_or_query_is_refused(api: Api, method: str, url: str) -> None:
    with api.nothing_written():
        r = api.http.request(method, url)

    assert (r.status_code, r.json()["code"]) == (400, "INVALID_CHARACTER"), r.text


@pytest.mark.parametrize(
    "body",
    [
        {"status": "COMPLETED", "result": {"k": "\x00"}},
        {"status": "FAILED", "reason": "bad\x00"},
    ],
)
def test_a_hostile_report_leaves_the_task_as_it_was(api: Api, body: dict[str, Any]) -> None:
    stage = api.add_stage(api.create_job()["id"])
    (task,) = api.add_tasks(stage["id"])
    api.dequeue(stage["type"])

    with api.nothing_written():
        r = api.http.put(f"/v1/tasks/{task['id']}/status", json=body)

    assert (r.status_code, r.json()["code"]) == (400, "INVALID_CHARACTER")
    assert api.task(task["id"])["status"] == "IN_PROGRESS"


def test_only_the_allowed_hosts_are_answered(database_url: str) -> None:
    env = {
        "JOBNIK_DATABASE_URL": database_url,
        "JOBNIK_ALLOWED_HOSTS": "jobnik.example, *.corp.example, [::1]",
    }
    allowed = ["jobnik.example", "JOBNIK.example:8080", "ci.corp.example", "[::1]:8080"]
    refused = ["evil.example", "corp.example", "jobnik.example.evil", "", "[::2]:8080"]
    with TestClient(app_from_env(env)) as http:
        answered = [http.get("/v1/jobs", headers={"host": h}).status_code for h in allowed]
        refusals = [
            http.post("/v1/jobs", headers={"host": h}, json={"name": "ab", "data": {}})
            for h in refused
        ]
        total = http.get("/v1/jobs", headers={"host": "jobnik.example"}).json()["total"]

    assert answered == [200] * len(allowed)
    assert {(r.status_code, r.json()["code"]) for r in refusals} == {(400, "HOST_NOT_ALLOWED")}
    assert "evil.example" in refusals[0].json()["message"]
    assert total == 0  # nothing a refused request sent was written


def test_any_host_is_answered_without_the_setting(api: Api) -> None:
    assert api.http.get("/v1/jobs", headers={"host": "anything.example"}).status_code == 200


def test_the_limits_are_settings(database_url: str) -> None:
    env = {
        "JOBNIK_DATABASE_URL": database_url,
        "JOBNIK_MAX_JSON_DEPTH": "3",
        "JOBNIK_MAX_STRING_LENGTH": "5",
        "JOBNIK_MAX_BODY_BYTES": "2048",
    }
    with TestClient(app_from_env(env)) as http:
        ok = http.post("/v1/jobs", json={"name": "ab", "data": {"a": {"b": "12345"}}})
        deep = http.post("/v1/jobs", json={"name": "ab", "data": {"a": {"b": {}}}})
        long = http.post("/v1/jobs", json={"name": "abcdef", "data": {}})
        big = http.post("/v1/jobs", json={"name": "ab", "data": {"k": [1] * 2000}})

    assert ok.status_code == 201, ok.text
    assert (deep.status_code, deep.json()["message"]) == (
        400,
        "request/body nests deeper than 3 levels",
    )
    assert (long.status_code, long.json()["message"]) == (
        400,
        "request/body/name is longer than 5 characters",
    )
    assert (big.status_code, big.json()["code"]) == (413, "PAYLOAD_TOO_LARGE")


@pytest.mark.parametrize(
    "url",
    [
        "/v1/jobs?from_date=0.5",
        "/v1/jobs?end_date=1700000000",
        "/v1/tasks?from_date=0",
        "/v1/jobs/{job}?as_of=%C2%B2",
        "/v1/jobs/{job}?as_of=99999999999999999999",
        "/v1/events?after=99999999999999999999",
        "/v1/job-definitions/ab?min_position=99999999999999999999",
    ],
)
def test_a_query_value_out_of_its_type_is_a_400(api: Api, url: str) -> None:
    job = api.create_job()

    r = api.http.get(url.format(job=job["id"]))

    assert (r.status_code, r.json()["code"]) == (400, "VALIDATION_ERROR"), r.text


def test_a_resume_position_that_is_not_ascii_digits_is_ignored(api: Api) -> None:
    job = api.create_job()
    api.set_job_status(job["id"], "ABORTED")

    with api.http.stream(
        "GET", f"/v1/jobs/{job['id']}/stream", headers={"Last-Event-ID": b"\xb2"}
    ) as r:
        text = r.read().decode()

    assert r.status_code == 200
    assert "JobAborted" in text


def test_tasks_per_request_are_capped_by_a_setting(database_url: str) -> None:
    env = {"JOBNIK_DATABASE_URL": database_url, "JOBNIK_MAX_TASKS_PER_REQUEST": "3"}
    with TestClient(app_from_env(env)) as http:
        api = Api(http)
        stage = api.add_stage(api.create_job()["id"])
        url = f"/v1/stages/{stage['id']}/tasks"

        with api.nothing_written():
            refused = http.post(url, json=[{"data": {}}] * 4)
        accepted = http.post(url, json=[{"data": {}}] * 3)

    assert (refused.status_code, refused.json()) == (
        400,
        {"message": "request/body has 4 tasks; at most 3 per request", "code": "TOO_MANY_TASKS"},
    )
    assert accepted.status_code == 201


EMPTY_OBJECTS = b"[" + b",".join([b"{}"] * 200_000) + b"]"  # 600 KB, under the body limit


@pytest.mark.parametrize("key", [None, "batch-1"], ids=["plain", "idempotency-key"])
def test_an_oversized_batch_is_refused_by_its_length_before_its_items(
    api: Api, key: str | None
) -> None:
    headers = {"content-type": "application/json", **({"Idempotency-Key": key} if key else {})}

    with api.nothing_written():
        r = api.http.put("/v1/tasks/status", content=EMPTY_OBJECTS, headers=headers)

    assert (r.status_code, r.json()) == (
        400,
        {
            "message": "request/body has 200000 tasks; at most 100 per request",
            "code": "BATCH_TOO_LARGE",
        },
    )


def test_too_many_tasks_are_refused_by_their_count_before_their_items(api: Api) -> None:
    stage = api.add_stage(api.create_job()["id"])

    with api.nothing_written():
        r = api.http.post(
            f"/v1/stages/{stage['id']}/tasks",
            content=EMPTY_OBJECTS,
            headers={"content-type": "application/json"},
        )

    assert (r.status_code, r.json()) == (
        400,
        {
            "message": "request/body has 200000 tasks; at most 1000 per request",
            "code": "TOO_MANY_TASKS",
        },
    )


def test_an_object_of_many_unknown_keys_is_refused_for_one_of_them(api: Api) -> None:
    unknown = ",".join(f'"k{i}": 0' for i in range(50_000))
    body = ('{"name": "many-keys", "data": {}, ' + unknown + "}").encode()

    with api.nothing_written():
        r = api.http.post("/v1/jobs", content=body, headers={"content-type": "application/json"})

    assert (r.status_code, r.json()) == (
        400,
        {
            "message": "request/body must NOT have additional properties ('k0')",
            "code": "VALIDATION_ERROR",
        },
    )


def test_an_invalid_batch_is_answered_for_its_first_invalid_item(api: Api) -> None:
    stage = api.add_stage(api.create_job()["id"])

    r = api.http.post(f"/v1/stages/{stage['id']}/tasks", json=[{"data": 1}] * 1000)

    assert (r.status_code, r.json()) == (
        400,
        {"message": "request/body/0/data must be object", "code": "VALIDATION_ERROR"},
    )
