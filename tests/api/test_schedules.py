"""/v1/schedules over HTTP on both backends: creation and its named refusals, reads, the
operator's commands with their reasons, runs, stuck runs, metrics and the OpenAPI document."""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from .conftest import Api, Json, Secured, parse_time
from .test_queues import at

HOURLY: Json = {
    "name": "hourly-report",
    "intervalSeconds": 3600,
    "job": {
        "name": "report",
        "data": {"kind": "hourly"},
        "priority": "HIGH",
        "stages": [{"type": "render", "tasks": [{"data": {"page": 1}}, {"data": {"page": 2}}]}],
    },
}
HOOKED: Json = {
    "name": "planner",
    "cron": "30 2 * * *",
    "timezone": "Europe/Berlin",
    "job": {"name": "nightly", "hook": "plan"},
    "overlapPolicy": "allowAll",
}
# (a template's tasks are bounded in all, as one request's are: each run creates them at once)
TYPES_600: Json = {"type": "render", "tasks": [{}] * 600}


def create(api: Api, body: Json = HOURLY, **changes: Any) -> Json:
    r = api.http.post("/v1/schedules", json={**body, **changes})
    assert r.status_code == 201, r.text
    return dict(r.json())


def test_a_schedule_is_created_and_read_with_its_next_fire_times(api: Api) -> None:
    made = create(api)
    assert made["name"] == "hourly-report"
    assert (made["overlapPolicy"], made["catchupPolicy"]) == ("skip", "latest")
    assert made["catchupWindowSeconds"] == 86400
    assert made["paused"] is False
    assert made["counts"] == dict.fromkeys(
        ("fired", "skipped", "buffered", "missed", "completed", "failed", "aborted"), 0
    )
    times = made["nextFireTimes"]
    assert len(times) == 5
    assert times[0] == made["nextFireTime"]
    assert all(t.endswith(":00:00Z") or t.endswith(":00:00+00:00") for t in times)
    assert made["job"]["stages"][0]["tasks"][1]["data"] == {"page": 2}

    got = api.http.get(f"/v1/schedules/{made['id']}", params={"next": 2}).json()
    assert got["nextFireTimes"] == times[:2]
    listed = api.http.get("/v1/schedules", params={"name": "hourly-report"}).json()
    assert (listed["total"], [s["id"] for s in listed["items"]]) == (1, [made["id"]])
    assert api.http.get("/v1/schedules", params={"name": "other"}).json()["total"] == 0


@pytest.mark.parametrize(
    ("changes", "code"),
    [
        ({"intervalSeconds": None, "cron": "61 * * * *"}, "INVALID_CRON_EXPRESSION"),
        ({"intervalSeconds": None, "cron": "0 0 30 2 *"}, "INVALID_CRON_EXPRESSION"),
        ({"intervalSeconds": None, "cron": "R * * * *"}, "INVALID_CRON_EXPRESSION"),
        ({"timezone": "Mars/Olympus"}, "INVALID_TIME_ZONE"),
        ({"timezone": "localtime"}, "INVALID_TIME_ZONE"),
        ({"intervalSeconds": 0}, "INVALID_INTERVAL"),
        ({"intervalSeconds": -60}, "INVALID_INTERVAL"),
        ({"intervalSeconds": None}, "SCHEDULE_TIMING_REQUIRED"),
        ({"cron": "@daily"}, "SCHEDULE_TIMING_REQUIRED"),
        ({"overlapPolicy": "sometimes"}, "UNKNOWN_POLICY"),
        ({"catchupPolicy": "never"}, "UNKNOWN_POLICY"),
        ({"job": {"name": "report"}}, "INVALID_JOB_TEMPLATE"),
        ({"job": {**HOURLY["job"], "hook": "plan"}}, "INVALID_JOB_TEMPLATE"),
        ({"job": {"name": "report", "stages": [TYPES_600, TYPES_600]}}, "INVALID_JOB_TEMPLATE"),
        ({"catchupWindowSeconds": 5}, "VALIDATION_ERROR"),
        ({"name": ""}, "VALIDATION_ERROR"),
    ],
)
def test_bad_input_is_refused_with_a_named_400_and_nothing_written(
    api: Api, changes: Json, code: str
) -> None:
    with api.nothing_written():
        r = api.http.post("/v1/schedules", json={**HOURLY, **changes})
    assert (r.status_code, r.json()["code"]) == (400, code), r.text


