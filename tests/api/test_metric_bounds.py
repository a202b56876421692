"""Clients name stage types freely, yet what the server serves by stage type stays bounded: the
metrics give series of their own to JOBNIK_METRICS_STAGE_TYPES types (those with the most
tasks) and count the others under `__other__`; zero-valued series are the manager's statuses
alone; `GET /v1/queues` is paged."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from jobnik.api.main import app_from_env
from jobnik.api.telemetry.service_metrics import MANAGER_TASK_STATUSES, STAGE_STATUSES
from jobnik.api.telemetry.stage_types import OTHER

from .conftest import Api
from .test_queues import caught_up

SHOWN = 3
TYPES = [f"t{i:02d}" for i in range(10)]  # t{i} has i + 1 tasks: t09, t08, t07 have the most
Sample = tuple[str, dict[str, str], float]


def serve(database_url: str, **settings: str) -> TestClient:
    env = {"JOBNIK_DATABASE_URL": database_url, "JOBNIK_SWEEP_INTERVAL": "0"}
    env |= {f"JOBNIK_{k.upper()}": v for k, v in settings.items()}
    return TestClient(app_from_env(env))


@pytest.fixture
def api(database_url: str) -> Iterator[Api]:
    with serve(database_url, metrics_stage_types=str(SHOWN)) as client:
        yield Api(client)


def scrape(api: Api, path: str = "/metrics") -> list[Sample]:
    r = api.http.get(path)
    assert r.status_code == 200, r.text
    return [
        (s.name, s.labels, s.value)
        for family in text_string_to_metric_families(r.text)
        for s in family.samples
    ]


def by_type(samples: list[Sample], name: str, **labels: str) -> dict[str, float]:
    """`name`'s values by stage type, of the samples that also carry `labels`."""
    return {
        lab["stage_type"]: v
        for n, lab, v in samples
        if n == name and all(lab.get(k) == x for k, x in labels.items())
    }


def workload(api: Api, types: list[str] = TYPES) -> None:
    """Type number i: one job, one stage, i + 1 tasks; one task of each of the first two types
    run, and one of the third dequeued."""
    for i, stage_type in enumerate(types):
        stage = api.add_stage(api.create_job(f"job-{i}")["id"], type=stage_type)
        api.add_tasks(stage["id"], i + 1)
    api.run_task(types[0])
    api.run_task(types[1], "FAILED")
    api.dequeue(types[2])
    caught_up(api)


def test_the_types_with_the_most_tasks_have_series_and_the_others_are_one_aggregate(
    api: Api,
) -> None:
    workload(api)

    metrics, service = scrape(api), scrape(api, "/service-metrics")

    named = {lab["stage_type"] for _, lab, _ in metrics if "stage_type" in lab}
    assert named == {"t09", "t08", "t07", OTHER}
    assert {lab["stage_type"] for _, lab, _ in service if "stage_type" in lab} == named
    rest = TYPES[:7]  # 1 + 2 + ... + 7 tasks = 28, of which 2 ran and 1 is dequeued
    pending = by_type(service, "jobnik_tasks_by_status", task_status="PENDING")
    assert pending == {"t09": 10, "t08": 9, "t07": 8, OTHER: 28 - 3}
    assert by_type(service, "jobnik_tasks_by_status", task_status="IN_PROGRESS")[OTHER] == 1
    stages = [(lab["stage_type"], v) for n, lab, v in service if n == "jobnik_stages_by_status"]
    assert sum(v for t, v in stages if t == OTHER) == len(rest)  # a stage each
    assert sum(v for t, v in stages if t == "t09") == 1
    counts = by_type(service, "jobnik_tasks_count", priority="Medium", task_status="Pending")
    assert counts == pending
    retried = by_type(service, "jobnik_tasks_by_status", task_status="RETRIED")
    assert retried == {"t09": 0, "t08": 0, "t07": 0, OTHER: 1}
    queued = {t: n + retried[t] for t, n in pending.items()}
    assert by_type(metrics, "jobnik_queue_tasks") == queued  # PENDING or RETRIED
    assert by_type(metrics, "jobnik_tasks_leased") == {OTHER: 1}
    assert by_type(metrics, "jobnik_task_dequeues_total") == {OTHER: 3}
    # the aggregate's oldest task is the oldest of all the others'
    ages = by_type(metrics, "jobnik_queue_oldest_task_age_seconds")
    assert ages[OTHER] >= max(ages["t09"], ages["t08"], ages["t07"])


def test_the_limits_have_series_for_the_types_shown_and_the_others_in_the_aggregate(
    api: Api,
) -> None:
    for t in TYPES:
        assert api.http.put(f"/v1/limits/{t}", json={"maxInProgress": 1}).status_code == 200
    workload(api)

    samples = scrape(api)

    assert by_type(samples, "jobnik_limit_max_in_progress") == dict.fromkeys(TYPES[-SHOWN:], 1)
    held = by_type(samples, "jobnik_tasks_held_back")
    # of the others' queued tasks, all but one a type (t00: none queued; t02: one in progress)
    assert held == {"t09": 9, "t08": 8, "t07": 7, OTHER: 0 + 1 + 2 + 3 + 4 + 5 + 6}


