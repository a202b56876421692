"""Hostile query strings on the console's pages: a 400 `{message, code}`, never a 500, and the
links a page builds from its own query string lead to a page that answers."""

from __future__ import annotations

import html
import re

import pytest

from .conftest import Api


@pytest.mark.parametrize(
    "params",
    [
        {"created_from": "0001-01-01T00:00:00+14:00"},  # before year 1 in UTC
        {"created_to": "9999-12-31T23:59:59-14:00"},  # after year 9999 in UTC
        {"page": "\u00b2"},  # a digit to str.isdigit, not to int()
        {"page": "\uff11"},  # a full-width one: not a page number either
    ],
)
def test_the_jobs_page_refuses_what_it_cannot_query(api: Api, params: dict[str, str]) -> None:
    answer = api.http.get("/ui/jobs", params=params)

    assert answer.status_code == 400
    assert answer.json()["code"] == "VALIDATION_ERROR"
    assert next(iter(params)) in answer.json()["message"]


def test_the_job_as_it_was_at_a_time_links_its_stages_and_task_pages_to_that_time(
    api: Api,
) -> None:
    job = api.create_job(name="then")
    stage = api.add_stage(job["id"], type="then-type")
    api.add_tasks(stage["id"], 21)  # two task pages
    at = "2100-01-01T00:00:00+00:00"  # (an offset's '+' must reach the server as one)

    page = api.http.get(f"/ui/jobs/{job['id']}", params={"as_of": at})
    links = [html.unescape(h) for h in re.findall(r'href="(\?stage=[^"]+)"', page.text)]

    assert page.status_code == 200
    assert any("page=2" in link for link in links)
    for link in links:
        followed = api.http.get(f"/ui/jobs/{job['id']}{link.split('#')[0]}")
        assert followed.status_code == 200, (link, followed.text[:200])
        assert "As it was at 2100-01-01 00:00:00" in followed.text
