"""Operators' reads: Jobnik's service gauges, each stage type's queue, stuck work, and the queue
metrics, against the true counts the API itself shows."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from jobnik.api.telemetry.service_metrics import db_spelling
from jobnik.domain.application import Jobnik
from jobnik.domain.work import WorkCommands
from jobnik.projections.catchup.runner import wait_for

from .conftest import Api, Json, parse_time

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]
JOBNIKS = ("ABORTED", "DELEGATED")  # task statuses Jobnik's manager does not have


def samples(text: str) -> Samples:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def caught_up(api: Api) -> None:
    """The operations projection has applied every event written so far."""
    store = api.http.app.state.store  # type: ignore[attr-defined]
    assert wait_for(store, "operations", api.position, 10) >= api.position


def domain(api: Api) -> Jobnik:
    jobnik: Jobnik = api.http.app.state.jobnik._jobnik  # type: ignore[attr-defined]
    return jobnik


def at(api: Api, now: datetime) -> None:
    """Commands and reads see `now` from here on."""
    domain(api).clock = lambda: now
    api.http.app.state.clock = lambda: now  # type: ignore[attr-defined]


def workload(api: Api) -> list[Json]:
    """Two jobs of two priorities, stages of two types, tasks in several states."""
    jobs = [api.create_job("alpha", priority="HIGH"), api.create_job("beta", priority="LOW")]
    for job in jobs:
        first = api.add_stage(job["id"], type="tiles")
        api.add_tasks(first["id"], 4, maxAttempts=2)
        api.add_stage(job["id"], type="index")
    api.run_task("tiles")
    api.run_task("tiles", "FAILED")  # retried
    api.dequeue("tiles")
    return jobs


def true_counts(api: Api, jobs: list[Json]) -> tuple[Counter[Any], Counter[Any], Counter[Any]]:
    """Jobs by status, stages by (type, status), tasks by (type, priority, status), as the
    API shows each one."""
    by_job, by_stage, by_task = Counter[Any](), Counter[Any](), Counter[Any]()
    for j in jobs:
        job = api.job(j["id"], should_return_stages="true")
        by_job[job["status"]] += 1
        for stage in job["stages"]:
            by_stage[stage["type"], stage["status"]] += 1
            tasks = api.http.get(f"/v1/stages/{stage['id']}/tasks").json()
            for t in tasks:
                by_task[stage["type"], job["priority"], t["status"]] += 1
    return by_job, by_stage, by_task


def assert_gauges_are_the_true_counts(api: Api, jobs: list[Json], got: Samples) -> None:
    """Jobnik's service gauges in `got` are the counts the API shows for `jobs` (every job)."""
    by_job, by_stage, by_task = true_counts(api, jobs)
    for status in ("CREATED", "PENDING", "IN_PROGRESS", "PAUSED", "COMPLETED", "FAILED"):
        assert got["jobnik_jobs_by_status", (("job_status", status),)] == by_job[status]
    for stage_type in ("tiles", "index"):
        for status in ("CREATED", "PENDING", "IN_PROGRESS", "WAITING", "COMPLETED"):
            key = (("stage_status", status), ("stage_type", stage_type))
            assert got["jobnik_stages_by_status", key] == by_stage[stage_type, status]
        for status in ("PENDING", "IN_PROGRESS", "COMPLETED", "RETRIED", "FAILED"):
            key = (("stage_type", stage_type), ("task_status", status))
            expected = sum(n for (t, _, s), n in by_task.items() if (t, s) == (stage_type, status))
            assert got["jobnik_tasks_by_status", key] == expected
    counts = {k[1]: v for k, v in got.items() if k[0] == "jobnik_tasks_count"}
    assert counts == {
        (("priority", db_spelling(p)), ("stage_type", t), ("task_status", db_spelling(s))): n
        for (t, p, s), n in by_task.items()
    }


