from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from jobnik.api.main import app_from_env
from jobnik.scripts.cli import app as cli

from .conftest import SpawnServer


@pytest.fixture
def client(database_url: str) -> Iterator[TestClient]:
    app = app_from_env({"JOBNIK_DATABASE_URL": database_url, "JOBNIK_SWEEP_INTERVAL": "0"})
    with TestClient(app) as c:
        yield c


def run_job(http: Any, stage_type: str, tasks: int = 2) -> dict[str, Any]:
    """One job, one stage, `tasks` tasks, all completed; returns the job."""
    job = http.post("/v1/jobs", json={"name": "history", "data": {}}).json()
    stage = http.post(f"/v1/jobs/{job['id']}/stage", json={"type": stage_type, "data": {}}).json()
    http.post(f"/v1/stages/{stage['id']}/tasks", json=[{"data": {"i": i}} for i in range(tasks)])
    for _ in range(tasks):
        task = http.patch(f"/v1/stages/{stage_type}/tasks/dequeue").json()
        http.put(f"/v1/tasks/{task['id']}/status", json={"status": "COMPLETED"})
    return http.get(f"/v1/jobs/{job['id']}").json()


def history(http: Any, job_id: str, **params: Any) -> dict[str, Any]:
    r = http.get(f"/v1/jobs/{job_id}/history", params=params)
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


def sse_events(text: str) -> list[dict[str, str]]:
    events = []
    for block in text.replace("\r\n", "\n").split("\n\n"):
        fields = dict(
            line.split(": ", 1) for line in block.split("\n") if ": " in line and line[0] != ":"
        )
        if "id" in fields:
            events.append(fields)
    return events


def test_a_jobs_history_lists_every_event_of_the_job_its_stages_and_tasks_in_order(
    client: TestClient,
) -> None:
    job = run_job(client, "audit")

    items = history(client, job["id"])["items"]

    assert [e["type"] for e in items] == [
        "JobCreated",
        "StageAppended",
        "StageAdded",
        "TaskCreated",
        "TaskCreated",
        "TaskDequeued",
        "StageStarted",
        "JobStarted",
        "TaskCompleted",
        "TaskDequeued",
        "TaskCompleted",
        "StageCompleted",
        "JobProgressed",
        "JobCompleted",
    ]
    assert [e["position"] for e in items] == sorted(e["position"] for e in items)
    assert {e["entity"] for e in items} == {"job", "stage", "task"}
    assert {e["actor"] for e in items} == {"api", "worker", "system"}
    assert items[-1]["reason"] == "all stages completed"
    assert items[0]["payload"]["name"] == "history"


def test_history_is_cursor_paginated_and_stays_after_the_job_is_deleted(
    client: TestClient,
) -> None:
    job = run_job(client, "pages")
    everything = history(client, job["id"], limit=1000)["items"]

    client.delete(f"/v1/jobs/{job['id']}")
    pages, after = [], 0
    while True:
        page = history(client, job["id"], after=after, limit=4)
        pages.append(page["items"])
        if page["next"] is None:
            break
        after = page["next"]

    assert client.get(f"/v1/jobs/{job['id']}").status_code == 404
    seen = [e for p in pages for e in p]
    assert seen == [*everything, seen[-1]]
    assert seen[-1]["type"] == "JobDeleted"
    assert all(len(p) <= 4 for p in pages)


def test_the_global_feed_filters_by_type_and_job(client: TestClient) -> None:
    first = run_job(client, "feed-a", tasks=1)
    second = run_job(client, "feed-b", tasks=3)

    completed = client.get("/v1/events", params={"type": "TaskCompleted"}).json()["items"]
    of_second = client.get("/v1/events", params={"job_id": second["id"]}).json()["items"]
    page = client.get("/v1/events", params={"after": 3, "limit": 2}).json()

    assert [e["type"] for e in completed] == ["TaskCompleted"] * 4
    assert of_second == history(client, second["id"])["items"]
    assert first["id"] not in {e["entityId"] for e in of_second}
    assert [e["position"] for e in page["items"]] == [4, 5]
    assert page["next"] == 5
    assert client.get("/v1/events", params={"type": "NoSuchEvent"}).status_code == 400
    assert client.get("/v1/jobs/not-a-uuid/history").status_code == 400


