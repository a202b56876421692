"""/v1/limits over HTTP: set, change, read and remove a stage type's concurrency limit; the dequeue
that would exceed it finds nothing; named refusals that write nothing; /v1/queues, the metrics
and the OpenAPI document show it."""

from __future__ import annotations

import re
from typing import Any

import pytest

from jobnik.domain import limit_commands
from jobnik.domain.limits import limit_id

from .conftest import Api, Json


def set_limit(api: Api, stage_type: str, value: int, **body: Any) -> Json:
    r = api.http.put(f"/v1/limits/{stage_type}", json={"maxInProgress": value, **body})
    assert r.status_code == 200, r.text
    return dict(r.json())


def queued(api: Api, stage_type: str, n: int) -> None:
    job = api.create_job()
    stage = api.add_stage(job["id"], type=stage_type)
    api.add_tasks(stage["id"], n)


def test_a_limit_holds_dequeues_of_its_type_back_and_no_other(api: Api) -> None:
    queued(api, "render", 4)
    queued(api, "encode", 1)
    made = set_limit(api, "render", 2, reason="licence for 2")
    assert {k: made[k] for k in ("stageType", "maxInProgress", "inProgress", "room")} == {
        "stageType": "render",
        "maxInProgress": 2,
        "inProgress": 0,
        "room": 2,
    }
    assert (made["updatedBy"], made["reason"]) == ("api", "licence for 2")

    first = api.dequeue("render")
    api.dequeue("render")
    api.dequeue_nothing("render")  # 404 TASK_NOT_FOUND, as when none is queued
    api.dequeue("encode")
    r = api.http.patch("/v1/stages/render/tasks/dequeue", params={"count": 5})
    assert (r.status_code, r.json()) == (200, [])

    got = api.http.get("/v1/limits/render").json()
    assert (got["inProgress"], got["room"]) == (2, 0)
    api.report(first["id"], "COMPLETED")
    assert api.http.get("/v1/limits").json()["items"][0]["room"] == 1
    api.dequeue("render")


def test_a_limit_is_changed_and_removed_each_an_event_with_its_reason(api: Api) -> None:
    set_limit(api, "render", 2)
    assert set_limit(api, "render", 5, reason="more seats")["maxInProgress"] == 5
    with api.wrote_events():
        r = api.http.delete("/v1/limits/render", params={"reason": "no licence needed"})
    assert (r.status_code, r.json()) == (200, {"code": "LIMIT_REMOVED_SUCCESSFULLY"})
    assert api.events_of(str(limit_id("render"))) == [
        "LimitsCreated",
        "ConcurrencyLimitSet",
        "ConcurrencyLimitSet",
        "ConcurrencyLimitRemoved",
    ]
    assert api.http.get("/v1/limits").json() == {"total": 0, "items": []}


def test_the_limits_are_listed_a_page_at_a_time(api: Api) -> None:
    for t in ("t1", "t2", "t3"):
        set_limit(api, t, 1)
    r = api.http.get("/v1/limits", params={"page": 2, "page_size": 2})
    assert (r.json()["total"], [v["stageType"] for v in r.json()["items"]]) == (3, ["t3"])
    assert len(api.http.get("/v1/limits", params={"page_size": 1}).json()["items"]) == 1
    for r in (api.http.get("/v1/limits/render"), api.http.delete("/v1/limits/render")):
        assert (r.status_code, r.json()["code"]) == (404, "LIMIT_NOT_FOUND")


