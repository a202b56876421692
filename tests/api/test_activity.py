"""Activity minute by minute: each stage type's tasks and queued count, a job's completions, read
from the activity projection, and the bounds on what one answer holds."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from jobnik.projections.catchup.runner import wait_for

from .conftest import Api, parse_time
from .test_queues import at

T0 = datetime(2030, 1, 1, 9, 0, tzinfo=UTC)


def caught_up(api: Api) -> None:
    store = api.http.app.state.store  # type: ignore[attr-defined]
    assert wait_for(store, "activity", api.position, 10) >= api.position


def minutes(api: Api, **params: Any) -> dict[str, list[dict[str, Any]]]:
    r = api.http.get("/v1/activity", params=params)
    assert r.status_code == 200, r.text
    return {item["stageType"]: item["minutes"] for item in r.json()["items"]}


def test_each_minute_shows_what_a_types_tasks_did_and_the_queue_at_its_end(api: Api) -> None:
    at(api, T0)
    job = api.create_job("charted")
    stage = api.add_stage(job["id"], type="render")
    api.add_tasks(stage["id"], 4, maxAttempts=2)
    at(api, T0 + timedelta(minutes=1))
    api.run_task("render")
    api.run_task("render", "FAILED")  # retried: queued again
    at(api, T0 + timedelta(minutes=3))
    api.run_task("render")
    caught_up(api)
    at(api, T0 + timedelta(minutes=4, seconds=30))

    got = minutes(api, minutes=5)["render"]

    assert [parse_time(m["start"]) for m in got] == [T0 + timedelta(minutes=i) for i in range(5)]
    assert [
        (m["enqueued"], m["dequeued"], m["completed"], m["retried"], m["failed"], m["queued"])
        for m in got
    ] == [
        (4, 0, 0, 0, 0, 4),
        (1, 2, 1, 1, 0, 3),
        (0, 0, 0, 0, 0, 3),
        (0, 1, 1, 0, 0, 2),
        (0, 0, 0, 0, 0, 2),
    ]
    [queue] = api.http.get("/v1/queues").json()["items"]
    assert queue["queued"] == got[-1]["queued"] == 2


def test_the_window_shows_the_types_with_queued_tasks_or_activity_a_page_at_a_time(
    api: Api,
) -> None:
    at(api, T0)
    for stage_type in ("a-type", "b-type", "c-type"):
        api.add_tasks(api.add_stage(api.create_job()["id"], type=stage_type)["id"], 1)
    api.run_task("c-type")  # nothing left queued: shown while its minute is in the window
    caught_up(api)

    at(api, T0 + timedelta(minutes=10))
    first = api.http.get("/v1/activity", params={"page_size": 2}).json()
    second = api.http.get("/v1/activity", params={"page_size": 2, "page": 2}).json()
    at(api, T0 + timedelta(hours=2))
    later = minutes(api)
    one = minutes(api, stage_type="b-type", minutes=1440)

    assert (first["total"], [i["stageType"] for i in first["items"]]) == (3, ["a-type", "b-type"])
    assert [i["stageType"] for i in second["items"]] == ["c-type"]
    assert sorted(later) == ["a-type", "b-type"]  # c-type: idle, nothing queued
    assert [m["queued"] for m in later["a-type"]] == [1] * 60
    assert len(one["b-type"]) == 1440
    assert sum(m["enqueued"] for m in one["b-type"]) == 1


def steady(api: Api, tasks: int, minutes: tuple[int, ...]) -> str:
    """A job of `tasks` tasks, one completed at each of `minutes` after T0; its id."""
    at(api, T0)
    job = api.create_job("steady")
    api.add_tasks(api.add_stage(job["id"], type="steady")["id"], tasks)
    for minute in minutes:
        at(api, T0 + timedelta(minutes=minute))
        api.run_task("steady")
    caught_up(api)
    return str(job["id"])


def test_a_jobs_completions_minute_by_minute_with_the_quiet_minutes_between(api: Api) -> None:
    job = {"id": steady(api, 4, (1, 1, 4))}

    r = api.http.get(f"/v1/jobs/{job['id']}/activity")

    assert r.status_code == 200, r.text
    assert r.json()["jobId"] == job["id"]
    assert [(parse_time(m["start"]), m["completed"]) for m in r.json()["minutes"]] == [
        (T0 + timedelta(minutes=1), 2),
        (T0 + timedelta(minutes=2), 0),
        (T0 + timedelta(minutes=3), 0),
        (T0 + timedelta(minutes=4), 1),
    ]


def test_what_one_answer_would_hold_beyond_its_bounds_is_refused(api: Api) -> None:
    refused = [
        api.http.get("/v1/activity", params=p)
        for p in ({"minutes": 0}, {"minutes": 1441}, {"page_size": 101})
    ]
    unknown = api.http.get("/v1/jobs/8d1f3b51-29b4-4d2c-8d0b-0f5c6a1e2d3f/activity")

    assert [(r.status_code, r.json()["code"]) for r in refused] == [(400, "VALIDATION_ERROR")] * 3
    assert (unknown.status_code, unknown.json()["code"]) == (404, "JOB_NOT_FOUND")


def test_a_page_of_more_minutes_than_an_answer_holds_has_fewer_stage_types(api: Api) -> None:
    for n in range(12):
        api.add_tasks(api.add_stage(api.create_job()["id"], type=f"wide-{n:02}")["id"])
    caught_up(api)

    wide = api.http.get("/v1/activity", params={"page_size": 12, "minutes": 1440})

    assert wide.status_code == 200, wide.text
    assert (wide.json()["total"], len(wide.json()["items"])) == (12, 10)
