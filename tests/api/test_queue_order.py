"""A stage type's queue order over HTTP: first in, first out by default; fair turns between the
jobs of one priority once an operator sets it, each change an event; priority still first."""

from __future__ import annotations

import random
from typing import Any

import pytest

from jobnik.domain.limits import limit_id

from .conftest import Api, Json


def set_order(api: Api, stage_type: str, order: str, **body: Any) -> Json:
    r = api.http.put(f"/v1/limits/{stage_type}/order", json={"order": order, **body})
    assert r.status_code == 200, r.text
    return dict(r.json())


def job_of(api: Api, stage_type: str, n: int, **job: Any) -> str:
    """A job with one stage of `n` tasks of `stage_type`: its stage's id."""
    made = api.create_job(**job)
    stage = api.add_stage(made["id"], type=stage_type)
    api.add_tasks(stage["id"], n)
    return str(stage["id"])


def taken(api: Api, stage_type: str, n: int, names: dict[str, str]) -> list[str]:
    """Whose (by stage id in `names`) each of the next `n` dequeues of `stage_type` took."""
    return [names[api.dequeue(stage_type)["stageId"]] for _ in range(n)]


def test_first_in_first_out_is_the_default(api: Api) -> None:
    big = job_of(api, "render", 4)
    small = job_of(api, "render", 2)
    assert taken(api, "render", 6, {big: "big", small: "small"}) == ["big"] * 4 + ["small"] * 2
    assert api.http.get("/v1/limits").json() == {"total": 0, "items": []}


def test_fair_order_takes_turns_between_the_jobs_of_one_priority(api: Api) -> None:
    made = set_order(api, "render", "fair", reason="tenants share the farm")
    assert (made["order"], made["room"], made["reason"]) == ("fair", 0, "tenants share the farm")
    big = job_of(api, "render", 6)
    names = {big: "big"}
    assert taken(api, "render", 2, names) == ["big", "big"]
    small = job_of(api, "render", 2)  # queued behind four of big's: it takes turns with them
    names[small] = "small"
    assert taken(api, "render", 6, names) == ["big", "small", "big", "small", "big", "big"]


def test_priority_still_comes_first_under_fair_order(api: Api) -> None:
    set_order(api, "render", "fair")
    low = job_of(api, "render", 2, priority="LOW")
    high = job_of(api, "render", 2, priority="HIGH")
    other = job_of(api, "render", 1, priority="HIGH")
    names = {low: "low", high: "high", other: "other"}
    assert taken(api, "render", 5, names) == ["high", "other", "high", "low", "low"]


def test_a_retried_task_takes_its_jobs_next_turn(api: Api) -> None:
    set_order(api, "render", "fair")
    a = job_of(api, "render", 2, name="job-a")
    b = job_of(api, "render", 2, name="job-b")
    first = api.dequeue("render")
    assert first["stageId"] == a
    r = api.http.put(f"/v1/tasks/{first['id']}/status", json={"status": "FAILED"})
    assert (r.status_code, r.json()["status"]) == (200, "RETRIED"), r.text
    # a's other task and b's two are ahead of the retry, which goes after a's last turn
    assert taken(api, "render", 4, {a: "a", b: "b"}) == ["b", "a", "b", "a"]


def test_a_stage_released_later_starts_at_the_head_of_the_queue(api: Api) -> None:
    set_order(api, "render", "fair")
    two = api.create_job(name="two-stages")
    first = api.add_stage(two["id"], type="prepare")
    api.add_tasks(first["id"], 1)
    later = api.add_stage(two["id"], type="render")  # waits for `first`: its tasks are closed
    api.add_tasks(later["id"], 3)
    busy = job_of(api, "render", 8)
    names = {busy: "busy", later["id"]: "two"}
    assert taken(api, "render", 4, names) == ["busy"] * 4
    api.report(api.dequeue("prepare")["id"], "COMPLETED")  # releases `later`
    # its turns moved to the head (its tasks were queued first: first of each turn), so it
    # alternates with busy instead of taking its three turns from before busy's first
    assert taken(api, "render", 6, names) == ["two", "busy", "two", "busy", "two", "busy"]


def test_the_order_is_changed_each_change_an_event_and_fifo_leaves_the_list(api: Api) -> None:
    set_order(api, "render", "fair")
    with api.nothing_written():
        set_order(api, "render", "fair")  # the order it has: nothing recorded
    listed = api.http.get("/v1/limits").json()
    assert [(v["stageType"], v["order"]) for v in listed["items"]] == [("render", "fair")]
    set_order(api, "render", "fifo", reason="back to Jobnik's order")
    assert api.events_of(str(limit_id("render"))) == [
        "LimitsCreated",
        "QueueOrderSet",
        "QueueOrderSet",
    ]
    assert api.http.get("/v1/limits").json()["total"] == 0
    assert api.http.get("/v1/limits/render").json()["code"] == "LIMIT_NOT_FOUND"


def test_a_bad_order_is_refused_and_writes_nothing(api: Api) -> None:
    for body in ({"order": "random"}, {"order": 1}, {}, {"order": "fair", "extra": 1}):
        with api.nothing_written():
            r = api.http.put("/v1/limits/render/order", json=body)
        assert (r.status_code, set(r.json())) == (400, {"message", "code"}), r.text
    with api.nothing_written():
        r = api.http.put(f"/v1/limits/{'x' * 51}/order", json={"order": "fair"})
    assert r.status_code == 400, r.text