def test_a_limit_on_one_type_more_than_the_bound_is_refused_and_changes_stay_allowed(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(limit_commands, "MAX_LIMITED_TYPES", 2)
    set_limit(api, "t1", 1)
    r = api.http.put("/v1/limits/t2/rate", json={"starts": 5, "intervalSeconds": 60})
    assert r.status_code == 200, r.text
    with api.nothing_written():
        refused = api.http.put("/v1/limits/t3", json={"maxInProgress": 1})
        refused_rate = api.http.put("/v1/limits/t3/rate", json={"starts": 5, "intervalSeconds": 9})
    for answer in (refused, refused_rate):
        assert (answer.status_code, answer.json()["code"]) == (409, "TOO_MANY_LIMITS")
    assert set_limit(api, "t1", 3)["maxInProgress"] == 3  # a type that has one may change it
    assert set_limit(api, "t2", 2)["maxInProgress"] == 2  # or add the other kind
    api.http.delete("/v1/limits/t1")
    assert set_limit(api, "t3", 1)["maxInProgress"] == 1  # room again


@pytest.mark.parametrize(
    ("stage_type", "body"),
    [
        ("render", {"maxInProgress": 0}),
        ("render", {"maxInProgress": -1}),
        ("render", {"maxInProgress": 10_000_001}),
        ("x" * 51, {"maxInProgress": 2}),
    ],
)
def test_a_bad_limit_is_a_named_400_and_writes_nothing(
    api: Api, stage_type: str, body: Json
) -> None:
    with api.nothing_written():
        r = api.http.put(f"/v1/limits/{stage_type}", json=body)
    assert (r.status_code, r.json()["code"]) == (400, "INVALID_LIMIT"), r.text


@pytest.mark.parametrize(
    "body", [{}, {"maxInProgress": "two"}, {"maxInProgress": 2, "reason": "r" * 2001}]
)
def test_a_malformed_limit_is_a_validation_error_and_writes_nothing(api: Api, body: Json) -> None:
    with api.nothing_written():
        r = api.http.put("/v1/limits/render", json=body)
    assert (r.status_code, r.json()["code"]) == (400, "VALIDATION_ERROR"), r.text


def test_queues_and_metrics_show_each_limit_its_use_and_the_tasks_it_holds_back(
    api: Api,
) -> None:
    queued(api, "render", 5)
    queued(api, "encode", 1)
    set_limit(api, "render", 2)
    api.dequeue("render")
    api.dequeue("render")

    items = {q["stageType"]: q for q in api.http.get("/v1/queues").json()["items"]}
    assert (items["render"]["maxInProgress"], items["render"]["heldBack"]) == (2, 3)
    assert (items["encode"]["maxInProgress"], items["encode"]["heldBack"]) == (None, 0)

    metrics = api.http.get("/metrics").text
    assert 'jobnik_limit_max_in_progress{stage_type="render"} 2.0' in metrics
    assert 'jobnik_limit_in_progress{stage_type="render"} 2.0' in metrics
    assert 'jobnik_tasks_held_back{reason="limit",stage_type="render"} 3.0' in metrics


def test_the_openapi_document_names_every_limit_answer(api: Api) -> None:
    paths = api.http.get("/openapi.json").json()["paths"]
    one = paths["/v1/limits/{stageType}"]
    assert "INVALID_LIMIT" in one["put"]["responses"]["400"]["description"]
    assert "LIMIT_NOT_FOUND" in one["delete"]["responses"]["404"]["description"]
    assert "LIMIT_NOT_FOUND" in one["get"]["responses"]["404"]["description"]
    body = api.http.get("/openapi.json").json()["components"]["schemas"]["LimitBody"]
    assert body["properties"]["maxInProgress"]["minimum"] == 1


def test_a_rate_is_set_read_and_removed_and_holds_dequeues_back(api: Api) -> None:
    queued(api, "render", 4)
    r = api.http.put(
        "/v1/limits/render/rate", json={"starts": 2, "intervalSeconds": 3600, "reason": "quota"}
    )
    assert r.status_code == 200, r.text
    made = r.json()
    assert made["rate"] == {"starts": 2, "intervalSeconds": 3600, "tokens": 2}
    assert "maxInProgress" not in made  # no concurrency limit
    assert made["room"] == 2

    api.dequeue("render")
    api.dequeue("render")
    api.dequeue_nothing("render")
    got = api.http.get("/v1/limits/render").json()
    assert (got["rate"]["tokens"], got["room"]) == (0, 0)
    items = {q["stageType"]: q for q in api.http.get("/v1/queues").json()["items"]}
    assert items["render"]["heldBack"] == 2
    metric = re.search(
        r'jobnik_rate_limit_tokens\{stage_type="render"\} (\S+)', api.http.get("/metrics").text
    )
    assert metric is not None
    assert 0 <= float(metric.group(1)) < 1  # (refilling, by the database's clock)

    r = api.http.delete("/v1/limits/render/rate", params={"reason": "quota lifted"})
    assert (r.status_code, r.json()) == (200, {"code": "RATE_LIMIT_REMOVED_SUCCESSFULLY"})
    api.dequeue("render")
    assert api.events_of(str(limit_id("render")))[-2:] == ["RateLimitSet", "RateLimitRemoved"]


@pytest.mark.parametrize(
    "body", [{"starts": 0, "intervalSeconds": 60}, {"starts": 5, "intervalSeconds": 0}]
)
def test_a_bad_rate_is_a_named_400_and_writes_nothing(api: Api, body: Json) -> None:
    with api.nothing_written():
        r = api.http.put("/v1/limits/render/rate", json=body)
    assert (r.status_code, r.json()["code"]) == (400, "INVALID_LIMIT"), r.text