def test_no_series_is_zero_but_the_managers_statuses_of_the_types_served(api: Api) -> None:
    workload(api)

    zeros = [(n, lab) for n, lab, v in scrape(api) if v == 0 and "stage_type" in lab]

    assert zeros
    for name, lab in zeros:
        status = lab.get("stage_status") or lab.get("task_status")
        assert (name, status in STAGE_STATUSES or status in MANAGER_TASK_STATUSES) in {
            ("jobnik_stages_by_status", True),
            ("jobnik_tasks_by_status", True),
        }, (name, lab)
        assert lab["stage_type"] in {"t09", "t08", "t07", OTHER}


def test_the_series_stay_as_many_however_many_types_clients_name(database_url: str) -> None:
    def series(types: int) -> int:
        with serve(database_url, metrics_stage_types=str(SHOWN)) as client:
            api = Api(client)
            workload(api, [f"n{types}-{i:04d}" for i in range(types)])
            return len(scrape(api)), len(scrape(api, "/service-metrics"))

    few, many = series(len(TYPES)), series(60)

    # the same stage-type series (the aggregate's counts differ, not its series)
    assert many[1] == few[1]
    assert many[0] <= few[0] + 10  # the events appended by type, the HTTP requests made


def test_with_no_type_shown_every_type_is_in_the_aggregate(database_url: str) -> None:
    with serve(database_url, metrics_stage_types="0") as client:
        api = Api(client)
        workload(api, ["a", "b", OTHER])

        samples = scrape(api)

    assert {lab["stage_type"] for _, lab, _ in samples if "stage_type" in lab} == {OTHER}
    assert by_type(samples, "jobnik_queue_tasks") == {OTHER: 1 + 2 + 3 - 2}  # one ran, one runs


def test_a_type_named_like_the_aggregate_is_counted_in_it(api: Api) -> None:
    workload(api, [*TYPES[:9], OTHER])  # OTHER has the most tasks: 10

    pending = by_type(
        scrape(api, "/service-metrics"), "jobnik_tasks_by_status", task_status="PENDING"
    )

    # it has no series of its own: the aggregate counts it with t00 ... t05 (1 + ... + 6 tasks,
    # of which 3 ran or run)
    assert pending == {"t08": 9, "t07": 8, "t06": 7, OTHER: 10 + 21 - 3}


def queues(api: Api, **params: Any) -> dict[str, Any]:
    r = api.http.get("/v1/queues", params=params)
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


def test_queues_are_paged_by_stage_type(api: Api) -> None:
    workload(api)

    first, second = queues(api, page_size=4), queues(api, page=2, page_size=4)
    last, past = queues(api, page=3, page_size=4), queues(api, page=4, page_size=4)
    default = queues(api)

    assert {p["total"] for p in (first, second, last, past, default)} == {len(TYPES)}
    pages = [[q["stageType"] for q in p["items"]] for p in (first, second, last, past)]
    assert pages == [TYPES[:4], TYPES[4:8], TYPES[8:], []]
    assert [q["stageType"] for q in default["items"]] == TYPES  # ten a page by default
    assert [q["inProgress"] for q in first["items"]] == [0, 0, 1, 0]
    r = api.http.get("/v1/queues", params={"page_size": 101})
    assert (r.status_code, r.json()["code"]) == (400, "VALIDATION_ERROR")


def test_queues_are_a_page_also_where_the_lists_are_plain_arrays(database_url: str) -> None:
    with serve(database_url, list_shape="array") as client:
        api = Api(client)
        for stage_type in ("x", "y"):
            api.add_tasks(api.add_stage(api.create_job()["id"], type=stage_type)["id"])

        body = queues(api, page_size=1)

    assert (body["total"], [q["stageType"] for q in body["items"]]) == (2, ["x"])
    assert datetime.fromisoformat(body["items"][0]["oldestQueuedAt"]) <= datetime.now(UTC)


def test_the_schedules_that_fired_most_have_series_and_the_others_are_summed(
    database_url: str,
) -> None:
    with serve(database_url, metrics_schedules="1") as client:
        api = Api(client)
        body = {"intervalSeconds": 3600, "job": {"name": "tick", "data": {}, "hook": "tick"}}
        ids = [api.http.post("/v1/schedules", json={**body, "name": n}).json()["id"] for n in "abc"]
        for schedule_id, fires in zip(ids, (1, 3, 2), strict=True):
            for _ in range(fires):
                assert api.http.post(f"/v1/schedules/{schedule_id}/trigger").status_code == 201
        caught_up(api)
        fired = {
            lab["schedule"]: v for n, lab, v in scrape(api) if n == "jobnik_schedule_fires_total"
        }
    assert fired == {"b": 3, OTHER: 1 + 2}