def test_a_taken_name_is_a_conflict_and_an_unknown_schedule_is_not_found(api: Api) -> None:
    create(api)
    with api.nothing_written():
        r = api.http.post("/v1/schedules", json=HOURLY)
    assert (r.status_code, r.json()["code"]) == (409, "SCHEDULE_EXISTS")
    missing = "/v1/schedules/00000000-0000-4000-8000-000000000000"
    for method, path in [
        ("GET", missing),
        ("GET", f"{missing}/runs"),
        ("POST", f"{missing}/pause"),
        ("POST", f"{missing}/resume"),
        ("POST", f"{missing}/trigger"),
        ("DELETE", missing),
    ]:
        r = api.http.request(method, path)
        assert (r.status_code, r.json()["code"]) == (404, "SCHEDULE_NOT_FOUND"), (method, path)


def test_pause_resume_trigger_backfill_and_delete_record_their_reasons(api: Api) -> None:
    made = create(api, HOOKED)
    url = f"/v1/schedules/{made['id']}"
    paused = api.http.post(f"{url}/pause", json={"reason": "maintenance"}).json()
    assert (paused["paused"], paused["pauseReason"], paused["nextFireTimes"]) == (
        True,
        "maintenance",
        [],
    )
    triggered = api.http.post(f"{url}/trigger", json={"reason": "report now"})
    assert triggered.status_code == 201, triggered.text
    run = triggered.json()
    assert run["alreadyRan"] is False
    task = api.http.patch("/v1/stages/plan/tasks/dequeue").json()
    assert task["data"]["scheduleName"] == "planner"
    assert task["data"]["trigger"] == "trigger"
    assert task["data"]["nominalTime"].replace("+00:00", "Z")[:19] == run["nominalTime"][:19]

    backfill = api.http.post(
        f"{url}/backfill",
        json={"start": "2026-03-28T00:00:00Z", "end": "2026-03-30T12:00:00Z", "reason": "fill"},
    )
    assert backfill.status_code == 201, backfill.text
    nominal = [r["nominalTime"] for r in backfill.json()["runs"]]
    assert nominal == ["2026-03-28T01:30:00Z", "2026-03-29T01:00:00Z", "2026-03-30T00:30:00Z"]
    too_many = api.http.post(
        f"{url}/backfill", json={"start": "2025-01-01T00:00:00Z", "end": "2026-01-01T00:00:00Z"}
    )
    assert (too_many.status_code, too_many.json()["code"]) == (400, "BACKFILL_TOO_LARGE")
    for start, end in [
        ("2026-01-01T00:00:00Z", "2999-01-01T00:00:00Z"),  # the end in the future
        ("0001-01-01T00:00:00+14:00", "0001-01-02T00:00:00Z"),  # the calendar's first day
        ("1969-12-31T23:00:00Z", "1970-01-01T03:00:00Z"),
    ]:
        with api.nothing_written():
            refused = api.http.post(f"{url}/backfill", json={"start": start, "end": end})
        assert (refused.status_code, refused.json()["code"]) == (400, "INVALID_BACKFILL_RANGE")

    runs = api.http.get(f"{url}/runs").json()["items"]
    assert [r["startedBy"] for r in runs] == ["trigger", "backfill", "backfill", "backfill"]
    assert runs[0]["status"] == "IN_PROGRESS"
    resumed = api.http.post(f"{url}/resume").json()
    assert resumed["paused"] is False
    assert resumed["counts"]["fired"] == 4
    gone = api.http.delete(url, params={"reason": "retired"})
    assert (gone.status_code, gone.json()["code"]) == (200, "SCHEDULE_DELETED_SUCCESSFULLY")
    assert api.http.get(url).status_code == 404

    job_history = api.http.get(f"/v1/jobs/{run['jobId']}/history").json()["items"]
    created_by = [e for e in job_history if e["type"] == "JobCreatedBySchedule"]
    assert created_by[0]["payload"]["scheduleId"] == made["id"]
    assert created_by[0]["reason"].startswith("schedule 'planner', nominal time ")