def test_service_gauges_equal_the_true_counts(api: Api) -> None:
    jobs = workload(api)

    r = api.http.get("/service-metrics")
    assert r.status_code == 200, r.text
    got = samples(r.text)

    assert_gauges_are_the_true_counts(api, jobs, got)
    assert (
        got[
            "jobnik_tasks_count",
            (("priority", "High"), ("stage_type", "tiles"), ("task_status", "Pending")),
        ]
        >= 1
    )
    # the same gauges are in /metrics
    assert got.items() <= samples(api.http.get("/metrics").text).items()


def test_the_managers_task_statuses_are_zero_filled_and_jobniks_own_served_where_they_count(
    api: Api,
) -> None:
    jobs = workload(api)
    aborted = api.create_job("aborted")
    api.add_tasks(api.add_stage(aborted["id"], type="index")["id"], 3)
    api.set_job_status(aborted["id"], "ABORTED")
    jobs.append(aborted)
    by_task = true_counts(api, jobs)[2]

    got = samples(api.http.get("/service-metrics").text)

    by_type_and_status = {
        (dict(labels)["stage_type"], dict(labels)["task_status"]): n
        for (name, labels), n in got.items()
        if name == "jobnik_tasks_by_status"
    }
    manager = ("CREATED", "PENDING", "IN_PROGRESS", "COMPLETED", "FAILED", "RETRIED")
    statuses = Counter[tuple[str, str]]()
    for (t, _, status), n in by_task.items():
        statuses[t, status] += n
    every = {(t, s): statuses[t, s] for t in ("tiles", "index") for s in (*manager, *JOBNIKS)}
    assert by_type_and_status == {k: n for k, n in every.items() if n or k[1] in manager}
    assert by_type_and_status["index", "ABORTED"] == 3
    assert ("tiles", "ABORTED") not in by_type_and_status
    assert ("index", "DELEGATED") not in by_type_and_status


def test_each_scrape_reads_its_values_afresh_and_drops_the_stage_types_gone(api: Api) -> None:
    jobs = workload(api)
    gone = api.create_job("gone")
    api.add_tasks(api.add_stage(gone["id"], type="gone")["id"], 2)
    caught_up(api)
    before = samples(api.http.get("/metrics").text)
    assert (
        before["jobnik_stages_by_status", (("stage_status", "PENDING"), ("stage_type", "gone"))]
        == 1
    )
    assert before["jobnik_queue_tasks", (("stage_type", "gone"),)] == 2

    api.run_task("tiles")
    api.run_task("tiles", "FAILED")  # retried or failed for good: either way, by error
    api.set_job_status(gone["id"], "ABORTED")
    assert api.http.delete(f"/v1/jobs/{gone['id']}").status_code == 200
    caught_up(api)
    after = samples(api.http.get("/metrics").text)

    assert not [key for key in after if ("stage_type", "gone") in key[1]]
    assert_gauges_are_the_true_counts(api, jobs, after)
    tiles = (("stage_type", "tiles"),)
    assert (
        after["jobnik_task_dequeues_total", tiles]
        == before["jobnik_task_dequeues_total", tiles] + 2
    )
    assert after["jobnik_queue_tasks", tiles] == before["jobnik_queue_tasks", tiles] - 2
    error = (("cause", "error"), ("stage_type", "tiles"))
    failures = ("jobnik_task_retries_total", "jobnik_task_failures_total")
    # (a counter at zero is not served)
    assert sum(after.get((f, error), 0) for f in failures) == (
        sum(before.get((f, error), 0) for f in failures) + 1
    )
    assert samples(api.http.get("/service-metrics").text).items() <= after.items()