def test_history_of_an_unknown_job_is_404(client: TestClient) -> None:
    r = client.get("/v1/jobs/00000000-0000-4000-8000-000000000000/history")

    assert (r.status_code, r.json()["code"]) == (404, "JOB_NOT_FOUND")


def test_time_travel_shows_a_job_stage_and_task_as_they_were(client: TestClient) -> None:
    job = client.post("/v1/jobs", json={"name": "travel", "data": {}}).json()
    stage = client.post(f"/v1/jobs/{job['id']}/stage", json={"type": "tt", "data": {}}).json()
    client.post(f"/v1/stages/{stage['id']}/tasks", json=[{"data": {}}, {"data": {}}])
    task = client.patch("/v1/stages/tt/tasks/dequeue").json()
    middle = history(client, job["id"])["items"][-1]
    client.put(f"/v1/tasks/{task['id']}/status", json={"status": "COMPLETED"})
    client.put(f"/v1/jobs/{job['id']}/status", json={"status": "PAUSED"})
    live = client.get(f"/v1/jobs/{job['id']}", params={"should_return_stages": "true"}).json()
    last = history(client, job["id"])["items"][-1]["position"]

    then = client.get(
        f"/v1/jobs/{job['id']}",
        params={"should_return_stages": "true", "as_of": middle["position"]},
    ).json()
    by_time = client.get(
        f"/v1/jobs/{job['id']}", params={"should_return_stages": "true", "as_of": middle["time"]}
    ).json()
    now = client.get(
        f"/v1/jobs/{job['id']}", params={"should_return_stages": "true", "as_of": last}
    ).json()

    assert (then["status"], live["status"]) == ("IN_PROGRESS", "PAUSED")
    assert then["stages"][0]["summary"]["inProgress"] == 1
    assert then["stages"][0]["percentage"] == 0
    assert live["stages"][0]["percentage"] == 50
    assert by_time == then
    assert now == live
    old_task = client.get(f"/v1/tasks/{task['id']}", params={"as_of": middle["position"]})
    assert old_task.json()["status"] == "IN_PROGRESS"
    old_stage = client.get(f"/v1/stages/{stage['id']}", params={"as_of": 1})
    assert old_stage.status_code == 404
    assert client.get(f"/v1/jobs/{job['id']}", params={"as_of": "noon"}).status_code == 400


def test_sse_streams_a_job_live_resumes_from_last_event_id_and_closes_after_the_end(
    database_url: str, spawn_server: SpawnServer
) -> None:
    server = spawn_server(database_url, env={"JOBNIK_SWEEP_INTERVAL": "0"})
    api = httpx.Client(base_url=server.url, timeout=30)
    job = api.post("/v1/jobs", json={"name": "live", "data": {}}).json()
    stage = api.post(f"/v1/jobs/{job['id']}/stage", json={"type": "live", "data": {}}).json()
    api.post(f"/v1/stages/{stage['id']}/tasks", json=[{"data": {}}, {"data": {}}])
    received: list[dict[str, str]] = []
    first_two = threading.Event()

    def listen_until_two() -> None:  # a first connection that drops after two events
        with api.stream("GET", f"/v1/jobs/{job['id']}/stream") as r:
            buffer = ""
            for chunk in r.iter_text():
                buffer += chunk
                events = sse_events(buffer)
                if len(events) >= 2:
                    received.extend(events[:2])
                    first_two.set()
                    return

    listener = threading.Thread(target=listen_until_two)
    listener.start()
    assert first_two.wait(20)
    listener.join(5)
    for _ in range(2):  # work happens while nobody listens
        task = api.patch("/v1/stages/live/tasks/dequeue").json()
        api.put(f"/v1/tasks/{task['id']}/status", json={"status": "COMPLETED"})

    with api.stream(
        "GET", f"/v1/jobs/{job['id']}/stream", headers={"Last-Event-ID": received[-1]["id"]}
    ) as r:
        rest = sse_events("".join(r.iter_text()))  # ends by itself after JobCompleted

    everything = [*received, *rest]
    logged = history(api, job["id"])["items"]
    assert [int(e["id"]) for e in everything] == [e["position"] for e in logged]
    assert [e["event"] for e in everything] == [e["type"] for e in logged]
    assert everything[-1]["event"] == "JobCompleted"
    assert json.loads(rest[0]["data"])["position"] == int(rest[0]["id"])


