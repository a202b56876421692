from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from .conftest import ISSUER, ROLES, Api, Secured, secured_app


def unauthenticated(r: object) -> None:
    assert r.status_code == 401, r.text  # type: ignore[attr-defined]
    assert r.json()["code"] == "UNAUTHENTICATED"  # type: ignore[attr-defined]
    assert r.headers["WWW-Authenticate"] == "Bearer"  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "authorization",
    [None, "", "Basic dXNlcjpwYXNz", "Bearer", "Bearer no-dot", "Bearer nobody.secret"],
)
def test_a_request_without_a_valid_token_is_refused_and_changes_nothing(
    secured: Secured, authorization: str | None
) -> None:
    headers = {} if authorization is None else {"Authorization": authorization}

    with secured.api.nothing_written():
        r = secured.anonymous("POST", "/v1/jobs", {"name": "n", "data": {}}, headers=headers)

    unauthenticated(r)


def test_a_wrong_secret_for_a_real_name_is_refused(secured: Secured) -> None:
    name, _, secret = secured.bearers["admin"].partition(".")

    unauthenticated(secured.call(f"{name}.{secret[:-1]}x", "GET", "/v1/jobs"))
    unauthenticated(secured.call(f"the-reader.{secret}", "GET", "/v1/jobs"))


def test_an_unauthenticated_body_is_not_even_read(secured: Secured) -> None:
    r = secured.anonymous(
        "POST", "/v1/jobs", content=b"{not json", headers={"Content-Type": "application/json"}
    )

    unauthenticated(r)


def test_a_revoked_token_is_refused(secured: Secured) -> None:
    bearer = secured.issue("short-lived", "producer")
    assert secured.call(bearer, "GET", "/v1/jobs").status_code == 200

    r = secured.call(secured.bearers["admin"], "DELETE", "/v1/tokens/short-lived")

    assert (r.status_code, r.json()) == (200, {"code": "TOKEN_REVOKED"})
    unauthenticated(secured.call(bearer, "GET", "/v1/jobs"))
    assert "revoked" in secured.call(bearer, "GET", "/v1/jobs").json()["message"]


def test_an_expired_token_is_refused(secured: Secured) -> None:
    soon = datetime.now(UTC) + timedelta(hours=1)
    bearer = secured.issue("expiring", "reader", expires_at=soon)
    assert secured.call(bearer, "GET", "/v1/jobs").status_code == 200

    secured.http.app.state.access.clock = lambda: soon  # type: ignore[attr-defined]

    unauthenticated(secured.call(bearer, "GET", "/v1/jobs"))
    assert secured.call(secured.bearers["reader"], "GET", "/v1/jobs").status_code == 200


def test_public_paths_need_no_token(secured: Secured) -> None:
    for path in ("/liveness", "/openapi.json"):
        assert secured.anonymous("GET", path).status_code == 200, path


