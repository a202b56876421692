"""The schedules' console pages in a real browser against a live server, on both backends: a
schedule's next fires and runs, triggered and paused from the page with a reason each."""

from __future__ import annotations

import httpx
from playwright.sync_api import Page, expect

from .conftest import SpawnServer
from .test_console import browser, confirm, page, shoot

__all__ = ["browser", "page"]  # (the fixtures this module's tests take)
SCHEDULE = {
    "name": "nightly-planner",
    "cron": "30 2 * * *",
    "timezone": "Europe/Berlin",
    "job": {"name": "nightly", "hook": "plan"},
}


def test_a_schedule_is_triggered_and_paused_from_its_page(
    database_url: str, spawn_server: SpawnServer, page: Page
) -> None:
    server = spawn_server(database_url, env={"JOBNIK_SWEEP_INTERVAL": "0"})
    made = httpx.post(f"{server.url}/v1/schedules", json=SCHEDULE, timeout=10).json()

    page.goto(f"{server.url}/ui/schedules")
    expect(page.get_by_role("link", name="nightly-planner")).to_be_visible()
    shoot(page, "schedules")
    page.get_by_role("link", name="nightly-planner").click()
    expect(page.locator("ol.next-fires li")).to_have_count(5)
    expect(page.locator("tr[data-job]")).to_have_count(0)

    confirm(page, "Trigger now", "the report is due today")
    expect(page.locator("tr[data-job]")).to_have_count(1)
    expect(page.locator("tr[data-job]")).to_contain_text("trigger")
    confirm(page, "Pause", "holiday")
    expect(page.locator("#schedule-state")).to_contain_text("PAUSED (holiday)")
    expect(page.get_by_role("button", name="Resume", exact=True)).to_be_visible()
    shoot(page, "schedule")

    events = httpx.get(
        f"{server.url}/v1/events", params={"type": ["ScheduleFired", "SchedulePaused"]}, timeout=10
    ).json()["items"]
    assert [(e["type"], e["reason"]) for e in events] == [
        ("ScheduleFired", "the report is due today"),
        ("SchedulePaused", "holiday"),
    ]
    assert all(e["entityId"] == made["id"] for e in events)
