"""Per-key concurrency limits over HTTP: at most N tasks of a stage type in progress per
concurrency key (a job's `concurrencyKey`, or else the job itself); a key at its limit holds its
own tasks back and no one else's; each change an event; named refusals that write nothing."""

from __future__ import annotations

import random
from typing import Any

import pytest

from jobnik.domain.limits import MAX_PER_KEY, limit_id

from .conftest import Api, Json


def set_key_limit(api: Api, stage_type: str, value: int, **body: Any) -> Json:
    r = api.http.put(f"/v1/limits/{stage_type}/keys", json={"maxInProgress": value, **body})
    assert r.status_code == 200, r.text
    return dict(r.json())


def job_of(api: Api, stage_type: str, n: int, **job: Any) -> tuple[str, str]:
    """A job with one stage of `n` tasks of `stage_type`: its id and its stage's."""
    made = api.create_job(**job)
    stage = api.add_stage(made["id"], type=stage_type)
    api.add_tasks(stage["id"], n)
    return str(made["id"]), str(stage["id"])


def whose(api: Api, stage_type: str, names: dict[str, str]) -> str:
    """Whose (by stage id in `names`) the next dequeue of `stage_type` took."""
    return names[api.dequeue(stage_type)["stageId"]]


def test_without_a_key_each_job_is_held_to_the_limit_and_others_go_on(api: Api) -> None:
    _, a = job_of(api, "render", 4)
    _, b = job_of(api, "render", 4)
    made = set_key_limit(api, "render", 2, reason="two per job")
    assert made["perKey"] == {"maxInProgress": 2, "heldBack": 4}
    assert ("maxInProgress" in made, made["reason"]) == (False, "two per job")

    names = {a: "a", b: "b"}
    got = [whose(api, "render", names) for _ in range(4)]
    assert got == ["a", "a", "b", "b"]  # the queue's order, each job up to its limit
    api.dequeue_nothing("render")
    assert api.http.get("/v1/limits/render").json()["perKey"]["heldBack"] == 4

    first_of_b = api.http.patch("/v1/stages/render/tasks/dequeue", params={"count": 5}).json()
    assert first_of_b == []  # a batch takes no more than the keys' room either
    running = api.http.get(f"/v1/stages/{b}/tasks").json()
    done = next(t for t in running if t["status"] == "IN_PROGRESS")
    api.report(done["id"], "COMPLETED")
    assert whose(api, "render", names) == "b"  # b's next, not a's
    api.dequeue_nothing("render")


def test_jobs_that_share_a_concurrency_key_share_its_limit(api: Api) -> None:
    set_key_limit(api, "render", 1)
    _, a = job_of(api, "render", 2, concurrencyKey="tenant-1")
    _, b = job_of(api, "render", 2, concurrencyKey="tenant-1")
    _, c = job_of(api, "render", 2)
    names = {a: "a", b: "b", c: "c"}
    assert [whose(api, "render", names) for _ in range(2)] == ["a", "c"]
    api.dequeue_nothing("render")
    job = api.http.get(f"/v1/jobs/{api.stage(a)['jobId']}").json()
    assert job["concurrencyKey"] == "tenant-1"


def test_a_paused_job_leaves_its_keys_room_to_the_others(api: Api) -> None:
    set_key_limit(api, "render", 1)
    first, a = job_of(api, "render", 1, concurrencyKey="k")
    _, b = job_of(api, "render", 1, concurrencyKey="k")
    api.set_job_status(first, "PAUSED")
    assert whose(api, "render", {a: "a", b: "b"}) == "b"
    api.set_job_status(first, "PENDING")  # resumed: its task waits for b's to end
    api.dequeue_nothing("render")


def test_within_a_key_priority_comes_first(api: Api) -> None:
    set_key_limit(api, "render", 1)
    _, low = job_of(api, "render", 1, concurrencyKey="k", priority="LOW")
    _, high = job_of(api, "render", 1, concurrencyKey="k", priority="HIGH")
    assert whose(api, "render", {low: "low", high: "high"}) == "high"


def test_a_limit_set_on_a_queue_holds_it_at_once_and_removing_it_lets_all_through(
    api: Api,
) -> None:
    job_of(api, "render", 3)
    api.dequeue("render")
    set_key_limit(api, "render", 1)
    api.dequeue_nothing("render")  # one of a's is in progress already
    assert set_key_limit(api, "render", 2)["perKey"] == {"maxInProgress": 2, "heldBack": 1}
    api.dequeue("render")
    api.dequeue_nothing("render")
    with api.wrote_events():
        r = api.http.delete("/v1/limits/render/keys", params={"reason": "no licence"})
    assert (r.status_code, r.json()) == (200, {"code": "KEY_LIMIT_REMOVED_SUCCESSFULLY"})
    api.dequeue("render")
    assert api.events_of(str(limit_id("render"))) == [
        "LimitsCreated",
        "KeyLimitSet",
        "KeyLimitSet",
        "KeyLimitRemoved",
    ]
    assert api.http.get("/v1/limits").json() == {"total": 0, "items": []}


