from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from jobnik.api import pages
from jobnik.api.main import app_from_env
from jobnik.api.readable import CUT
from jobnik.domain.application import NewJob, NewStage, NewTask
from jobnik.projections.queries.views import Views, Window

from .conftest import Api


@pytest.fixture
def paged(database_url: str) -> Iterator[Api]:
    with TestClient(app_from_env({"JOBNIK_DATABASE_URL": database_url})) as http:
        yield Api(http)


@pytest.fixture
def arrays(database_url: str) -> Iterator[Api]:
    env = {"JOBNIK_DATABASE_URL": database_url, "JOBNIK_LIST_SHAPE": "array"}
    with TestClient(app_from_env(env)) as http:
        yield Api(http)


def get(api: Api, url: str, **params: Any) -> Any:
    r = api.http.get(url, params=params)
    assert r.status_code == 200, r.text
    return r.json()


def test_lists_answer_pages_by_default(paged: Api) -> None:
    ids = [paged.create_job(f"job-{i}")["id"] for i in range(25)]

    first = get(paged, "/v1/jobs")
    third = get(paged, "/v1/jobs", page=3)
    past = get(paged, "/v1/jobs", page=4)
    whole = get(paged, "/v1/jobs", page_size=100)

    assert first["total"] == 25
    assert [j["id"] for j in first["items"]] == ids[:10]
    assert [j["id"] for j in third["items"]] == ids[20:]
    assert past == {"total": 25, "items": []}
    assert [j["id"] for j in whole["items"]] == ids


def test_every_filtered_list_is_paged_with_its_filters(paged: Api) -> None:
    job = paged.create_job()
    stage = paged.add_stage(job["id"])
    paged.add_tasks(stage["id"], count=12)  # one creation time: ordered by id
    paged.add_stage(paged.create_job()["id"])

    tasks = get(paged, f"/v1/stages/{stage['id']}/tasks", page_size=100)["items"]
    stages = get(paged, "/v1/stages", job_id=job["id"])
    of_stage = get(paged, f"/v1/stages/{stage['id']}/tasks", page=2, page_size=5)
    found = get(paged, "/v1/tasks", stage_id=stage["id"], page_size=3, page=4)

    assert (stages["total"], [s["id"] for s in stages["items"]]) == (1, [stage["id"]])
    assert (of_stage["total"], len(tasks)) == (12, 12)
    assert [t["id"] for t in of_stage["items"]] == [t["id"] for t in tasks[5:10]]
    assert [t["id"] for t in found["items"]] == [t["id"] for t in tasks[9:12]]


@pytest.mark.parametrize(
    "query", ["page=0", "page_size=0", "page_size=101", "page=x", "page=2147483648"]
)
def test_a_page_out_of_range_is_a_400(paged: Api, query: str) -> None:
    r = paged.http.get(f"/v1/tasks?{query}")

    assert (r.status_code, r.json()["code"]) == (400, "VALIDATION_ERROR"), r.text


def test_the_largest_page_size_is_a_setting(database_url: str) -> None:
    env = {"JOBNIK_DATABASE_URL": database_url, "JOBNIK_MAX_PAGE_SIZE": "20"}
    with TestClient(app_from_env(env)) as http:
        ok = http.get("/v1/jobs?page_size=20")
        refused = http.get("/v1/jobs?page_size=21")

    assert ok.status_code == 200
    assert (refused.status_code, refused.json()["message"]) == (
        400,
        "request/query/page_size must be <= 20",
    )


def test_the_array_shape_streams_every_match_in_chunks(
    arrays: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pages, "CHUNK", 4)
    reads: list[Window] = []
    read = Views.read

    def counted(self: Views, listing: Any, window: Window) -> Any:
        reads.append(window)
        return read(self, listing, window)

    monkeypatch.setattr(Views, "read", counted)
    stage = arrays.add_stage(arrays.create_job()["id"])
    created = arrays.add_tasks(stage["id"], count=10)

    listed = get(arrays, f"/v1/stages/{stage['id']}/tasks")
    paged = get(arrays, f"/v1/stages/{stage['id']}/tasks", page=1)

    assert sorted(t["id"] for t in listed) == sorted(t["id"] for t in created)
    assert len(listed) == 10
    assert [w.limit for w in reads[:3]] == [4, 4, 4]
    assert (paged["total"], len(paged["items"])) == (10, 10)


def deep(levels: int) -> dict[str, Any]:
    value: dict[str, Any] = {"leaf": 1}
    for _ in range(levels):
        value = {"a": value}
    return value


def unreadable_job(api: Api) -> tuple[str, str, str]:
    """A job, stage and task whose payloads are nested 300 levels deep, stored as a server
    without the input gate stored them (commands called directly); returns their ids."""
    jobnik = api.http.app.state.jobnik  # type: ignore[attr-defined]
    data = deep(300)
    job = jobnik.create_job(NewJob(name="poisoned", data=data, user_metadata=data))
    stage = jobnik.add_stage(job.id, NewStage(type="poisoned", data=data))
    (task,) = jobnik.add_tasks(stage.id, [NewTask(data=data)])
    return str(job.id), str(stage.id), str(task.id)


def cut_at(value: Any, depth: int) -> Any:
    for _ in range(depth):
        value = value["a"]
    return value


def test_a_stored_row_no_response_can_render_takes_no_read_down(
    paged: Api, caplog: pytest.LogCaptureFixture
) -> None:
    good = paged.create_job("fine")
    job_id, stage_id, task_id = unreadable_job(paged)

    jobs = get(paged, "/v1/jobs", should_return_stages=True)
    one = get(paged, f"/v1/jobs/{job_id}", should_return_stages=True)
    stages = get(paged, "/v1/stages", should_return_tasks=True)
    tasks = get(paged, f"/v1/stages/{stage_id}/tasks")
    task = get(paged, f"/v1/tasks/{task_id}")
    history = get(paged, f"/v1/jobs/{job_id}/history")
    feed = get(paged, "/v1/events")

    assert [j["id"] for j in jobs["items"]] == [good["id"], job_id]
    assert jobs["items"][0]["data"] == good["data"]
    assert cut_at(jobs["items"][1]["data"], 64) == CUT
    assert cut_at(one["userMetadata"], 64) == CUT
    assert cut_at(stages["items"][0]["data"], 64) == CUT
    assert cut_at(tasks["items"][0]["data"], 64) == CUT
    assert cut_at(task["data"], 64) == CUT
    assert history["items"][0]["type"] == "JobCreated"
    assert cut_at(history["items"][0]["payload"]["data"], 63) == CUT
    assert len(feed["items"]) > len(history["items"]) >= 3
    assert any(r.levelno == logging.ERROR and "rendered" in r.getMessage() for r in caplog.records)


def test_a_stream_renders_past_an_unreadable_event(paged: Api) -> None:
    job_id, _, _ = unreadable_job(paged)
    paged.set_job_status(job_id, "ABORTED")

    with paged.http.stream("GET", f"/v1/jobs/{job_id}/stream") as r:
        text = r.read().decode()

    datas = [json.loads(line[5:]) for line in text.splitlines() if line.startswith("data:")]
    assert [d["type"] for d in datas][-1] == "JobAborted"
    assert cut_at(datas[0]["payload"]["data"], 63) == CUT
