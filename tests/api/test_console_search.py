"""The console's search box: a job's, stage's or task's id, or its first digits, leads to its page;
several matches are listed; an unknown or malformed id says so; a deleted job's id leads to its
history."""

from __future__ import annotations

import html
import re
from uuid import UUID

import pytest

from jobnik.domain import jobs

from .conftest import Api


def go(api: Api, text: str) -> tuple[int, str]:
    r = api.http.get("/ui/search", params={"id": text}, follow_redirects=False)
    return r.status_code, r.headers.get("location", r.text)


def test_an_id_or_its_first_digits_leads_to_its_page(api: Api) -> None:
    job = api.create_job("found")
    stage = api.add_stage(job["id"], type="found-type")
    (task,) = api.add_tasks(stage["id"])
    stage_page = f"/ui/jobs/{job['id']}?stage={stage['id']}#tasks-title"
    task_page = f"/ui/jobs/{job['id']}?stage={stage['id']}&task={task['id']}#tasks-title"

    assert go(api, job["id"]) == (303, f"/ui/jobs/{job['id']}")
    assert go(api, f"  {stage['id'].upper()} ") == (303, stage_page)
    assert go(api, task["id"].replace("-", "")[:12]) == (303, task_page)
    assert go(api, task["id"]) == (303, task_page)


def test_a_task_found_is_shown_alone_on_its_jobs_page(api: Api) -> None:
    job = api.create_job("alone")
    stage = api.add_stage(job["id"], type="alone-type")
    tasks = api.add_tasks(stage["id"], 3)

    page = api.http.get(go(api, tasks[1]["id"])[1]).text

    assert re.findall(r'<tr data-task="([^"]+)"', page) == [tasks[1]["id"]]
    assert f"Task {tasks[1]['id']} alone." in page
    assert f'href="?stage={stage["id"]}#tasks-title">All tasks of this stage' in page


def test_ids_sharing_their_first_digits_are_listed_to_choose_from(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = iter(UUID(f"abcd{i:04x}-0000-4000-8000-000000000000") for i in range(1, 100))
    monkeypatch.setattr(jobs, "uuid4", lambda: next(ids))
    made = [api.create_job(f"job-{i}")["id"] for i in range(3)]
    monkeypatch.undo()
    other = api.create_job("other")["id"]

    listed = api.http.get("/ui/search", params={"id": "ABCD"})
    one = go(api, "abcd0002")

    assert listed.status_code == 200
    assert re.findall(r'<a href="/ui/jobs/([^"]+)">', listed.text) == made
    assert "3 ids start with ABCD" in listed.text
    assert "job-1" in listed.text
    assert one == (303, f"/ui/jobs/{made[1]}")
    assert other not in listed.text


@pytest.mark.parametrize(
    ("text", "status", "says"),
    [
        ("8d1f3b51-29b4-4d2c-8d0b-0f5c6a1e2d3f", 404, "No job, stage or task has an id"),
        ("ffffffff", 404, "No job, stage or task has an id that is or starts with 'ffffffff'"),
        ("abc", 400, "is not an id"),
        ("nightly", 400, "'nightly' is not an id"),
        ("", 400, "is not an id"),
    ],
)
def test_an_unknown_or_malformed_id_says_so_on_a_page_with_the_search_box(
    api: Api, text: str, status: int, says: str
) -> None:
    api.create_job("other")

    r = api.http.get("/ui/search", params={"id": text})

    assert r.status_code == status
    assert r.headers["content-type"].startswith("text/html")
    assert says in html.unescape(r.text)
    assert 'role="search"' in r.text


def test_a_deleted_jobs_id_leads_to_its_history(api: Api) -> None:
    job = api.create_job("gone")
    api.set_job_status(job["id"], "ABORTED")
    assert api.http.delete(f"/v1/jobs/{job['id']}").status_code == 200

    r = api.http.get("/ui/search", params={"id": job["id"]})

    assert r.status_code == 404
    assert f'<a href="/ui/jobs/{job["id"]}/history">its history</a>' in r.text


def test_every_page_has_the_search_box(api: Api) -> None:
    job = api.create_job("boxed")

    for path in (
        "/ui/jobs",
        f"/ui/jobs/{job['id']}",
        f"/ui/jobs/{job['id']}/history",
        "/ui/queues",
    ):
        page = api.http.get(path).text
        assert '<form class="search" role="search" method="get" action="/ui/search">' in page
        assert '<label for="search-id"' in page
