"""The console in a real browser (Debian's chromium, driven by Playwright) against a live
`jobnik serve` on both backends: live progress, time travel, the operator's actions with their
reasons, filters, queues, and access control. Screenshots of each page at a desktop's and a
phone's size go to tests/artifacts/screenshots/ (CI keeps them)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, Page, Route, expect, sync_playwright

from .conftest import SpawnServer
from .test_access import tokens

CHROMIUM = "/usr/bin/chromium"
SHOTS = Path(__file__).resolve().parents[1] / "artifacts" / "screenshots"
SIZES = {"desktop": (1280, 800), "phone": (390, 844)}
QUEUES = re.compile(r".*/v1/queues(\?.*)?$")  # the page asks for its page size
Json = dict[str, Any]


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield b
        b.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    """A page whose script errors and refused loads (the pages' content policy) fail the test."""
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    p = context.new_page()
    p.set_default_timeout(10_000)
    errors: list[str] = []
    p.on("pageerror", lambda e: errors.append(str(e)))
    p.on("console", lambda m: errors.append(m.text) if "Content Security Policy" in m.text else 0)
    yield p
    context.close()
    assert errors == []


def shoot(page: Page, name: str) -> None:
    """The page at both sizes, where it must fit the width (wide tables scroll in their own
    box); back at the desktop's after."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    for size, (width, height) in SIZES.items():
        page.set_viewport_size({"width": width, "height": height})
        assert page.evaluate("document.documentElement.scrollWidth") <= width, (name, size)
        page.screenshot(path=str(SHOTS / f"{name}-{size}.png"), full_page=True)
    page.set_viewport_size({"width": 1280, "height": 800})


class Api:
    def __init__(self, base: str, secret: str | None = None) -> None:
        self.base = base
        self.headers = {"Authorization": f"Bearer {secret}"} if secret else {}

    def ok(self, method: str, path: str, body: Any = None) -> Any:
        r = httpx.request(method, self.base + path, json=body, headers=self.headers, timeout=10)
        assert r.status_code < 300, r.text
        return r.json()

    def job(self, name: str, stage_type: str, tasks: int, max_attempts: int = 1) -> Json:
        job: Json = self.ok("POST", "/v1/jobs", {"name": name, "data": {}})
        stage = self.ok("POST", f"/v1/jobs/{job['id']}/stage", {"type": stage_type, "data": {}})
        body = [{"data": {"n": i}, "maxAttempts": max_attempts} for i in range(tasks)]
        self.ok("POST", f"/v1/stages/{stage['id']}/tasks", body)
        return job

    def work(self, stage_type: str, status: str = "COMPLETED", **more: Any) -> Json:
        """A worker's turn: dequeue a task of `stage_type` and report `status`."""
        task = self.ok("PATCH", f"/v1/stages/{stage_type}/tasks/dequeue")
        body = {"status": status, "attempt": task["attempt"], **more}
        result: Json = self.ok("PUT", f"/v1/tasks/{task['id']}/status", body)
        return result


def confirm(page: Page, button: str, reason: str, priority: str | None = None) -> None:
    """Click an action, give its reason in the confirmation, confirm."""
    page.get_by_role("button", name=button, exact=True).first.click()
    dialog = page.locator("dialog#confirm")
    expect(dialog).to_be_visible()
    if priority:
        dialog.get_by_label("New priority").select_option(priority)
    dialog.get_by_label("Reason (recorded on the event)").fill(reason)
    dialog.get_by_role("button", name="Confirm").click()
    expect(dialog).to_be_hidden()


def write(page: Page, job_id: str, console_header: bool) -> list[Any]:
    """Pause the job from the page's script with the cookie: [status, code, part of message]."""
    result: list[Any] = page.evaluate(
        """async ([id, header]) => {
             const headers = {"Content-Type": "application/json"};
             if (header) headers["X-Jobnik-Console"] = "1";
             const r = await fetch(`/v1/jobs/${id}/status`, {method: "PUT", headers,
               body: JSON.stringify({status: "PAUSED", reason: "try"})});
             const body = await r.json();
             return [r.status, body.code, body.message]; }""",
        [job_id, console_header],
    )
    expected = "needs the produce" if console_header else "X-Jobnik-Console"
    return [*result[:2], expected if expected in result[2] else result[2]]


def fake_queues(route: Route, completed: int) -> None:
    item = {
        "stageType": "tiles",
        "queued": 7,
        "oldestQueuedAt": "2026-01-01T00:00:00Z",
        "oldestQueuedAgeSeconds": 95,
        "inProgress": 2,
        "completed": completed,
        "failed": 1,
        "lastDequeueAt": "2026-01-01T00:01:00Z",
    }
    route.fulfill(json={"total": 1, "items": [item]})


def test_an_operator_watches_steers_and_reruns_a_job_in_the_console(
    database_url: str, spawn_server: SpawnServer, page: Page
) -> None:
    server = spawn_server(database_url)
    api = Api(server.url)
    job = api.job("nightly-tiles", "tiles", tasks=4)
    other = api.job("weekly-report", "report", tasks=1)

    # the stage's bar moves live as a worker completes tasks: no reload (the marker survives)
    page.goto(f"{server.url}/ui/jobs/{job['id']}")
    page.evaluate("window.notReloaded = true")
    stage_bar = page.get_by_label("Progress of stage tiles")
    expect(stage_bar).to_have_attribute("value", "0")
    api.work("tiles")
    expect(stage_bar).to_have_attribute("value", "25")
    api.work("tiles")
    expect(stage_bar).to_have_attribute("value", "50")
    assert page.evaluate("window.notReloaded") is True
    shoot(page, "job")

    # the keyboard alone: the skip link first; an action's confirmation opens, Escape closes it
    page.keyboard.press("Tab")
    expect(page.get_by_role("link", name="Skip to content")).to_be_focused()
    page.get_by_role("button", name="Pause").focus()
    page.keyboard.press("Enter")
    expect(page.get_by_label("Reason (recorded on the event)")).to_be_focused()
    page.keyboard.press("Escape")
    expect(page.locator("dialog#confirm")).to_be_hidden()

    # pause and resume, each with a reason
    confirm(page, "Pause", "maintenance window")
    expect(page.locator("#job-status")).to_have_text("PAUSED")
    confirm(page, "Resume", "maintenance over")
    expect(page.locator("#job-status")).to_have_text("IN_PROGRESS")
    confirm(page, "Change priority", "customer waiting", priority="HIGH")
    expect(page.locator(".facts")).to_contain_text("HIGH")

    # a task fails for good; rerun it from the console and see the job complete
    api.work("tiles", "FAILED", reason="disk full")
    expect(page.locator("#job-status")).to_have_text("FAILED")
    expect(page.locator("tr[data-task]").filter(has_text="disk full")).to_have_count(1)
    confirm(page, "Rerun task", "disk cleaned")
    expect(page.locator("#job-status")).not_to_have_text("FAILED")
    api.work("tiles")
    api.work("tiles")
    expect(page.locator("#job-status")).to_have_text("COMPLETED")
    expect(stage_bar).to_have_attribute("value", "100")
    assert page.evaluate("window.notReloaded") is True

    # the history shows the reasons; time travel to an event before any task completed
    page.get_by_role("link", name="History and time travel").click()
    for reason in ("maintenance window", "maintenance over", "disk cleaned", "customer waiting"):
        expect(page.locator("table.history")).to_contain_text(reason)
    paused = page.locator("tr[data-position]").filter(has_text="JobPaused")
    paused.locator("summary").click()  # the payload on demand
    expect(paused.locator("pre")).to_be_visible()
    shoot(page, "history")
    created = page.locator("tr[data-position]").filter(has_text="TaskCreated").last
    created.get_by_role("link", name=re.compile("as it was at event")).click()
    expect(page.locator(".timetravel")).to_contain_text("As it was at event")
    expect(page.locator("#job-status")).to_have_text("PENDING")
    expect(page.get_by_label("Progress of stage tiles")).to_have_attribute("value", "0")
    expect(page.get_by_role("button", name="Pause")).to_have_count(0)  # the past is read-only
    shoot(page, "as-of")

    # the jobs list: its counts and rows follow the log; filter by name and status
    page.goto(f"{server.url}/ui/jobs")
    page.evaluate("window.notReloaded = true")
    expect(page.locator("tr[data-job]")).to_have_count(2)
    expect(page.locator("[data-count=PENDING]")).to_contain_text("PENDING 1")
    shoot(page, "jobs")
    late = api.job("late-arrival", "late", tasks=1)
    expect(page.locator(f"tr[data-job='{late['id']}']")).to_be_visible()
    expect(page.locator("[data-count=PENDING]")).to_contain_text("PENDING 2")
    assert page.evaluate("window.notReloaded") is True
    page.get_by_label("Name", exact=True).fill("weekly-report")
    page.get_by_role("button", name="Filter").click()
    expect(page.locator("tr[data-job]")).to_have_count(1)
    expect(page.locator(f"tr[data-job='{other['id']}']")).to_be_visible()
    page.goto(f"{server.url}/ui/jobs")
    page.get_by_label("Priority", exact=True).select_option("HIGH")
    page.get_by_role("button", name="Filter").click()
    expect(page.locator("tr[data-job]")).to_have_count(1)
    expect(page.locator(f"tr[data-job='{job['id']}']")).to_be_visible()
    page.goto(f"{server.url}/ui/jobs")
    page.get_by_label("Status", exact=True).select_option("COMPLETED")
    page.get_by_role("button", name="Filter").click()
    expect(page.locator("tr[data-job]")).to_have_count(1)
    expect(page.locator(f"tr[data-job='{job['id']}']")).to_be_visible()
    expect(page.locator("[data-count=COMPLETED]")).to_contain_text("1")

    # a finished job is deleted from the console, with its reason
    page.goto(f"{server.url}/ui/jobs/{job['id']}")
    confirm(page, "Delete", "tidy up")
    expect(page).to_have_url(re.compile(r"/ui/jobs$"))
    expect(page.locator("tr[data-job]")).to_have_count(2)


def test_queues_show_the_servers_figures_and_say_when_it_has_none(
    database_url: str, spawn_server: SpawnServer, page: Page
) -> None:
    server = spawn_server(database_url)
    polls = iter(range(100, 10_000, 10))  # `completed` grows by 10 a poll
    page.route(QUEUES, lambda route: fake_queues(route, next(polls)))
    stuck = {
        "kind": "lease_expired",
        "reason": "no heartbeat for 10 min",
        "since": "2026-01-01T00:00:00Z",
        "jobId": "0c6f6a1e-9a51-4d1c-8f38-2f1f1b1d7a11",
        "stageId": "5d7c1b7e-4c1f-4e9a-9a55-3d9f0a1b2c3d",
        "taskId": "a1b2c3d4-0000-4000-8000-000000000001",
        "stageType": "tiles",
    }
    page.route("**/v1/stuck", lambda route: route.fulfill(json={"items": [stuck]}))
    page.clock.install()
    page.goto(f"{server.url}/ui/queues")
    row = page.locator("tr[data-stage-type=tiles]")
    expect(row).to_contain_text("7")
    expect(row.locator("td").nth(2)).to_have_text("95 s")  # the oldest one's age
    page.clock.run_for(60_000)  # twelve polls of five seconds, 10 completed each: 120 a minute
    expect(row.locator(".throughput")).to_have_text("120.0")
    stuck_row = page.locator("table.stuck tbody tr")
    expect(stuck_row).to_contain_text("no heartbeat for 10 min")
    expect(stuck_row.get_by_role("link", name="0c6f6a1e")).to_have_attribute(
        "href", f"/ui/jobs/{stuck['jobId']}"
    )
    shoot(page, "queues")

    page.unroute(QUEUES)
    page.unroute("**/v1/stuck")
    page.reload()
    if httpx.get(f"{server.url}/v1/queues").status_code == 404:
        expect(page.get_by_text("Not available: this server has no /v1/queues")).to_be_visible()


def test_the_api_docs_render_their_operations_with_nothing_fetched_from_elsewhere(
    spawn_server: SpawnServer, page: Page, tmp_path: Path
) -> None:
    server = spawn_server(f"sqlite:///{tmp_path}/docs.db")
    outside: list[str] = []

    def refuse(route: Route) -> None:
        outside.append(route.request.url)
        route.abort()

    page.route(lambda url: not url.startswith(server.url), refuse)  # as if air-gapped
    page.goto(f"{server.url}/docs")

    expect(page.locator(".opblock-summary-path").first).to_be_visible()
    assert page.locator(".opblock").count() > 40
    expect(page.locator(".opblock-summary-path", has_text="/v1/jobs/{jobId}/rerun")).to_be_visible()
    assert outside == []


def test_with_tokens_the_console_signs_in_once_and_hides_what_a_role_may_not_do(
    database_url: str, spawn_server: SpawnServer, page: Page
) -> None:
    env = {"JOBNIK_DATABASE_URL": database_url}
    reader = tokens(env, "create", "alice", "--role", "reader")
    operator = tokens(env, "create", "olga", "--role", "operator")
    server = spawn_server(database_url, env={"JOBNIK_AUTH": "tokens"})
    job = Api(server.url, operator).job("secured", "secure-type", tasks=1)

    page.goto(f"{server.url}/ui/jobs/{job['id']}")
    expect(page).to_have_url(re.compile("/ui/login"))
    page.get_by_label(re.compile("^Token")).fill("alice.wrong")
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("alert")).to_contain_text("not valid")
    shoot(page, "login")
    page.get_by_label(re.compile("^Token")).fill(reader)
    page.get_by_role("button", name="Sign in").click()
    page.goto(f"{server.url}/ui/jobs/{job['id']}")
    expect(page.locator("header")).to_contain_text("alice (reader)")
    expect(page.locator("#job-status")).to_have_text("PENDING")
    expect(page.locator("button.action")).to_have_count(0)  # a reader sees no action
    cookie = next(c for c in page.context.cookies() if c["name"] == "jobnik_token")
    assert (cookie["httpOnly"], cookie["sameSite"]) == (True, "Strict")
    assert page.evaluate("document.cookie") == ""  # no script reads the token

    # the API refuses the reader's write anyway
    assert write(page, job["id"], console_header=True) == [403, "FORBIDDEN", "needs the produce"]

    page.get_by_role("button", name="Sign out").click()
    page.get_by_label(re.compile("^Token")).fill(operator)
    page.get_by_role("button", name="Sign in").click()
    page.goto(f"{server.url}/ui/jobs/{job['id']}")
    # a write the cookie authenticates needs the console's header (no cross-site form can send it)
    assert write(page, job["id"], console_header=False) == [403, "FORBIDDEN", "X-Jobnik-Console"]
    expect(page.locator("#job-status")).to_have_text("PENDING")
    confirm(page, "Pause", "operator pauses")
    expect(page.locator("#job-status")).to_have_text("PAUSED")
    history = Api(server.url, operator).ok("GET", f"/v1/jobs/{job['id']}/history")["items"]
    paused = next(e for e in history if e["type"] == "JobPaused")
    assert (paused["actor"], paused["reason"]) == ("olga", "operator pauses")
