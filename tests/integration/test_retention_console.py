"""The console's retention page on both backends: the policy and each name's own period, the
jobs archived last, one job's archive record by id, and an archived job's page sending there;
the forms that change a period are an operator's; so are the queues page's, which set a stage
type's queue order."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient
from playwright.sync_api import Page, expect

from jobnik.api.console import retention

from .conftest import SpawnServer
from .test_archive_api import archive_all, archive_env, client
from .test_console import browser, confirm, page, shoot
from .test_history import run_job

__all__ = ["archive_env", "browser", "client", "page"]  # (the fixtures, used by name)


def test_the_page_shows_the_policy_the_names_periods_and_the_jobs_archived_last(
    client: TestClient,
) -> None:
    r = client.put("/v1/retention/nightly-map", json={"periodSeconds": 7 * 86400, "reason": "x"})
    assert r.status_code == 200, r.text
    job = run_job(client, "tiles")
    archive_all(client)

    html = client.get("/ui/retention").text

    assert "archived 1 hour after they end" in re.sub(r"\s+", " ", html)
    assert re.search(r'<tr data-name="nightly-map">\s*<td>nightly-map</td>\s*<td>7 days</td>', html)
    assert f'<tr data-job="{job["id"]}">' in html
    assert 'data-url="/v1/retention/nightly-map"' in html  # (access control off: an operator)


def test_an_archived_job_is_found_by_id_and_its_page_sends_there(client: TestClient) -> None:
    job = run_job(client, "tiles")
    archive_all(client)
    record = client.get(f"/v1/archives/{job['id']}").json()

    moved = client.get(f"/ui/jobs/{job['id']}", follow_redirects=False)
    history = client.get(f"/ui/jobs/{job['id']}/history", follow_redirects=False)
    found = client.get(f"/ui/retention?job={job['id']}").text

    assert (moved.status_code, moved.headers["location"]) == (303, f"/ui/retention?job={job['id']}")
    assert (history.status_code, history.headers["location"]) == (303, moved.headers["location"])
    searched = client.get(f"/ui/search?id={job['id']}", follow_redirects=False)
    assert (searched.status_code, searched.headers["location"]) == (303, f"/ui/jobs/{job['id']}")
    assert client.get(f"/v1/jobs/{job['id']}/history").json()["items"]  # (the record's link)
    assert record["checksum"] in found
    assert record["location"] in found
    assert "is not a job id" in client.get("/ui/retention?job=nonsense").text
    other = "00000000-0000-0000-0000-000000000007"
    assert f"Job {other} is not archived." in client.get(f"/ui/retention?job={other}").text
    assert client.get(f"/ui/jobs/{other}").status_code == 404
    assert client.get(f"/ui/jobs/{other}/history").status_code == 404


def test_the_jobs_archived_last_are_paged_the_last_first_up_to_a_cap(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(retention, "RECENT", 1)
    monkeypatch.setattr(retention, "ARCHIVE_PAGES", 2)
    jobs = [run_job(client, "tiles")["id"] for _ in range(3)]
    archive_all(client)
    shown = [
        re.findall(r'<tr data-job="([^"]+)">', client.get(f"/ui/retention?archived={n}").text)
        for n in (1, 2)
    ]
    last = client.get("/ui/retention?archived=2").text

    assert len({j for page in shown for j in page}) == 2
    assert all(len(page) == 1 and page[0] in jobs for page in shown)
    assert 'href="?archived=2">Older' in client.get("/ui/retention").text
    assert "Older" not in last  # (the cap: no third page, though a third job is archived)
    assert client.get("/ui/retention?archived=21").status_code == 400


def test_an_operator_gives_a_name_a_period_and_takes_it_back_from_the_page(
    database_url: str, spawn_server: SpawnServer, page: Page, tmp_path: Path
) -> None:
    (tmp_path / "archive").mkdir()
    env = {"JOBNIK_SWEEP_INTERVAL": "0", "JOBNIK_ARCHIVE_DIR": str(tmp_path / "archive")}
    server = spawn_server(database_url, env=env)
    page.goto(f"{server.url}/ui/retention")
    expect(page.locator("#policy")).to_contain_text("unless their name has a period")

    page.get_by_label("Job name").fill("nightly-map")
    page.get_by_role("button", name="Set a period…").click()
    dialog = page.locator("dialog#confirm")
    dialog.get_by_label("Period in days (after a job ends)").fill("0")
    dialog.get_by_label("Reason (recorded on the event)").fill("maps are big")
    dialog.get_by_role("button", name="Confirm").click()
    expect(dialog.locator("#confirm-error")).to_contain_text("INVALID_RETENTION_PERIOD")
    dialog.get_by_label("Period in days (after a job ends)").fill("7")
    dialog.get_by_role("button", name="Confirm").click()
    expect(dialog).to_be_hidden()
    expect(page.locator('tr[data-name="nightly-map"]')).to_contain_text("7 days")
    shoot(page, "retention")

    confirm(page, "Default", "back to the default")
    expect(page.locator('tr[data-name="nightly-map"]')).to_have_count(0)
    changes = httpx.get(
        f"{server.url}/v1/events", params={"type": "RetentionSet"}, timeout=10
    ).json()["items"]
    assert [(e["reason"], e["payload"]["periodSeconds"]) for e in changes] == [
        ("maps are big", 7 * 86400),
        ("back to the default", None),
    ]


def test_an_operator_makes_a_stage_type_take_turns_and_back_from_the_queues_page(
    database_url: str, spawn_server: SpawnServer, page: Page
) -> None:
    server = spawn_server(database_url, env={"JOBNIK_SWEEP_INTERVAL": "0"})
    page.goto(f"{server.url}/ui/queues")
    expect(page.locator("table.limits")).to_contain_text("No stage type has a limit")

    page.get_by_role("textbox", name="Stage type").fill("render farm")
    page.get_by_role("button", name="Take turns…").click()
    dialog = page.locator("dialog#confirm")
    dialog.get_by_label("Reason (recorded on the event)").fill("tenants share")
    dialog.get_by_role("button", name="Confirm").click()
    expect(dialog).to_be_hidden()
    row = page.locator('tr[data-stage-type="render farm"]')
    expect(row.locator("td.order")).to_have_text("fair")

    confirm(page, "First in, first out", "back to Jobnik's order")
    expect(page.locator('tr[data-stage-type="render farm"]')).to_have_count(0)
    changes = httpx.get(
        f"{server.url}/v1/events", params={"type": "QueueOrderSet"}, timeout=10
    ).json()["items"]
    assert [(e["reason"], e["payload"]["order"]) for e in changes] == [
        ("tenants share", "fair"),
        ("back to Jobnik's order", "fifo"),
    ]