def test_the_openapi_names_the_bearer_scheme_and_each_operations_roles(secured: Secured) -> None:
    schema = secured.anonymous("GET", "/openapi.json").json()

    assert schema["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"
    operations = [
        (path, op)
        for path, ops in schema["paths"].items()
        for op in ops.values()
        if path != "/liveness"
    ]
    assert operations
    for path, op in operations:
        assert op["security"] == [{"bearer": []}], path
        assert {"401", "403"} <= set(op["responses"]), path
        assert set(op["x-jobnik-roles"]) <= set(ROLES), path
        assert "Roles: " in op["description"], path
    delete = schema["paths"]["/v1/jobs/{jobId}"]["delete"]
    assert delete["x-jobnik-roles"] == ["operator", "admin"]


def test_the_token_list_shows_no_secret_and_no_hash(secured: Secured) -> None:
    r = secured.call(secured.bearers["admin"], "GET", "/v1/tokens")

    listed = {t["name"]: t for t in r.json()}
    assert listed["the-worker"]["role"] == "worker"
    assert listed["the-worker"]["issuedBy"] == "cli:tests"
    for bearer in secured.bearers.values():
        assert bearer.partition(".")[2] not in r.text
    assert "hash" not in r.text.lower()


def test_a_second_token_of_a_name_is_refused(secured: Secured) -> None:
    from jobnik.domain.errors import TokenExists

    secured.call(secured.bearers["admin"], "DELETE", "/v1/tokens/the-reader")

    with pytest.raises(TokenExists):
        secured.issue("the-reader", "reader")


def test_revoking_an_unknown_token_is_404(secured: Secured) -> None:
    r = secured.call(secured.bearers["admin"], "DELETE", "/v1/tokens/nobody")

    assert (r.status_code, r.json()["code"]) == (404, "TOKEN_NOT_FOUND")


def test_the_last_active_admin_token_is_kept_over_the_api(secured: Secured) -> None:
    admin = secured.bearers["admin"]
    revoked = secured.call(admin, "DELETE", "/v1/tokens/arranger")

    kept = secured.call(admin, "DELETE", "/v1/tokens/the-admin")

    assert revoked.status_code == 200
    assert (kept.status_code, kept.json()) == (
        409,
        {
            "message": "token 'the-admin' is the last active admin token: without it, no token "
            "could manage tokens. Create another admin token first (`jobnik tokens create NAME "
            "--role admin`); the command line can also revoke it (`jobnik tokens revoke "
            "the-admin`).",
            "code": "LAST_ADMIN_TOKEN",
        },
    )
    assert secured.call(admin, "GET", "/v1/tokens").status_code == 200


def test_other_tokens_are_revoked_while_one_admin_is_left(secured: Secured) -> None:
    admin = secured.bearers["admin"]
    secured.call(admin, "DELETE", "/v1/tokens/arranger")

    r = secured.call(admin, "DELETE", "/v1/tokens/the-reader")

    assert (r.status_code, r.json()) == (200, {"code": "TOKEN_REVOKED"})


def test_the_command_line_may_revoke_the_last_admin_token(secured: Secured) -> None:
    secured.jobnik.revoke_token("arranger", by=ISSUER)

    revoked = secured.jobnik.revoke_token("the-admin", by=ISSUER)

    assert revoked is True
    unauthenticated(secured.call(secured.bearers["admin"], "GET", "/v1/tokens"))


# -- fencing by identity --------------------------------------------------------------------


def worked_by(s: Secured, bearer: str, stage_type: str = "fenced") -> dict[str, object]:
    job = s.api.create_job()
    stage = s.api.add_stage(job["id"], type=stage_type)
    s.api.add_tasks(stage["id"])
    r = s.call(bearer, "PATCH", f"/v1/stages/{stage_type}/tasks/dequeue")
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    ("method", "suffix", "body"),
    [
        ("PUT", "status", {"status": "FAILED", "attempt": 1}),
        ("POST", "heartbeat", {"attempt": 1}),
        ("POST", "release", {"attempt": 1}),
        ("POST", "logs", {"lines": ["not mine"], "attempt": 1}),
        ("POST", "logs", {"lines": ["not mine"]}),
    ],
)
def test_an_attempt_answers_only_to_the_token_that_dequeued_it(
    secured: Secured, method: str, suffix: str, body: dict[str, object]
) -> None:
    mine = secured.issue("worker-a", "worker")
    theirs = secured.issue("worker-b", "worker")
    task = worked_by(secured, mine)

    r = secured.call(theirs, method, f"/v1/tasks/{task['id']}/{suffix}", body)

    assert (r.status_code, r.json()["code"]) == (403, "FORBIDDEN"), r.text
    assert "worker-a" in r.json()["message"]
    assert secured.api.task(str(task["id"]))["status"] == "IN_PROGRESS"
    assert secured.api.events_of(str(task["id"]))[-1] == "TaskAttemptRefused"
    history = secured.api.http.get("/v1/events?type=TaskAttemptRefused").json()["items"]
    assert (history[-1]["actor"], history[-1]["actorRole"]) == ("worker-b", "worker")
    done = secured.call(
        mine, "PUT", f"/v1/tasks/{task['id']}/status", {"status": "COMPLETED", "attempt": 1}
    )
    assert (done.status_code, done.json()["status"]) == (200, "COMPLETED")


def test_even_an_admin_cannot_report_on_a_workers_attempt(secured: Secured) -> None:
    task = worked_by(secured, secured.bearers["worker"])

    r = secured.call(
        secured.bearers["admin"], "PUT", f"/v1/tasks/{task['id']}/status", {"status": "FAILED"}
    )

    assert (r.status_code, r.json()["code"]) == (403, "FORBIDDEN")


def test_a_worker_tokens_report_must_name_its_attempt(secured: Secured) -> None:
    task = worked_by(secured, secured.bearers["worker"])

    with secured.api.nothing_written():
        r = secured.call(
            secured.bearers["worker"],
            "PUT",
            f"/v1/tasks/{task['id']}/status",
            {"status": "FAILED", "fatal": True},
        )

    assert (r.status_code, r.json()["code"]) == (400, "ATTEMPT_REQUIRED")


