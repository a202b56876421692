from __future__ import annotations

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