def test_queues_show_every_stage_type_with_tasks_and_the_oldest_age_moves(api: Api) -> None:
    t0 = datetime.now(UTC).replace(microsecond=0) + timedelta(days=1)
    at(api, t0)
    job = api.create_job("queue-one")
    stage = api.add_stage(job["id"], type="render")
    api.add_tasks(stage["id"], 1)
    at(api, t0 + timedelta(seconds=30))
    api.add_tasks(api.add_stage(api.create_job("queue-two")["id"], type="render")["id"], 2)
    api.add_stage(job["id"], type="no-tasks")
    at(api, t0 + timedelta(seconds=100))
    api.run_task("render")  # the oldest one
    api.dequeue("render")
    caught_up(api)

    at(api, t0 + timedelta(seconds=130))
    r = api.http.get("/v1/queues")
    assert r.status_code == 200, r.text
    [render] = r.json()["items"]  # no item for a stage type without tasks
    assert render == {
        "stageType": "render",
        "queued": 1,
        "oldestQueuedAt": render["oldestQueuedAt"],
        "oldestQueuedAgeSeconds": 100.0,
        "inProgress": 1,
        "completed": 1,
        "failed": 0,
        "lastDequeueAt": render["lastDequeueAt"],
        "maxInProgress": None,  # no concurrency limit
        "heldBack": 0,
        "heldByKey": 0,
        "delayed": 0,
        "order": "fifo",
    }
    assert parse_time(render["oldestQueuedAt"]) == t0 + timedelta(seconds=30)
    assert parse_time(render["lastDequeueAt"]) == t0 + timedelta(seconds=100)

    at(api, t0 + timedelta(seconds=190))
    later = api.http.get("/v1/queues").json()["items"][0]
    assert later["oldestQueuedAgeSeconds"] == 160.0
    got = samples(api.http.get("/metrics").text)
    by_type = (("stage_type", "render"),)
    assert got["jobnik_queue_oldest_task_age_seconds", by_type] == 160.0
    assert got["jobnik_queue_tasks", by_type] == 1
    assert got["jobnik_tasks_leased", by_type] == 1
    assert got["jobnik_task_dequeues_total", by_type] == 2

    api.dequeue("render")  # the queue is empty: no age
    assert api.http.get("/v1/queues").json()["items"][0]["oldestQueuedAgeSeconds"] is None


def stuck(api: Api, **params: Any) -> list[Json]:
    caught_up(api)
    r = api.http.get("/v1/stuck", params=params)
    assert r.status_code == 200, r.text
    items: list[Json] = r.json()["items"]
    return items


def test_a_task_whose_lease_expired_more_than_n_times_is_stuck_until_it_ends(api: Api) -> None:
    t0 = datetime.now(UTC) + timedelta(days=1)
    job = api.create_job("leases")
    stage = api.add_stage(job["id"], type="flaky")
    [task] = api.add_tasks(stage["id"], 1, maxAttempts=10)
    for n in range(3):
        at(api, t0 + timedelta(hours=n))
        api.dequeue("flaky")
        at(api, t0 + timedelta(hours=n, minutes=45))  # past the 30 min lease
        assert domain(api).sweep() == 1

    assert stuck(api, lease_expiries=3) == []
    [item] = stuck(api, lease_expiries=2)
    assert item == {
        "kind": "LEASE_EXPIRED_REPEATEDLY",
        "reason": item["reason"],
        "since": item["since"],
        "jobId": job["id"],
        "stageId": stage["id"],
        "taskId": task["id"],
        "stageType": "flaky",
        "scheduleId": None,
    }
    assert "3 times" in item["reason"]
    assert parse_time(item["since"]) == t0 + timedelta(hours=2, minutes=45)
    got = samples(api.http.get("/metrics").text)
    assert got["jobnik_task_leases_expired_total", (("stage_type", "flaky"),)] == 3
    assert got["jobnik_task_retries_total", (("cause", "timeout"), ("stage_type", "flaky"))] == 3

    api.run_task("flaky")
    assert stuck(api, lease_expiries=2) == []