def test_a_worker_token_works_only_on_its_stage_types(secured: Secured) -> None:
    tiler = secured.issue("tiler", "worker", stage_types=["tiles"])
    other = worked_by(secured, secured.bearers["admin"], stage_type="upload")
    job = secured.api.create_job()
    secured.api.add_tasks(secured.api.add_stage(job["id"], type="upload")["id"])

    with secured.api.nothing_written():
        dequeue = secured.call(tiler, "PATCH", "/v1/stages/upload/tasks/dequeue")
        log = secured.call(tiler, "POST", f"/v1/tasks/{other['id']}/logs", {"lines": ["x"]})

    assert (dequeue.status_code, dequeue.json()["code"]) == (403, "FORBIDDEN")
    assert (log.status_code, log.json()["code"]) == (403, "FORBIDDEN")
    assert secured.call(tiler, "PATCH", "/v1/stages/tiles/tasks/dequeue").status_code == 404


# -- the actor on every event -------------------------------------------------------------


def test_events_name_the_token_and_its_role_and_cascades_name_the_system(
    secured: Secured,
) -> None:
    producer, worker = secured.bearers["producer"], secured.bearers["worker"]
    job = secured.call(producer, "POST", "/v1/jobs", {"name": "audited", "data": {}}).json()
    stage = secured.call(
        producer, "POST", f"/v1/jobs/{job['id']}/stage", {"type": "audited", "data": {}}
    ).json()
    secured.call(producer, "POST", f"/v1/stages/{stage['id']}/tasks", [{"data": {}}])
    task = secured.call(worker, "PATCH", "/v1/stages/audited/tasks/dequeue").json()
    secured.call(
        worker,
        "PUT",
        f"/v1/tasks/{task['id']}/status",
        {"status": "COMPLETED", "attempt": task["attempt"]},
    )

    items = secured.api.http.get(f"/v1/jobs/{job['id']}/history").json()["items"]
    actors = {e["type"]: (e["actor"], e.get("actorRole")) for e in items}
    assert actors["JobCreated"] == ("the-producer", "producer")
    assert actors["TaskCreated"] == ("the-producer", "producer")
    assert actors["TaskDequeued"] == ("the-worker", "worker")
    assert actors["TaskCompleted"] == ("the-worker", "worker")
    assert actors["StageCompleted"] == ("system", None)
    assert actors["JobCompleted"] == ("system", None)


def test_with_access_control_off_events_say_api_and_worker_as_before(api: Api) -> None:
    stage = api.add_stage(api.create_job()["id"], type="open")
    api.add_tasks(stage["id"])
    api.run_task("open")

    items = api.http.get(f"/v1/jobs/{stage['jobId']}/history").json()["items"]
    actors = {e["type"]: (e["actor"], e.get("actorRole")) for e in items}
    assert actors["JobCreated"] == ("api", None)
    assert actors["TaskDequeued"] == ("worker", None)
    assert actors["TaskCompleted"] == ("worker", None)


# -- modes ----------------------------------------------------------------------------------


def test_unset_the_server_is_open_until_a_token_is_issued_then_closed(
    database_url: str,
) -> None:
    from jobnik.domain.principals import Principal, Role

    with secured_app(database_url) as http:
        assert http.get("/v1/jobs").status_code == 200

        bearer = http.app.state.jobnik.issue_token(  # type: ignore[attr-defined]
            "first", Role.ADMIN, by=Principal("cli:tests", Role.ADMIN)
        ).bearer

        unauthenticated(http.get("/v1/jobs"))
        assert http.get("/v1/jobs", headers={"Authorization": f"Bearer {bearer}"}).is_success


def test_with_auth_off_tokens_change_nothing(database_url: str) -> None:
    from jobnik.domain.principals import Principal, Role

    with secured_app(database_url, JOBNIK_AUTH="off") as http:
        http.app.state.jobnik.issue_token(  # type: ignore[attr-defined]
            "ignored", Role.READER, by=Principal("cli:tests", Role.ADMIN)
        )

        r = http.post("/v1/jobs", json={"name": "nightly", "data": {}})

    assert r.status_code == 201


def test_cors_answers_only_the_allowed_origins(database_url: str) -> None:
    preflight = {"Access-Control-Request-Method": "POST"}
    with secured_app(database_url, JOBNIK_CORS_ORIGINS="https://console.example") as http:
        ok = http.options("/v1/jobs", headers={"Origin": "https://console.example", **preflight})
        other = http.options("/v1/jobs", headers={"Origin": "https://evil.example", **preflight})

    assert ok.headers["Access-Control-Allow-Origin"] == "https://console.example"
    assert "Access-Control-Allow-Origin" not in other.headers


def test_no_cors_headers_by_default(client: object) -> None:
    r = client.get("/v1/jobs", headers={"Origin": "https://console.example"})  # type: ignore[attr-defined]

    assert "Access-Control-Allow-Origin" not in r.headers