def test_the_queues_show_each_types_order(api: Api) -> None:
    job_of(api, "render", 1)
    job_of(api, "encode", 1)
    set_order(api, "render", "fair")
    items = api.http.get("/v1/queues").json()["items"]
    assert {q["stageType"]: q["order"] for q in items} == {"encode": "fifo", "render": "fair"}


def test_jobs_of_one_fairness_key_take_their_turns_as_one(api: Api) -> None:
    set_order(api, "render", "fair")
    a1 = job_of(api, "render", 3, fairnessKey="tenant-a")
    a2 = job_of(api, "render", 3, fairnessKey="tenant-a")
    b = job_of(api, "render", 3, fairnessKey="tenant-b")
    names = {a1: "a", a2: "a", b: "b"}
    # tenant a's six tasks take six turns, not two jobs' worth of three: b gets half
    assert taken(api, "render", 6, names) == ["a", "b", "a", "b", "a", "b"]
    got = api.http.get(f"/v1/stages/{a2}").json()
    job = api.http.get(f"/v1/jobs/{got['jobId']}").json()
    assert job["fairnessKey"] == "tenant-a"


def test_a_bad_fairness_key_is_refused_and_writes_nothing(api: Api) -> None:
    for key in ("", "k" * 101):
        with api.nothing_written():
            r = api.http.post("/v1/jobs", json={"name": "keyed", "data": {}, "fairnessKey": key})
        assert (r.status_code, r.json()["code"]) == (400, "INVALID_FAIRNESS_KEY"), r.text


@pytest.mark.parametrize("seed", range(12))
def test_jobs_queued_together_are_served_round_robin_within_each_priority(
    api: Api, seed: int
) -> None:
    """Random jobs of random sizes and priorities, all queued before the first claim: the claims
    take the highest priority's jobs first, and within a priority one task of each job still
    holding any, in the order the jobs were queued, round after round."""
    rng = random.Random(seed)
    stage_type = f"rr-{seed}"
    set_order(api, stage_type, "fair")
    ranks = {"VERY_HIGH": 0, "HIGH": 1, "MEDIUM": 2, "LOW": 3, "VERY_LOW": 4}
    jobs = []  # (priority, stage id, size), in the order queued
    for _ in range(rng.randint(2, 6)):
        priority = rng.choice(list(ranks))
        size = rng.randint(1, 5)
        jobs.append((priority, job_of(api, stage_type, size, priority=priority), size))
    expected: list[str] = []
    for priority in sorted({p for p, _, _ in jobs}, key=ranks.__getitem__):
        left = {stage: size for p, stage, size in jobs if p == priority}
        while any(left.values()):
            for stage in [s for p, s, _ in jobs if p == priority]:
                if left[stage]:
                    expected.append(stage)
                    left[stage] -= 1
    names = {stage: stage for _, stage, _ in jobs}
    assert taken(api, stage_type, len(expected), names) == expected
    api.dequeue_nothing(stage_type)


def test_a_weighted_job_takes_as_many_places_at_each_turn(api: Api) -> None:
    set_order(api, "render", "fair")
    heavy = job_of(api, "render", 6, fairnessWeight=3)
    light = job_of(api, "render", 3)
    names = {heavy: "heavy", light: "light"}
    assert taken(api, "render", 8, names) == ["heavy"] * 3 + ["light"] + ["heavy"] * 3 + ["light"]
    assert api.http.get(f"/v1/jobs/{api.stage(heavy)['jobId']}").json()["fairnessWeight"] == 3


def test_a_weighted_key_packs_its_tasks_across_commands(api: Api) -> None:
    """Tasks queued one command at a time fill their key's last turn up to its weight."""
    set_order(api, "render", "fair")
    made = api.create_job(fairnessKey="t", fairnessWeight=2)
    heavy = str(api.add_stage(made["id"], type="render")["id"])
    for _ in range(4):
        api.add_tasks(heavy, 1)
    light = job_of(api, "render", 2)
    assert taken(api, "render", 6, {heavy: "heavy", light: "light"}) == [
        "heavy",
        "heavy",
        "light",
        "heavy",
        "heavy",
        "light",
    ]


@pytest.mark.parametrize("weight", [0, -1, 101, 2.5])
def test_a_bad_fairness_weight_is_a_named_400_and_writes_nothing(api: Api, weight: Any) -> None:
    with api.nothing_written():
        r = api.http.post(
            "/v1/jobs", json={"name": "nightly", "data": {}, "fairnessWeight": weight}
        )
    assert r.status_code == 400, r.text
    assert r.json()["code"] in ("INVALID_FAIRNESS_WEIGHT", "VALIDATION_ERROR")


def test_two_retries_of_a_stage_in_one_batch_take_two_turns(api: Api) -> None:
    set_order(api, "render", "fair")
    a = job_of(api, "render", 2)
    b = job_of(api, "render", 2)
    c = job_of(api, "render", 3)
    names = {a: "a", b: "b", c: "c"}
    first = [api.dequeue("render") for _ in range(5)]
    assert [names[t["stageId"]] for t in first] == ["a", "b", "c", "a", "b"]
    failed = [{"id": t["id"], "attempt": 1, "status": "FAILED"} for t in first if t["stageId"] == a]
    r = api.http.put("/v1/tasks/status", json=failed)
    assert r.status_code == 200, r.text
    # c's two at turns 1 and 2; a's retries at its next turns from the head: 1, then 2
    assert taken(api, "render", 4, names) == ["c", "a", "c", "a"]