def wait_for(what: str, ready: Any, timeout: float = 20.0) -> Any:
    end = time.monotonic() + timeout
    while True:
        found = ready()
        if found:
            return found
        assert time.monotonic() < end, f"not within {timeout}s: {what}"
        time.sleep(0.05)


def test_a_schedule_whose_runs_keep_failing_is_stuck_work_and_counted(api: Api) -> None:
    made = create(api, HOOKED, name="flaky")
    url = f"/v1/schedules/{made['id']}"
    for _ in range(3):
        api.http.post(f"{url}/trigger")
        task = api.http.patch("/v1/stages/plan/tasks/dequeue").json()
        body = {"status": "FAILED", "fatal": True, "attempt": task["attempt"]}
        assert api.http.put(f"/v1/tasks/{task['id']}/status", json=body).status_code == 200

    def failing() -> list[Json]:
        items = api.http.get("/v1/stuck").json()["items"]
        return [i for i in items if i["kind"] == "SCHEDULE_RUNS_FAILING"]

    [stuck] = wait_for("the schedule among the stuck work", failing)
    assert stuck["scheduleId"] == made["id"]
    assert "flaky" in stuck["reason"]
    assert api.http.get("/v1/stuck", params={"schedule_failures": 4}).json()["items"] == []
    read = api.http.get(url).json()
    assert (read["failingRuns"], read["counts"]["failed"], read["lastStatus"]) == (3, 3, "FAILED")
    metrics = api.http.get("/metrics").text
    assert 'jobnik_schedule_fires_total{schedule="flaky"} 3.0' in metrics
    assert 'jobnik_stuck_items{kind="SCHEDULE_RUNS_FAILING"} 1.0' in metrics


def test_the_openapi_document_names_every_schedule_error(api: Api) -> None:
    paths = api.http.get("/openapi.json").json()["paths"]
    create_answers = paths["/v1/schedules"]["post"]["responses"]
    for code in (
        "INVALID_CRON_EXPRESSION",
        "INVALID_TIME_ZONE",
        "INVALID_INTERVAL",
        "UNKNOWN_POLICY",
        "SCHEDULE_TIMING_REQUIRED",
    ):
        assert code in create_answers["400"]["description"]
    assert "SCHEDULE_EXISTS" in create_answers["409"]["description"]
    backfill = paths["/v1/schedules/{scheduleId}/backfill"]["post"]["responses"]
    assert "BACKFILL_TOO_LARGE" in backfill["400"]["description"]
    assert "SCHEDULE_NOT_FOUND" in backfill["404"]["description"]
    assert "operator" in paths["/v1/schedules/{scheduleId}"]["delete"]["description"]


def actions(html: str) -> list[str]:
    return re.findall(r'<button type="button" class="action[^"]*"[^>]*>([^<]+)<', html)


