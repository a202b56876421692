"""A stage's schedule-to-start limit over HTTP: a queued task not dequeued within it fails as
expired (by `system`, no retry), and its stage and job fail; the window counts from the latest
of its queueing, its not-before time and its stage and job opening. The server's clock is the
test's: nothing here waits for real time."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from jobnik.workers import JobnikClient, Producer

from .conftest import Api, Json
from .test_delays import T0, Clock, clock, queued_stage
from .test_queues import domain
from .test_reruns import AppTransport

__all__ = ["clock"]  # (the fixture, used by name)


def expire(api: Api) -> int:
    return domain(api).expire_queued()


def at(clock: Clock, seconds: float) -> None:
    clock.now = T0 + timedelta(seconds=seconds)


def limited(api: Api, seconds: int = 60, **stage: Any) -> Json:
    return queued_stage(api, scheduleToStartSeconds=seconds, **stage)


def test_a_task_not_dequeued_within_the_limit_expires_and_fails_its_stage_and_job(
    api: Api, clock: Clock
) -> None:
    stage = limited(api)
    assert stage["scheduleToStartSeconds"] == 60
    [task] = api.add_tasks(stage["id"])
    at(clock, 59)
    assert expire(api) == 0
    at(clock, 60)
    api.dequeue_nothing(stage["type"])  # the claim skips it before a sweep gets to it

    assert expire(api) == 1

    expired = api.task(task["id"])
    assert (expired["status"], expired["attempts"]) == ("FAILED", 0)
    assert api.stage(stage["id"])["status"] == "FAILED"
    assert api.job(stage["jobId"])["status"] == "FAILED"
    history = api.http.get(f"/v1/jobs/{stage['jobId']}/history").json()["items"]
    failed = [e for e in history if e["type"].endswith("Failed")]
    assert [(e["type"], e["actor"]) for e in failed] == [
        ("TaskFailed", "system"),
        ("StageFailed", "system"),
        ("JobFailed", "system"),
    ]
    assert {e["payload"].get("cause") for e in failed} == {"expired"}
    assert api.stage(stage["id"])["summary"]["failed"] == 1
    assert expire(api) == 0  # once


def test_a_task_dequeued_in_time_never_expires(api: Api, clock: Clock) -> None:
    stage = limited(api)
    api.add_tasks(stage["id"])
    at(clock, 59)
    task = api.dequeue(stage["type"])
    at(clock, 3600)

    assert expire(api) == 0
    assert api.task(task["id"])["status"] == "IN_PROGRESS"


def test_a_later_stage_counts_from_its_release_not_from_its_tasks_creation(
    api: Api, clock: Clock
) -> None:
    job = api.create_job()
    first = api.add_stage(job["id"])
    second = api.add_stage(job["id"], scheduleToStartSeconds=60)
    api.add_tasks(first["id"])
    api.add_tasks(second["id"])
    at(clock, 100)
    api.run_task(first["type"])  # the second stage is released now
    at(clock, 159)
    assert expire(api) == 0
    at(clock, 160)
    assert expire(api) == 1


def test_a_delayed_task_counts_from_its_not_before_time(api: Api, clock: Clock) -> None:
    stage = limited(api)
    [task] = api.add_tasks(stage["id"], notBefore=clock.at(300))
    at(clock, 359)
    assert expire(api) == 0
    assert api.dequeue(stage["type"])["id"] == task["id"]


def test_a_rescheduled_task_counts_from_its_new_time(api: Api, clock: Clock) -> None:
    stage = limited(api)
    [task] = api.add_tasks(stage["id"])
    at(clock, 50)
    r = api.http.patch(
        f"/v1/tasks/{task['id']}/not-before", json={"notBefore": clock.at(100), "reason": "x"}
    )
    assert r.status_code == 200, r.text
    at(clock, 159)
    assert expire(api) == 0
    at(clock, 160)
    assert expire(api) == 1


def test_a_paused_job_stops_the_clock_and_a_resume_starts_it_again(api: Api, clock: Clock) -> None:
    stage = limited(api)
    api.add_tasks(stage["id"])
    at(clock, 30)
    api.set_job_status(stage["jobId"], "PAUSED")
    at(clock, 500)
    assert expire(api) == 0
    api.set_job_status(stage["jobId"], "PENDING")
    at(clock, 559)
    assert expire(api) == 0
    at(clock, 560)
    assert expire(api) == 1


def test_a_retried_task_counts_from_its_retry_due_time(api: Api, clock: Clock) -> None:
    stage = limited(api, retryPolicy={"initialSeconds": 30})
    api.add_tasks(stage["id"], maxAttempts=3)
    task = api.dequeue(stage["type"])
    at(clock, 10)
    api.report(task["id"], "FAILED")  # retried, due at 40
    at(clock, 99)
    assert expire(api) == 0
    at(clock, 100)
    assert expire(api) == 1
    assert api.task(task["id"])["attempts"] == 1  # the one the worker spent; expiry spends none


def test_a_stage_takes_its_jobs_limit_when_it_names_none(api: Api, clock: Clock) -> None:
    job = api.create_job(scheduleToStartSeconds=120)
    assert job["scheduleToStartSeconds"] == 120
    own, inherited = api.add_stage(job["id"], scheduleToStartSeconds=30), api.add_stage(job["id"])
    assert (own["scheduleToStartSeconds"], inherited["scheduleToStartSeconds"]) == (30, 120)


@pytest.mark.parametrize("seconds", [0, -1, 10_000_001])
def test_a_limit_out_of_bounds_is_refused_and_nothing_is_written(api: Api, seconds: int) -> None:
    job = api.create_job()
    with api.nothing_written():
        for url, body in (
            ("/v1/jobs", {"name": "nightly", "data": {}}),
            (f"/v1/jobs/{job['id']}/stage", {"type": "t", "data": {}}),
        ):
            r = api.http.post(url, json={**body, "scheduleToStartSeconds": seconds})
            assert r.status_code == 400, r.text
            assert r.json()["code"] == "INVALID_SCHEDULE_TO_START"


@pytest.mark.parametrize("seconds", ["soon", 1.5])
def test_a_limit_that_is_not_a_whole_number_is_refused(api: Api, seconds: Any) -> None:
    with api.nothing_written():
        r = api.http.post(
            "/v1/jobs", json={"name": "nightly", "data": {}, "scheduleToStartSeconds": seconds}
        )
    assert r.status_code == 400, r.text
    assert r.json()["code"] in ("INVALID_SCHEDULE_TO_START", "VALIDATION_ERROR")


def test_the_sdk_sets_the_limit_on_a_job_and_a_stage(api: Api) -> None:
    producer = Producer(JobnikClient("http://app", transport=AppTransport(api), retries=0))
    job = producer.create_job("sdk-job", {}, schedule_to_start_seconds=600)
    stage = producer.create_stage(job.id, "sdk-stage", {}, schedule_to_start_seconds=45)
    inherited = producer.create_stage(job.id, "sdk-other", {})

    assert api.job(job.id)["scheduleToStartSeconds"] == 600
    assert api.stage(stage.id)["scheduleToStartSeconds"] == 45
    assert api.stage(inherited.id)["scheduleToStartSeconds"] == 600


def test_the_console_shows_the_limits_and_deadlines_of_a_job_and_its_stages(
    api: Api, clock: Clock
) -> None:
    job = api.create_job(scheduleToStartSeconds=900, deadline=clock.at(3600))
    api.add_stage(job["id"], scheduleToStartSeconds=60, deadline=clock.at(1800))

    page = api.http.get(f"/ui/jobs/{job['id']}").text

    assert "900 s (its stages' default)" in page
    assert "tasks expire if not started within 60 s" in page
    assert "deadline 2030-01-01 12:30:00" in page
