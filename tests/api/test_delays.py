"""Delayed work and retry backoff over HTTP: notBefore on jobs, stages and tasks, the retry
policy, the reschedule commands with their reasons, and the named 400s. The server's clock is
the test's (`clock`): nothing here waits for real time."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from jobnik.workers import JobnikClient, Producer, RetryPolicy

from ..unit.builders import HeldClock
from .conftest import Api, Json, parse_time
from .test_queues import at, domain, samples, stuck
from .test_reruns import AppTransport

T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)


class Clock(HeldClock):
    def at(self, seconds: float) -> str:
        return (T0 + timedelta(seconds=seconds)).isoformat().replace("+00:00", "Z")


@pytest.fixture
def clock(api: Api) -> Clock:
    c = Clock(T0)
    domain(api).clock = c
    return c


def queued_stage(api: Api, job: Json | None = None, **stage: Any) -> Json:
    job = job or api.create_job()
    return api.add_stage(job["id"], **stage)


def test_a_delayed_task_is_dequeued_once_its_time_has_come(api: Api, clock: Clock) -> None:
    stage = queued_stage(api)
    [task] = api.add_tasks(stage["id"], notBefore=clock.at(60))
    assert parse_time(task["notBefore"]) == T0 + timedelta(seconds=60)

    clock.now = T0 + timedelta(seconds=59)
    api.dequeue_nothing(stage["type"])
    clock.now = T0 + timedelta(seconds=60)
    got = api.dequeue(stage["type"])
    assert got["id"] == task["id"]
    assert "notBefore" not in got  # dequeued: no longer waiting for a time


def test_tasks_wait_for_the_latest_of_their_job_stage_and_own_times(api: Api, clock: Clock) -> None:
    job = api.create_job(notBefore=clock.at(30))
    stage = api.add_stage(job["id"], notBefore=clock.at(10))
    assert parse_time(job["notBefore"]) == T0 + timedelta(seconds=30)
    assert parse_time(stage["notBefore"]) == T0 + timedelta(seconds=10)
    early, late = (
        api.add_tasks(stage["id"])[0],
        api.add_tasks(stage["id"], notBefore=clock.at(90))[0],
    )
    assert parse_time(early["notBefore"]) == T0 + timedelta(seconds=30)

    clock.now = T0 + timedelta(seconds=30)
    assert api.dequeue(stage["type"])["id"] == early["id"]
    api.dequeue_nothing(stage["type"])
    clock.now = T0 + timedelta(seconds=90)
    assert api.dequeue(stage["type"])["id"] == late["id"]


def test_a_ready_task_is_not_held_up_by_a_delayed_one_queued_before_it(
    api: Api, clock: Clock
) -> None:
    stage = queued_stage(api)
    api.add_tasks(stage["id"], 3, notBefore=clock.at(3600))
    [ready] = api.add_tasks(stage["id"])
    assert api.dequeue(stage["type"])["id"] == ready["id"]
    api.dequeue_nothing(stage["type"])


def test_the_queues_and_the_metrics_count_the_tasks_waiting_for_their_time(
    api: Api, clock: Clock
) -> None:
    at(api, T0)
    stage = queued_stage(api, type="later")
    api.add_tasks(stage["id"], 2, notBefore=clock.at(60))
    api.add_tasks(stage["id"], 1, notBefore=clock.at(120))
    api.add_tasks(stage["id"])

    def delayed() -> tuple[int, int, float]:
        [queue] = [
            q for q in api.http.get("/v1/queues").json()["items"] if q["stageType"] == "later"
        ]
        metric = samples(api.http.get("/metrics").text)
        by_type = (("stage_type", "later"),)
        return (
            queue["queued"],
            queue["delayed"],
            metric.get(("jobnik_queue_tasks_delayed", by_type), 0),
        )

    assert delayed() == (4, 3, 3)
    at(api, T0 + timedelta(seconds=60))  # two are due: waiting for a worker, not for a time
    assert delayed() == (4, 1, 1)
    at(api, T0 + timedelta(seconds=120))
    assert delayed() == (4, 0, 0)  # (a gauge at zero is not served)


def test_a_retry_waits_as_its_stage_policy_says(api: Api, clock: Clock) -> None:
    policy = {"initialSeconds": 10, "coefficient": 3, "maxSeconds": 60}
    stage = queued_stage(
        api,
        retryPolicy=policy,
    )
    assert stage["retryPolicy"] == {**policy, "jitter": 0.0}
    [task] = api.add_tasks(stage["id"], maxAttempts=5)

    for wait in (10, 30, 60):
        api.dequeue(stage["type"])
        retried = api.report(task["id"], "FAILED")
        assert retried["status"] == "RETRIED"
        assert parse_time(retried["notBefore"]) == clock.now + timedelta(seconds=wait)
        assert parse_time(api.task(task["id"])["notBefore"]) == clock.now + timedelta(seconds=wait)
        clock.now += timedelta(seconds=wait - 1)
        api.dequeue_nothing(stage["type"])
        clock.now += timedelta(seconds=1)


def test_a_stage_takes_its_jobs_retry_policy_when_it_names_none(api: Api, clock: Clock) -> None:
    job = api.create_job(retryPolicy={"initialSeconds": 5, "maxSeconds": 5})
    stage = api.add_stage(job["id"])
    [task] = api.add_tasks(stage["id"])
    api.dequeue(stage["type"])
    retried = api.report(task["id"], "FAILED")
    assert parse_time(retried["notBefore"]) == T0 + timedelta(seconds=5)


def test_without_a_policy_a_retry_is_dequeued_at_once_as_jobnik_does(
    api: Api, clock: Clock
) -> None:
    stage = queued_stage(api)
    [task] = api.add_tasks(stage["id"])
    api.dequeue(stage["type"])
    retried = api.report(task["id"], "FAILED")
    assert "notBefore" not in retried
    assert api.dequeue(stage["type"])["id"] == task["id"]


def test_a_task_is_brought_forward_and_postponed_with_a_reason(api: Api, clock: Clock) -> None:
    stage = queued_stage(api)
    [task] = api.add_tasks(stage["id"], notBefore=clock.at(3600))
    url = f"/v1/tasks/{task['id']}/not-before"

    r = api.http.patch(url, json={"notBefore": clock.at(7200), "reason": "dependency down"})
    assert r.status_code == 200, r.text
    assert parse_time(r.json()["notBefore"]) == T0 + timedelta(seconds=7200)
    r = api.http.patch(url, json={"notBefore": None, "reason": "dependency back"})
    assert r.status_code == 200, r.text
    assert "notBefore" not in r.json()
    assert api.events_of(task["id"])[-2:] == ["TaskRescheduled", "TaskRescheduled"]
    history = api.http.get(f"/v1/jobs/{stage['jobId']}/history").json()
    reasons = [e.get("reason") for e in history["items"] if e["type"] == "TaskRescheduled"]
    assert reasons == ["dependency down", "dependency back"]
    assert api.dequeue(stage["type"])["id"] == task["id"]


def test_a_stage_reschedule_moves_its_queued_tasks_and_those_added_later(
    api: Api, clock: Clock
) -> None:
    stage = queued_stage(api)
    first = api.add_tasks(stage["id"], 2)
    r = api.http.patch(
        f"/v1/stages/{stage['id']}/not-before", json={"notBefore": clock.at(100), "reason": "x"}
    )
    assert r.status_code == 200, r.text
    assert parse_time(r.json()["notBefore"]) == T0 + timedelta(seconds=100)
    later = api.add_tasks(stage["id"])
    for t in [*first, *later]:
        assert parse_time(api.task(t["id"])["notBefore"]) == T0 + timedelta(seconds=100)
    api.dequeue_nothing(stage["type"])
    clock.now = T0 + timedelta(seconds=100)
    got = {api.dequeue(stage["type"])["id"] for _ in range(3)}
    assert got == {t["id"] for t in [*first, *later]}


def test_a_job_reschedule_moves_its_queued_tasks_but_not_a_running_one(
    api: Api, clock: Clock
) -> None:
    job = api.create_job(notBefore=clock.at(50))
    first, second = api.add_stage(job["id"]), api.add_stage(job["id"])
    queued = api.add_tasks(first["id"], 2)
    clock.advance(50)
    running = api.dequeue(first["type"])
    r = api.http.patch(
        f"/v1/jobs/{job['id']}/not-before", json={"notBefore": clock.at(500), "reason": "later"}
    )
    assert r.status_code == 200, r.text
    assert parse_time(r.json()["notBefore"]) == T0 + timedelta(seconds=500)

    [waiting] = [t for t in queued if t["id"] != running["id"]]
    assert parse_time(api.task(waiting["id"])["notBefore"]) == T0 + timedelta(seconds=500)
    assert "notBefore" not in api.task(running["id"])
    assert api.events_of(job["id"])[-1] == "JobRescheduled"
    api.dequeue_nothing(first["type"])
    assert second["status"] == "CREATED"


def test_a_running_task_has_no_time_to_change(api: Api, clock: Clock) -> None:
    stage = queued_stage(api)
    [task] = api.add_tasks(stage["id"])
    api.dequeue(stage["type"])
    with api.nothing_written():
        r = api.http.patch(
            f"/v1/tasks/{task['id']}/not-before", json={"notBefore": None, "reason": "x"}
        )
    assert (r.status_code, r.json()["code"]) == (400, "TASK_NOT_QUEUED")


BAD_TIMES = ["tomorrow", "2030-01-01T00:00:00", "2030-02-30T00:00:00Z", "", "1700000000"]
BAD_POLICIES: list[dict[str, Any]] = [
    {"initialSeconds": 0},
    {"initialSeconds": 10, "maxSeconds": 5},
    {"initialSeconds": 1, "coefficient": 0.5},
    {"initialSeconds": 1, "jitter": 2},
]


@pytest.mark.parametrize("text", BAD_TIMES)
def test_a_not_before_that_does_not_parse_or_has_no_zone_is_a_named_400(
    api: Api, text: str
) -> None:
    job = api.create_job()
    stage = api.add_stage(job["id"])
    calls: list[Callable[[], Any]] = [
        lambda: api.http.post("/v1/jobs", json={"name": "jj", "data": {}, "notBefore": text}),
        lambda: api.http.post(
            f"/v1/jobs/{job['id']}/stage", json={"type": "tt", "data": {}, "notBefore": text}
        ),
        lambda: api.http.post(
            f"/v1/stages/{stage['id']}/tasks", json=[{"data": {}, "notBefore": text}]
        ),
        lambda: api.http.patch(
            f"/v1/stages/{stage['id']}/not-before", json={"notBefore": text, "reason": "x"}
        ),
        lambda: api.http.patch(
            f"/v1/jobs/{job['id']}/not-before", json={"notBefore": text, "reason": "x"}
        ),
    ]
    for call in calls:
        with api.nothing_written():
            r = call()
        assert (r.status_code, r.json()["code"]) == (400, "INVALID_NOT_BEFORE"), r.text


def refused_at_creation(api: Api, fields: Json, code: str) -> None:
    """A job's and a stage's creation with `fields` are refused, 400 `code`, writing nothing."""
    job = api.create_job()
    for url, body in [
        ("/v1/jobs", {"name": "jj", "data": {}}),
        (f"/v1/jobs/{job['id']}/stage", {"type": "tt", "data": {}}),
    ]:
        with api.nothing_written():
            r = api.http.post(url, json={**body, **fields})
        assert (r.status_code, r.json()["code"]) == (400, code), r.text


@pytest.mark.parametrize("policy", BAD_POLICIES)
def test_a_retry_policy_out_of_bounds_is_a_named_400(api: Api, policy: Json) -> None:
    refused_at_creation(api, {"retryPolicy": policy}, "INVALID_RETRY_POLICY")


def test_the_new_routes_are_documented(api: Api) -> None:
    paths = api.http.get("/openapi.json").json()["paths"]
    for path in (
        "/v1/tasks/{taskId}/not-before",
        "/v1/stages/{stageId}/not-before",
        "/v1/jobs/{jobId}/not-before",
    ):
        answers = paths[path]["patch"]["responses"]
        assert {"200", "400", "404"} <= set(answers), path


def test_the_producer_sends_not_before_times_and_retry_policies(api: Api, clock: Clock) -> None:
    producer = Producer(JobnikClient("http://app", transport=AppTransport(api), retries=0))
    policy = RetryPolicy(initial_seconds=7, coefficient=2, max_seconds=70, jitter=0.1)
    job = producer.create_job(
        "sdk-job", {}, not_before=T0 + timedelta(seconds=5), deadline=T0 + timedelta(hours=1)
    )
    assert api.job(job.id)["deadline"] == "2030-01-01T13:00:00Z"
    stage = producer.create_stage(job.id, "sdk-stage", {}, retry_policy=policy)
    [task] = producer.create_tasks(stage.id, [{}], not_before=T0 + timedelta(seconds=20))
    assert task.not_before == T0 + timedelta(seconds=20)
    assert api.stage(stage.id)["retryPolicy"] == policy.to_json()

    moved = producer.reschedule_task(task.id, None, reason="sooner")
    assert moved.not_before is None
    assert api.events_of(task.id)[-1] == "TaskRescheduled"
    assert producer.reschedule_stage(stage.id, None, reason="r").id == stage.id
    assert producer.reschedule_job(job.id, None, reason="r").id == job.id
    assert producer.client.patch(f"/v1/stages/{stage.type}/tasks/dequeue")["id"] == task.id
    with pytest.raises(ValueError, match="time zone"):
        producer.create_tasks(stage.id, [{}], not_before=datetime(2030, 1, 1))


def test_the_console_shows_when_a_queued_task_may_run(api: Api, clock: Clock) -> None:
    stage = queued_stage(api)
    api.add_tasks(stage["id"], notBefore="2030-01-01T13:30:00+00:00")

    page = api.http.get(f"/ui/jobs/{stage['jobId']}", params={"stage": stage["id"]})

    assert page.status_code == 200
    assert "not before 2030-01-01 13:30" in page.text


def test_an_expired_lease_retries_after_the_policy_wait_too(api: Api, clock: Clock) -> None:
    stage = queued_stage(api, retryPolicy={"initialSeconds": 30, "maxSeconds": 30})
    [task] = api.add_tasks(stage["id"])
    r = api.http.patch(f"/v1/stages/{stage['type']}/tasks/dequeue", params={"lease_seconds": 10})
    assert r.status_code == 200, r.text
    clock.advance(11)

    assert domain(api).sweep() == 1

    swept = api.task(task["id"])
    assert swept["status"] == "RETRIED"
    assert parse_time(swept["notBefore"]) == T0 + timedelta(seconds=41)


def test_a_job_waiting_for_its_time_is_not_stuck(api: Api, clock: Clock) -> None:
    api.http.app.state.clock = clock  # type: ignore[attr-defined]  # (what /v1/stuck reads)
    stage = queued_stage(api)
    api.add_tasks(stage["id"], notBefore=clock.at(7200))
    clock.advance(3600)
    assert stuck(api, job_idle_seconds=60, queue_idle_seconds=1e9) == []

    clock.advance(3600)  # its time has come: from now on it waits for a worker
    kinds = [i["kind"] for i in stuck(api, job_idle_seconds=60, queue_idle_seconds=1e9)]
    assert kinds == ["JOB_IDLE"]


# -- deadlines -------------------------------------------------------------------------------


def test_a_job_past_its_deadline_fails_and_what_it_held_is_aborted(api: Api, clock: Clock) -> None:
    job = api.create_job(deadline=clock.at(600))
    assert parse_time(job["deadline"]) == T0 + timedelta(seconds=600)
    first, second = api.add_stage(job["id"]), api.add_stage(job["id"])
    queued, running = api.add_tasks(first["id"], 2)
    api.dequeue(first["type"])
    clock.advance(600)
    assert domain(api).expire_deadlines() == 0  # not before it has passed
    clock.advance(1)

    assert domain(api).expire_deadlines() == 1

    ended = api.job(job["id"])
    assert ended["status"] == "FAILED"
    assert [api.stage(s["id"])["status"] for s in (first, second)] == ["ABORTED", "ABORTED"]
    statuses = sorted(api.task(t["id"])["status"] for t in (queued, running))
    assert statuses == ["ABORTED", "IN_PROGRESS"]  # a running attempt finishes
    history = api.http.get(f"/v1/jobs/{job['id']}/history").json()["items"]
    failed = [e for e in history if e["type"] == "JobFailed"]
    assert [(e["actor"], e["reason"]) for e in failed] == [("system", "its deadline passed")]
    assert domain(api).expire_deadlines() == 0  # once


def test_a_stage_past_its_deadline_fails_with_its_job(api: Api, clock: Clock) -> None:
    job = api.create_job()
    stage = api.add_stage(job["id"], deadline=clock.at(60))
    api.add_tasks(stage["id"], 2)
    done = api.add_stage(api.create_job()["id"], deadline=clock.at(60))
    api.add_tasks(done["id"])
    api.run_task(done["type"])  # finished in time: left alone
    clock.advance(61)

    assert domain(api).expire_deadlines() == 1

    assert (api.stage(stage["id"])["status"], api.job(job["id"])["status"]) == ("FAILED", "FAILED")
    assert api.stage(done["id"])["status"] == "COMPLETED"
    api.dequeue_nothing(stage["type"])


def test_a_stage_left_waiting_in_a_failed_job_is_aborted_at_its_deadline(
    api: Api, clock: Clock
) -> None:
    job = api.create_job()
    first = api.add_stage(job["id"])
    waiting = api.add_stage(job["id"], deadline=clock.at(60))
    [task] = api.add_tasks(first["id"], maxAttempts=1)
    api.run_task(first["type"], "FAILED")
    assert (api.job(job["id"])["status"], api.stage(waiting["id"])["status"]) == (
        "FAILED",
        "CREATED",
    )
    clock.advance(61)

    assert domain(api).expire_deadlines() == 1
    assert domain(api).expire_deadlines() == 0  # it no longer takes a place in the sweep

    assert api.stage(waiting["id"])["status"] == "ABORTED"
    assert api.task(task["id"])["status"] == "FAILED"


def test_a_rerun_job_runs_again_without_its_passed_deadline(api: Api, clock: Clock) -> None:
    job = api.create_job(deadline=clock.at(60))
    stage = api.add_stage(job["id"])
    [task] = api.add_tasks(stage["id"])
    clock.advance(61)
    domain(api).expire_deadlines()
    r = api.http.post(f"/v1/jobs/{job['id']}/rerun", json={"reason": "try again"})
    assert r.status_code == 200, r.text

    assert domain(api).expire_deadlines() == 0
    assert "deadline" not in api.job(job["id"])
    assert api.dequeue(stage["type"])["id"] == task["id"]


@pytest.mark.parametrize("text", ["2029-12-31T00:00:00Z", "2030-01-01T12:00:00Z", "soon"])
def test_a_deadline_in_the_past_or_that_does_not_parse_is_a_named_400(
    api: Api, clock: Clock, text: str
) -> None:
    refused_at_creation(api, {"deadline": text}, "INVALID_DEADLINE")


def test_the_servers_sweeper_round_enforces_deadlines(api: Api, clock: Clock) -> None:
    job = api.create_job(deadline=clock.at(30))
    api.add_tasks(api.add_stage(job["id"])["id"])
    clock.advance(31)

    api.http.app.state.sweeper.sweep_once()  # type: ignore[attr-defined]

    assert api.job(job["id"])["status"] == "FAILED"