def test_a_retried_task_keeps_to_its_keys_limit(api: Api) -> None:
    set_key_limit(api, "render", 1)
    job_of(api, "render", 2)
    task = api.dequeue("render")
    assert api.report(task["id"], "FAILED")["status"] == "RETRIED"
    again = api.dequeue("render")  # one in progress at a time, retry or not
    api.dequeue_nothing("render")
    api.report(again["id"], "COMPLETED")
    api.dequeue("render")


def test_queues_and_metrics_show_the_tasks_a_key_limit_holds_back(api: Api) -> None:
    job_of(api, "render", 3)
    set_key_limit(api, "render", 1)
    api.dequeue("render")
    metrics = api.http.get("/metrics").text
    assert 'jobnik_tasks_held_back{reason="key",stage_type="render"} 2.0' in metrics
    assert 'jobnik_tasks_held_back{reason="limit",stage_type="render"} 0.0' in metrics
    queue = api.http.get("/v1/queues").json()["items"][0]
    assert (queue["stageType"], queue["queued"], queue["heldBack"]) == ("render", 2, 0)
    assert queue["heldByKey"] == 2


@pytest.mark.parametrize("value", [0, -1, MAX_PER_KEY + 1])
def test_a_bad_key_limit_is_a_named_400_and_writes_nothing(api: Api, value: int) -> None:
    with api.nothing_written():
        r = api.http.put("/v1/limits/render/keys", json={"maxInProgress": value})
    assert (r.status_code, r.json()["code"]) == (400, "INVALID_LIMIT"), r.text


def test_a_bad_concurrency_key_is_a_named_400_and_writes_nothing(api: Api) -> None:
    with api.nothing_written():
        r = api.http.post(
            "/v1/jobs", json={"name": "nightly", "data": {}, "concurrencyKey": "k" * 101}
        )
    assert (r.status_code, r.json()["code"]) == (400, "INVALID_CONCURRENCY_KEY"), r.text
    r = api.http.delete("/v1/limits/render/keys")
    assert (r.status_code, r.json()["code"]) == (404, "LIMIT_NOT_FOUND")


@pytest.mark.parametrize("seed", range(8))
def test_random_work_never_runs_more_of_a_key_than_its_limit_nor_leaves_one_waiting(
    api: Api, seed: int
) -> None:
    """Jobs of random keys, sizes and priorities; random dequeues (single and batched) and
    reports: no key ever has more than the limit in progress, and a dequeue finds nothing only
    when every key with queued tasks is at its limit."""
    rng = random.Random(seed)
    limit = rng.randint(1, 3)
    set_key_limit(api, "render", limit)
    key_of: dict[str, str] = {}  # stage id -> key
    for _ in range(rng.randint(2, 6)):
        key = rng.choice(["k1", "k2", None])
        extra = {"concurrencyKey": key} if key else {}
        job, stage = job_of(
            api, "render", rng.randint(1, 5), priority=rng.choice(["LOW", "HIGH"]), **extra
        )
        key_of[stage] = key or job
    running: dict[str, str] = {}  # task id -> key
    closed: set[str] = set()  # stages failed for good
    queued = {s: len(api.http.get(f"/v1/stages/{s}/tasks").json()) for s in key_of}
    for _ in range(60):
        if running and rng.random() < 0.4:
            task = rng.choice(list(running))  # (in claim order: the same walk each run)
            status = rng.choice(["COMPLETED", "COMPLETED", "FAILED"])
            answer = api.report(task, status)
            running.pop(task)
            if answer["status"] == "RETRIED":
                queued[answer["stageId"]] += 1
            elif answer["status"] == "FAILED":  # for good: its stage fails, its queue closes
                closed.add(answer["stageId"])
            continue
        count = rng.randint(1, 3)
        got = api.http.patch("/v1/stages/render/tasks/dequeue", params={"count": count}).json()
        for t in got:
            running[t["id"]] = key_of[t["stageId"]]
            queued[t["stageId"]] -= 1
        per_key: dict[str, int] = {}
        for key in running.values():
            per_key[key] = per_key.get(key, 0) + 1
        assert max(per_key.values(), default=0) <= limit
        waiting = {key_of[s] for s, n in queued.items() if n > 0 and s not in closed}
        if len(got) < count:  # nothing more: every key with queued tasks is full
            assert all(per_key.get(key, 0) == limit for key in waiting), (per_key, waiting)


def test_the_openapi_document_names_every_key_limit_answer(api: Api) -> None:
    document = api.http.get("/openapi.json").json()
    keys = document["paths"]["/v1/limits/{stageType}/keys"]
    assert "INVALID_LIMIT" in keys["put"]["responses"]["400"]["description"]
    assert "LIMIT_NOT_FOUND" in keys["delete"]["responses"]["404"]["description"]
    body = document["components"]["schemas"]["KeyLimitBody"]["properties"]["maxInProgress"]
    assert (body["minimum"], body["maximum"]) == (1, MAX_PER_KEY)
    job = document["components"]["schemas"]["CreateJob"]["properties"]
    assert job["concurrencyKey"]["maxLength"] == 100
    assert (job["fairnessWeight"]["minimum"], job["fairnessWeight"]["maximum"]) == (1, 100)