def test_the_global_sse_feed_resumes_from_last_event_id(
    database_url: str, spawn_server: SpawnServer
) -> None:
    server = spawn_server(database_url, env={"JOBNIK_SWEEP_INTERVAL": "0"})
    api = httpx.Client(base_url=server.url, timeout=30)
    run_job(api, "feed", tasks=1)
    total = len(api.get("/v1/events", params={"limit": 1000}).json()["items"])
    got: list[dict[str, str]] = []

    with api.stream("GET", "/v1/events/stream", headers={"Last-Event-ID": "3"}) as r:
        buffer = ""
        for chunk in r.iter_text():
            buffer += chunk
            got = sse_events(buffer)
            if len(got) >= total - 3:
                break

    assert [int(e["id"]) for e in got] == list(range(4, total + 1))


def failed_then_rerun(http: Any, stage_type: str) -> tuple[dict[str, Any], int]:
    """A one-task job that failed, then its task rerun with a reason; returns the job and the
    position of its JobFailed."""
    job = http.post("/v1/jobs", json={"name": "rerun", "data": {}}).json()
    stage = http.post(f"/v1/jobs/{job['id']}/stage", json={"type": stage_type, "data": {}}).json()
    http.post(f"/v1/stages/{stage['id']}/tasks", json=[{"data": {}, "maxAttempts": 1}])
    task = http.patch(f"/v1/stages/{stage_type}/tasks/dequeue").json()
    http.put(f"/v1/tasks/{task['id']}/status", json={"status": "FAILED"})
    failed = history(http, job["id"])["items"][-1]
    assert failed["type"] == "JobFailed"
    r = http.post(f"/v1/tasks/{task['id']}/rerun", json={"reason": "input fixed"})
    assert r.status_code == 200, r.text
    return job, failed["position"]


def test_a_jobs_stream_carries_its_reruns_and_ends_at_its_latest_end(
    database_url: str, spawn_server: SpawnServer
) -> None:
    server = spawn_server(database_url, env={"JOBNIK_SWEEP_INTERVAL": "0"})
    api = httpx.Client(base_url=server.url, timeout=30)
    job, failed_at = failed_then_rerun(api, "again")
    reopened: list[dict[str, str]] = []
    listening = threading.Event()

    def listen() -> None:  # connected while the job runs again: ends at its JobCompleted
        with api.stream("GET", f"/v1/jobs/{job['id']}/stream", params={"after": failed_at}) as r:
            listening.set()
            reopened.extend(sse_events("".join(r.iter_text())))

    listener = threading.Thread(target=listen)
    listener.start()
    assert listening.wait(20)
    task = api.patch("/v1/stages/again/tasks/dequeue").json()
    api.put(f"/v1/tasks/{task['id']}/status", json={"status": "COMPLETED"})
    listener.join(20)
    with api.stream("GET", f"/v1/jobs/{job['id']}/stream") as r:
        everything = sse_events("".join(r.iter_text()))  # from the start: past the JobFailed

    kinds = [e["event"] for e in everything]
    assert kinds.index("JobFailed") < kinds.index("JobReopened")
    assert kinds[-1] == "JobCompleted"
    assert [e["event"] for e in reopened][:3] == ["JobReopened", "StageReopened", "TaskRerun"]
    assert reopened == everything[len(everything) - len(reopened) :]
    assert [e["position"] for e in history(api, job["id"], limit=1000)["items"]] == [
        int(e["id"]) for e in everything
    ]


def test_replay_prints_each_rerun_with_its_status_change_and_reason(
    client: TestClient, database_url: str
) -> None:
    job, _ = failed_then_rerun(client, "replayed")

    result = CliRunner().invoke(
        cli, ["replay", job["id"]], env={"JOBNIK_DATABASE_URL": database_url}
    )

    assert result.exit_code == 0, result.output
    lines = {line.split()[4]: line for line in result.output.splitlines()[2:]}
    assert lines["JobReopened"].endswith("api     FAILED → IN_PROGRESS: input fixed")
    assert lines["StageReopened"].endswith("FAILED → IN_PROGRESS: input fixed")
    assert lines["TaskRerun"].endswith("from FAILED: input fixed")
    assert lines["JobFailed"].endswith("a stage failed")
