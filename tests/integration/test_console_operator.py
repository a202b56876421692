"""The console's charts, explained numbers, search and bulk actions in a real browser (Debian's
chromium, Playwright) against a live `jobnik serve` on both backends. Screenshots of each page at
a desktop's and a phone's size go to tests/artifacts/screenshots/."""

from __future__ import annotations

import re
import time

import httpx
from playwright.sync_api import Page, expect

from . import test_console
from .conftest import SpawnServer
from .test_console import Api, confirm, shoot

# The browser, and a tab of it as test_console.py's tests get their `page`.
browser, tab = test_console.browser, test_console.page


def activity_shows(base: str, stage_type: str, **totals: int) -> None:
    """Wait until the activity projection's minutes of `stage_type` add up to `totals`."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        items = httpx.get(f"{base}/v1/activity", params={"stage_type": stage_type}).json()["items"]
        minutes = items[0]["minutes"] if items else []
        if all(sum(m[k] for m in minutes) == n for k, n in totals.items()):
            return
        time.sleep(0.1)
    raise AssertionError(f"the activity of {stage_type} did not reach {totals}")


def test_charts_and_the_numbers_on_the_queues_and_job_pages_explain_themselves(
    database_url: str, spawn_server: SpawnServer, tab: Page
) -> None:
    server = spawn_server(database_url)
    api = Api(server.url)
    job = api.job("nightly-tiles", "tiles", tasks=12, max_attempts=3)
    stage = api.ok("GET", f"/v1/jobs/{job['id']}/stages")[0]
    api.ok("POST", f"/v1/jobs/{job['id']}/stage", {"type": "upload", "data": {}})
    for _ in range(3):
        api.work("tiles")
    api.work("tiles", "FAILED", reason="flaky disk")  # retried: a re-created task
    activity_shows(server.url, "tiles", completed=3, retried=1)

    tab.clock.install()  # (before the page sets its timers)
    tab.goto(f"{server.url}/ui/queues")
    card = tab.locator("article.card[data-stage-type=tiles]")
    expect(card.locator("dd.queued")).to_have_text("9")
    expect(card.locator("dd.completed")).to_have_text("3")
    expect(card.get_by_role("img", name="Queued tasks of tiles, minute by minute")).to_be_visible()
    expect(card.get_by_role("img", name="Tasks of tiles ended per minute")).to_be_visible()
    expect(card.locator("dd.oldest")).to_have_text(re.compile(r"^\d+ s$"))  # from /v1/queues
    api.work("tiles")  # the charts follow: the page refreshes them every 15 s
    activity_shows(server.url, "tiles", completed=4)
    tab.clock.run_for(16_000)
    expect(card.locator("dd.completed")).to_have_text("4")
    shoot(tab, "queues-charts")

    tab.goto(f"{server.url}/ui/jobs/{job['id']}")
    expect(tab.get_by_label("Job progress (stages completed)")).to_have_attribute("value", "0")
    expect(tab.get_by_label("Tasks completed, all stages")).to_have_attribute("value", "33")
    expect(tab.get_by_label("Progress of stage tiles")).to_have_attribute("value", "33")
    expect(tab.locator(".facts")).to_contain_text("0 of 2 stages")
    expect(tab.locator("[data-counter=created]")).to_contain_text(
        "created 13 (12 tasks + 1 re-created by a retry or rerun)"
    )
    tab.get_by_text("What the run counters count").click()
    expect(tab.locator(".legend")).to_contain_text("a failed attempt, queued again")
    chart = tab.get_by_role("img", name="Tasks of this job completed per minute")
    expect(chart).to_be_visible()
    expect(chart.locator("desc")).to_contain_text("4 completed")

    confirm(tab, "Pause", "night freeze")
    waiting = tab.locator("tr[data-task] td.waiting").filter(has_text="paused with its job")
    expect(waiting).to_have_count(8)
    expect(tab.locator("tr[data-task] .status.s-paused")).to_have_count(8)
    shoot(tab, "job-explained")
    assert stage["type"] == "tiles"


def test_an_operator_finds_by_id_and_aborts_selected_jobs_with_one_reason(
    database_url: str, spawn_server: SpawnServer, tab: Page
) -> None:
    server = spawn_server(database_url)
    api = Api(server.url)
    keep = api.job("keep-me", "keep", tasks=1)
    stop = [api.job(f"stop-{i}", "stop", tasks=2) for i in range(2)]
    stage = api.ok("GET", f"/v1/jobs/{stop[0]['id']}/stages")[0]
    task = api.ok("GET", f"/v1/stages/{stage['id']}/tasks")[0]

    # search from any page: a job's id, a task's first digits, an id nothing has
    tab.goto(f"{server.url}/ui/queues")
    box = tab.get_by_role("searchbox", name="Find a job, stage or task by its id")
    box.fill(keep["id"])
    box.press("Enter")
    expect(tab).to_have_url(f"{server.url}/ui/jobs/{keep['id']}")
    box = tab.get_by_role("searchbox", name="Find a job, stage or task by its id")
    box.fill(task["id"][:8])
    box.press("Enter")
    expect(tab.locator("tr[data-task]")).to_have_count(1)
    expect(tab.locator(f"tr[data-task='{task['id']}']")).to_be_visible()
    expect(tab.get_by_role("note")).to_contain_text(f"Task {task['id']} alone.")
    shoot(tab, "search-task")
    box = tab.get_by_role("searchbox", name="Find a job, stage or task by its id")
    box.fill("0123abcd")
    box.press("Enter")
    expect(tab.get_by_role("alert")).to_contain_text(
        "No job, stage or task has an id that is or starts with '0123abcd'"
    )
    shoot(tab, "search-none")

    # two jobs selected, aborted with one reason: an event each
    tab.goto(f"{server.url}/ui/jobs")
    tab.get_by_role("button", name="Abort selected").click()
    expect(tab.locator("#notice")).to_have_text("Select one or more jobs first.")
    for job in stop:
        tab.get_by_label(re.compile(f"^Select job {job['name']}")).check()
    expect(tab.locator("#selected-count")).to_have_text("2 selected")
    shoot(tab, "jobs-bulk")
    confirm(tab, "Abort selected", "customer cancelled the order")
    expect(tab.locator("#notice")).to_have_text("Abort selected: done for 2 jobs.")
    for job in stop:
        expect(tab.locator(f"tr[data-job='{job['id']}']")).to_contain_text("ABORTED")
        history = api.ok("GET", f"/v1/jobs/{job['id']}/history")["items"]
        aborted = [e for e in history if e["type"] == "JobAborted"]
        assert [e["reason"] for e in aborted] == ["customer cancelled the order"]
    expect(tab.locator(f"tr[data-job='{keep['id']}']")).to_contain_text("PENDING")

    # a second try refuses the jobs already ended, naming each, and changes nothing
    for job in (*stop, keep):
        tab.get_by_label(re.compile(f"^Select job {job['name']}")).check()
    tab.get_by_role("button", name="Abort selected").click()
    dialog = tab.locator("dialog#confirm")
    dialog.get_by_label("Reason (recorded on the event)").fill("tidy up")
    dialog.get_by_role("button", name="Confirm").click()
    expect(dialog.get_by_role("alert")).to_contain_text("1 of 3 done. Refused: stop-")
    expect(tab.locator(f"tr[data-job='{keep['id']}']")).to_contain_text("ABORTED")
    expect(tab.locator("#selected-count")).to_have_text("2 selected")  # the refused ones
