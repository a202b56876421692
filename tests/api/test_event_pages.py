"""Pages of events (a job's history, the feed, a stream's reads) are bounded in bytes too: a
page carries the events that start within JOBNIK_EVENT_PAGE_BYTES of stored events, at least
one, and the cursor walks on from there, missing nothing."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from jobnik.api.main import app_from_env

PAGE_BYTES = 4096
PAD = 1000  # characters of each event's payload: four or five events per page
EVENTS = 20


@pytest.fixture
def http(database_url: str) -> Iterator[TestClient]:
    env = {"JOBNIK_DATABASE_URL": database_url, "JOBNIK_EVENT_PAGE_BYTES": str(PAGE_BYTES)}
    with TestClient(app_from_env(env)) as c:
        yield c


def walk(http: TestClient, path: str, **params: Any) -> tuple[list[int], list[int]]:
    """Every event's position, walked page by page with `next`; and each page's length."""
    positions, sizes, after = [], [], 0
    while True:
        r = http.get(path, params={**params, "after": after, "limit": 1000})
        assert r.status_code == 200, r.text
        page = r.json()
        positions += [e["position"] for e in page["items"]]
        sizes.append(len(page["items"]))
        if page["next"] is None:
            return positions, sizes
        after = page["next"]


def padded_job(http: TestClient, tasks: int = EVENTS) -> str:
    """A job whose stage has `tasks` tasks of PAD characters each: a large history."""
    job = http.post("/v1/jobs", json={"name": "padded", "data": {}}).json()
    stage = http.post(f"/v1/jobs/{job['id']}/stage", json={"type": "pad", "data": {}}).json()
    body = [{"data": {"pad": "x" * PAD}} for _ in range(tasks)]
    assert http.post(f"/v1/stages/{stage['id']}/tasks", json=body).status_code == 201
    job_id: str = job["id"]
    return job_id


def test_a_page_of_the_feed_stops_at_the_byte_bound_and_the_cursor_misses_nothing(
    http: TestClient,
) -> None:
    for _ in range(EVENTS):
        r = http.post("/v1/jobs", json={"name": "padded", "data": {"pad": "x" * PAD}})
        assert r.status_code == 201

    positions, sizes = walk(http, "/v1/events")

    assert len(positions) == EVENTS
    assert positions == sorted(set(positions))
    assert 1 <= max(sizes) <= PAGE_BYTES // PAD + 1, sizes  # not all 20 in one page


def test_a_page_of_a_jobs_history_stops_at_the_byte_bound_and_the_cursor_misses_nothing(
    http: TestClient,
) -> None:
    job_id = padded_job(http)

    positions, sizes = walk(http, f"/v1/jobs/{job_id}/history")
    in_the_feed, _ = walk(http, "/v1/events", job_id=job_id)

    assert len(positions) > EVENTS  # the job, its stage, its tasks
    assert positions == in_the_feed
    assert max(sizes) <= PAGE_BYTES // PAD + 1, sizes


def test_an_event_larger_than_the_bound_is_a_page_of_its_own(http: TestClient) -> None:
    big = http.post("/v1/jobs", json={"name": "big", "data": {"pad": "x" * 3 * PAGE_BYTES}})
    http.post("/v1/jobs", json={"name": "small", "data": {}})

    first = http.get("/v1/events", params={"after": 0, "limit": 1000}).json()

    assert [e["entityId"] for e in first["items"]] == [big.json()["id"]]
    assert first["next"] == first["items"][0]["position"]


def test_a_stream_reads_in_bounded_pages_and_carries_every_event_once(http: TestClient) -> None:
    job_id = padded_job(http)
    assert http.put(f"/v1/jobs/{job_id}/status", json={"status": "ABORTED"}).status_code == 200
    history, _ = walk(http, f"/v1/jobs/{job_id}/history")
    assert len(history) > EVENTS

    with http.stream("GET", f"/v1/jobs/{job_id}/stream") as r:
        assert r.status_code == 200
        text = r.read().decode()
    ids = [int(line[4:]) for line in text.splitlines() if line.startswith("id: ")]

    # every event once, in order, up to the job's end (JobAborted, which the cascade's events
    # may follow in the same transaction)
    assert ids == history[: len(ids)]
    assert len(ids) > EVENTS
