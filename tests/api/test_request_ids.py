from __future__ import annotations

from uuid import uuid4

import pytest
from fastapi.testclient import TestClient

from jobnik.api.main import app_from_env
from tests.api.conftest import Api


def test_every_answer_carries_a_request_id(api: Api) -> None:
    first = api.http.get("/v1/jobs")
    second = api.http.get("/v1/jobs/not-a-uuid")

    ids = {first.headers["X-Request-Id"], second.headers["X-Request-Id"]}

    assert len(ids) == 2
    assert all(len(i) == 32 for i in ids)


def test_a_callers_request_id_is_kept_when_it_is_sane(api: Api) -> None:
    kept = api.http.get("/v1/jobs", headers={"X-Request-Id": "trace-me-42"})
    replaced = api.http.get("/v1/jobs", headers={"X-Request-Id": "has space"})

    assert kept.headers["X-Request-Id"] == "trace-me-42"
    assert replaced.headers["X-Request-Id"] != "has space"


def test_an_unexpected_error_is_logged_and_answered_with_its_request_id(
    database_url: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = app_from_env({"JOBNIK_DATABASE_URL": database_url})

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("secret internals: password=hunter2")

    monkeypatch.setattr(app.state.views, "job", broken)
    with TestClient(app, raise_server_exceptions=False) as http:
        r = http.get(f"/v1/jobs/{uuid4()}", headers={"X-Request-Id": "find-me-7"})

    assert r.status_code == 500
    assert r.headers["X-Request-Id"] == "find-me-7"
    assert r.json() == {"message": "Internal Server Error", "code": "UNKNOWN_ERROR"}
    (record,) = [rec for rec in caplog.records if rec.exc_info]
    assert "find-me-7" in record.getMessage()
    assert record.exc_info is not None
    assert isinstance(record.exc_info[1], RuntimeError)


def test_a_wrong_method_answers_405_with_allow(api: Api) -> None:
    r = api.http.delete(f"/v1/stages/{uuid4()}")

    assert r.status_code == 405
    assert r.headers["Allow"] == "GET"
    assert r.json()["code"] == "METHOD_NOT_ALLOWED"
    assert r.headers["X-Request-Id"]