def test_the_console_shows_schedules_next_fires_and_runs_with_their_actions(api: Api) -> None:
    made = create(api, HOOKED)
    for _ in range(2):
        api.http.post(f"/v1/schedules/{made['id']}/trigger")

    listing = api.http.get("/ui/schedules")
    page = api.http.get(f"/ui/schedules/{made['id']}")

    assert listing.status_code == page.status_code == 200
    assert f'href="/ui/schedules/{made["id"]}">planner</a>' in listing.text
    assert '<a href="/ui/schedules" aria-current="page">Schedules</a>' in listing.text
    assert actions(listing.text) == ["Pause", "Trigger now"]
    assert actions(page.text) == ["Pause", "Trigger now", "Delete"]
    assert page.text.count("<time datetime=") == 5  # the next fires
    assert page.text.count('<tr data-job="') == 2  # the runs
    assert f'data-url="/v1/schedules/{made["id"]}/trigger"' in page.text

    api.http.post(f"/v1/schedules/{made['id']}/pause", json={"reason": "quiet"})
    paused = api.http.get(f"/ui/schedules/{made['id']}").text
    assert actions(paused) == ["Resume", "Trigger now", "Delete"]
    assert "None while paused." in paused
    assert "(quiet)" in paused


def test_the_console_offers_a_schedules_actions_to_the_roles_that_may_do_them(
    secured: Secured,
) -> None:
    made = secured.http.post("/v1/schedules", json=HOOKED).json()
    seen = {}
    for role in ("reader", "producer", "operator"):
        page = secured.call(secured.bearers[role], "GET", f"/ui/schedules/{made['id']}")
        assert page.status_code == 200, page.text
        seen[role] = actions(page.text)
    assert seen == {
        "reader": [],
        "producer": ["Pause", "Trigger now"],
        "operator": ["Pause", "Trigger now", "Delete"],
    }


def test_a_template_stage_held_back_waits_its_delay_after_the_run_starts(api: Api) -> None:
    t0 = datetime(2030, 1, 1, 2, 0, tzinfo=UTC)
    at(api, t0)
    api.http.app.state.schedules.clock = lambda: t0  # type: ignore[attr-defined]
    job = {
        "name": "nightly",
        "stages": [
            {"type": "extract", "tasks": [{}]},
            {"type": "publish", "tasks": [{}], "delaySeconds": 600},
        ],
    }
    made = create(api, {**HOURLY, "job": job})
    assert made["job"]["stages"][1]["delaySeconds"] == 600
    assert "delaySeconds" not in made["job"]["stages"][0]
    refused = api.http.post(
        "/v1/schedules",
        json={
            **HOURLY,
            "name": "other",
            "job": {**job, "stages": [{**job["stages"][1], "delaySeconds": 0}]},
        },
    )
    assert refused.status_code == 400

    run = api.http.post(f"/v1/schedules/{made['id']}/trigger").json()
    stages = api.http.get(f"/v1/jobs/{run['jobId']}/stages").json()
    held = next(s for s in stages if s["type"] == "publish")
    assert parse_time(held["notBefore"]) == t0 + timedelta(seconds=600)
    api.run_task("extract")  # (its stage completes: the next one opens, its tasks held back)
    api.dequeue_nothing("publish")
    at(api, t0 + timedelta(seconds=600))
    api.dequeue("publish")


def test_a_template_stage_gives_each_runs_stage_its_schedule_to_start_limit(api: Api) -> None:
    job = {
        "name": "nightly",
        "stages": [{"type": "render", "tasks": [{}], "scheduleToStartSeconds": 7200}],
    }
    made = create(api, {**HOURLY, "job": job})
    assert made["job"]["stages"][0]["scheduleToStartSeconds"] == 7200
    stages = [{**job["stages"][0], "scheduleToStartSeconds": 0}]
    refused = api.http.post(
        "/v1/schedules", json={**HOURLY, "name": "other", "job": {**job, "stages": stages}}
    )
    assert refused.status_code == 400, refused.text

    run = api.http.post(f"/v1/schedules/{made['id']}/trigger").json()

    [stage] = api.http.get(f"/v1/jobs/{run['jobId']}/stages").json()
    assert stage["scheduleToStartSeconds"] == 7200