def test_a_delegated_task_whose_children_ended_unheard_is_stuck_until_redispatched(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    parent_job = api.create_job("planner")
    api.add_tasks(api.add_stage(parent_job["id"], type="plan")["id"], 1)
    task = api.dequeue("plan")
    child = api.create_job("child", parentTaskId=task["id"])
    api.add_tasks(api.add_stage(child["id"], type="child-work")["id"], 1)
    assert api.report(task["id"], "DELEGATED")["status"] == "DELEGATED"
    assert stuck(api) == []

    with monkeypatch.context() as m:  # the child's end is not passed on to its parent
        m.setattr(WorkCommands, "_job_ended", lambda *_: None)
        api.run_task("child-work")
    assert api.job(child["id"])["status"] == "COMPLETED"

    [item] = stuck(api)
    assert (item["kind"], item["taskId"], item["jobId"]) == (
        "DELEGATION_NOT_REDISPATCHED",
        task["id"],
        parent_job["id"],
    )
    assert item["stageType"] == "plan"
    assert (
        samples(api.http.get("/metrics").text)[
            "jobnik_stuck_items", (("kind", "DELEGATION_NOT_REDISPATCHED"),)
        ]
        == 1
    )

    domain(api).redispatch_stale(timedelta(0))
    assert stuck(api) == []


def test_an_idle_job_is_stuck_until_an_event_moves_it(api: Api) -> None:
    t0 = datetime.now(UTC) + timedelta(days=1)
    at(api, t0)
    job = api.create_job("idle")
    stage = api.add_stage(job["id"], type="idle-type")
    api.add_tasks(stage["id"], 1)
    done = api.create_job("done")
    api.add_tasks(api.add_stage(done["id"], type="done-type")["id"], 1)
    api.run_task("done-type")  # a finished job is never idle
    at(api, t0 + timedelta(hours=2))

    kinds = [(i["kind"], i["jobId"]) for i in stuck(api, queue_idle_seconds=1e9)]
    assert kinds == [("JOB_IDLE", job["id"])]
    assert stuck(api, job_idle_seconds=3 * 3600, queue_idle_seconds=1e9) == []

    api.dequeue("idle-type")  # a task in progress: work is under way
    assert stuck(api, queue_idle_seconds=1e9) == []


def test_a_stage_type_with_queued_tasks_and_no_dequeue_is_stuck_until_one(api: Api) -> None:
    t0 = datetime.now(UTC) + timedelta(days=1)
    at(api, t0)
    job = api.create_job("queue")
    api.add_tasks(api.add_stage(job["id"], type="neglected")["id"], 2)
    at(api, t0 + timedelta(minutes=5))
    assert stuck(api, job_idle_seconds=1e9) == []

    at(api, t0 + timedelta(minutes=11))
    [item] = stuck(api, job_idle_seconds=1e9)
    assert (item["kind"], item["stageType"], item["jobId"]) == (
        "QUEUE_NOT_DEQUEUED",
        "neglected",
        None,
    )
    assert parse_time(item["since"]) == t0

    api.dequeue("neglected")
    assert stuck(api, job_idle_seconds=1e9) == []


def test_stuck_thresholds_out_of_range_are_refused(api: Api) -> None:
    for params in ({"lease_expiries": -1}, {"job_idle_seconds": 0}, {"bogus": 1}):
        r = api.http.get("/v1/stuck", params=params)
        assert (r.status_code, r.json()["code"]) == (400, "VALIDATION_ERROR"), params


def test_writer_lock_waits_and_idempotent_replays_are_counted(api: Api) -> None:
    def counts() -> tuple[float, float]:
        got = samples(api.http.get("/metrics").text)
        return got["jobnik_writer_lock_wait_seconds_count", ()], got[
            "jobnik_idempotent_replays_total", ()
        ]

    waits, replays = counts()
    body = {"name": "once-only", "data": {}}
    headers = {"Idempotency-Key": "replay-me"}
    first = api.http.post("/v1/jobs", json=body, headers=headers)
    again = api.http.post("/v1/jobs", json=body, headers=headers)

    assert (first.status_code, again.status_code) == (201, 201)
    assert again.headers["Idempotent-Replayed"] == "true"
    more_waits, more_replays = counts()
    assert more_replays == replays + 1
    assert more_waits >= waits + 1  # the creation's write transaction, at least
