"""Per-key rate limits over HTTP: at most N task starts of a stage type per interval per
concurrency key (a job's `concurrencyKey`, or else the job itself); a key out of tokens holds its
own tasks back and no one else's; each change an event; named refusals that write nothing."""

from __future__ import annotations

from typing import Any

import pytest

from jobnik.domain.limits import MAX_INTERVAL, MAX_PER_KEY, limit_id

from .conftest import Api, Json
from .test_key_limits import job_of, set_key_limit, whose

HOUR = 3600


def set_key_rate(api: Api, stage_type: str, starts: int, seconds: int, **body: Any) -> Json:
    r = api.http.put(
        f"/v1/limits/{stage_type}/keys/rate",
        json={"starts": starts, "intervalSeconds": seconds, **body},
    )
    assert r.status_code == 200, r.text
    return dict(r.json())


def test_each_key_starts_no_more_than_its_tokens_and_the_others_go_on(api: Api) -> None:
    _, a = job_of(api, "render", 4, concurrencyKey="tenant-a")
    _, b = job_of(api, "render", 1, concurrencyKey="tenant-a")
    _, c = job_of(api, "render", 3)
    made = set_key_rate(api, "render", 2, HOUR, reason="two an hour each")
    assert made["perKey"] == {"rate": {"starts": 2, "intervalSeconds": HOUR}, "heldBack": 4}
    assert made["reason"] == "two an hour each"

    names = {a: "a", b: "b", c: "c"}
    got = [whose(api, "render", names) for _ in range(4)]
    assert got == ["a", "a", "c", "c"]  # the queue's order, each key up to its tokens
    api.dequeue_nothing("render")
    batch = api.http.patch("/v1/stages/render/tasks/dequeue", params={"count": 5}).json()
    assert batch == []  # a batch takes no more than the keys' tokens either
    running = api.http.get(f"/v1/stages/{a}/tasks").json()
    api.report(next(t for t in running if t["status"] == "IN_PROGRESS")["id"], "COMPLETED")
    api.dequeue_nothing("render")  # an ending gives no token back, unlike a concurrency limit
    assert api.http.get("/v1/limits/render").json()["perKey"]["heldBack"] == 4


def test_a_key_rate_and_a_key_limit_show_together_and_each_goes_alone(api: Api) -> None:
    job_of(api, "render", 3)
    set_key_limit(api, "render", 1)
    both = set_key_rate(api, "render", 5, 60)
    assert both["perKey"] == {
        "maxInProgress": 1,
        "rate": {"starts": 5, "intervalSeconds": 60},
        "heldBack": 2,
    }
    api.dequeue("render")
    api.dequeue_nothing("render")
    with api.wrote_events():
        r = api.http.delete("/v1/limits/render/keys/rate", params={"reason": "quota lifted"})
    assert (r.status_code, r.json()) == (200, {"code": "KEY_RATE_LIMIT_REMOVED_SUCCESSFULLY"})
    assert api.http.get("/v1/limits/render").json()["perKey"] == {"maxInProgress": 1, "heldBack": 2}
    api.http.delete("/v1/limits/render/keys")
    assert api.http.get("/v1/limits").json() == {"total": 0, "items": []}
    api.dequeue("render")
    api.dequeue("render")
    assert api.events_of(str(limit_id("render"))) == [
        "LimitsCreated",
        "KeyLimitSet",
        "KeyRateSet",
        "KeyRateRemoved",
        "KeyLimitRemoved",
    ]


def test_setting_the_rate_it_has_changes_nothing(api: Api) -> None:
    set_key_rate(api, "render", 3, 60)
    with api.nothing_written():
        set_key_rate(api, "render", 3, 60)
    set_key_rate(api, "render", 3, 61)
    assert api.events_of(str(limit_id("render")))[1:] == ["KeyRateSet", "KeyRateSet"]


def test_queues_and_metrics_show_the_tasks_a_key_rate_holds_back(api: Api) -> None:
    job_of(api, "render", 3)
    set_key_rate(api, "render", 1, HOUR)
    api.dequeue("render")
    metrics = api.http.get("/metrics").text
    assert 'jobnik_tasks_held_back{reason="key",stage_type="render"} 2.0' in metrics
    queue = api.http.get("/v1/queues").json()["items"][0]
    assert (queue["queued"], queue["heldByKey"]) == (2, 2)


@pytest.mark.parametrize(
    "body",
    [
        {"starts": 0, "intervalSeconds": 60},
        {"starts": -1, "intervalSeconds": 60},
        {"starts": MAX_PER_KEY + 1, "intervalSeconds": 60},
        {"starts": 5, "intervalSeconds": 0},
        {"starts": 5, "intervalSeconds": MAX_INTERVAL + 1},
        {"starts": 5},
    ],
)
def test_a_bad_key_rate_is_a_named_400_and_writes_nothing(api: Api, body: Json) -> None:
    with api.nothing_written():
        r = api.http.put("/v1/limits/render/keys/rate", json=body)
    assert r.status_code == 400, r.text
    assert r.json()["code"] in {"INVALID_LIMIT", "VALIDATION_ERROR"}, r.text
    r = api.http.delete("/v1/limits/render/keys/rate")
    assert (r.status_code, r.json()["code"]) == (404, "LIMIT_NOT_FOUND")


def test_the_openapi_document_names_every_key_rate_answer(api: Api) -> None:
    document = api.http.get("/openapi.json").json()
    path = document["paths"]["/v1/limits/{stageType}/keys/rate"]
    assert "INVALID_LIMIT" in path["put"]["responses"]["400"]["description"]
    assert "LIMIT_NOT_FOUND" in path["delete"]["responses"]["404"]["description"]
    body = document["components"]["schemas"]["KeyRateBody"]["properties"]
    assert (body["starts"]["minimum"], body["starts"]["maximum"]) == (1, MAX_PER_KEY)
    assert body["intervalSeconds"]["maximum"] == MAX_INTERVAL
