"""The console's pages, its sign-in cookie and the cross-site check on the cookie's writes, the
jobs list's console filters (status, newest first, counts), and /docs served with no CDN and
never framed."""

from __future__ import annotations

import base64
import hashlib
import re

import pytest
from fastapi.testclient import TestClient

from .conftest import Api, Secured

ORIGIN = "http://testserver"
CONSOLE = {"X-Jobnik-Console": "1"}


def test_the_api_docs_load_swagger_ui_from_jobnik_itself(client: TestClient) -> None:
    page = client.get("/docs")

    assert page.status_code == 200
    sources = re.findall(r'(?:src|href)="([^"]+)"', page.text)
    assert sources
    assert all(s.startswith("/docs/assets/") for s in sources), sources
    for source in sources:
        asset = client.get(source)
        assert (asset.status_code, len(asset.content) > 1000) == (200, True), source


@pytest.mark.parametrize(
    "path",
    ["/docs", "/docs/oauth2-redirect", "/docs/assets/swagger-ui-bundle.js", "/openapi.json"],
)
def test_the_api_docs_and_the_openapi_document_are_never_framed_nor_sniffed(
    client: TestClient, path: str
) -> None:
    r = client.get(path)

    assert r.status_code == 200
    assert "frame-ancestors 'none'" in r.headers["content-security-policy"]
    assert (r.headers["x-frame-options"], r.headers["x-content-type-options"]) == (
        "DENY",
        "nosniff",
    )


def test_the_api_docs_page_runs_only_its_own_scripts(client: TestClient) -> None:
    page = client.get("/docs")
    inline = re.findall(r"<script>(.*?)</script>", page.text, re.DOTALL)
    digest = base64.b64encode(hashlib.sha256(inline[0].encode()).digest()).decode()

    policy = page.headers["content-security-policy"]

    assert len(inline) == 1
    assert "default-src 'self'" in policy
    assert f"script-src 'self' 'sha256-{digest}'" in policy


def test_the_console_pages_show_a_job_its_stages_tasks_and_history(api: Api) -> None:
    job = api.create_job(name="console-job")
    stage = api.add_stage(job["id"], type="console-type")
    api.add_tasks(stage["id"], 2, maxAttempts=1)
    api.run_task("console-type", "FAILED")

    jobs = api.http.get("/ui/jobs")
    page = api.http.get(f"/ui/jobs/{job['id']}")
    history = api.http.get(f"/ui/jobs/{job['id']}/history")

    assert jobs.status_code == page.status_code == history.status_code == 200
    assert f'href="/ui/jobs/{job["id"]}">console-job</a>' in jobs.text
    assert re.search(r'data-count="FAILED">FAILED <b>1</b>', jobs.text)
    assert 'aria-label="Progress of stage console-type"' in page.text
    assert page.text.count('data-url="/v1/tasks/') == 1  # the failed task's rerun
    assert ">Rerun job</button>" in page.text
    assert ">Rerun 1 failed task</button>" in page.text
    assert "JobFailed" in history.text
    assert "TaskCreated" in history.text


def test_a_failed_jobs_completed_stages_offer_a_rerun_from_them(api: Api) -> None:
    job = api.create_job(name="two-stages")
    first = api.add_stage(job["id"], type="first-type")
    second = api.add_stage(job["id"], type="second-type")
    api.add_tasks(first["id"])
    api.add_tasks(second["id"], maxAttempts=1)
    api.run_task("first-type")
    api.run_task("second-type", "FAILED")

    page = api.http.get(f"/ui/jobs/{job['id']}").text

    offers = re.findall(r"data-body='([^']*)'[^>]*>Rerun job from here<", page)
    assert offers == [f'{{"fromStageId": "{first["id"]}"}}']


def test_pages_load_only_from_this_server_and_are_never_framed(api: Api) -> None:
    page = api.http.get("/ui/queues")

    policy = page.headers["content-security-policy"]
    assert "default-src 'self'" in policy
    assert "frame-ancestors 'none'" in policy
    assert page.headers["x-frame-options"] == "DENY"


def test_the_job_as_it_was_shows_no_action_and_no_stream(api: Api) -> None:
    job = api.create_job(name="past")
    api.add_stage(job["id"], type="past-type")

    page = api.http.get(f"/ui/jobs/{job['id']}", params={"as_of": "1"})

    assert page.status_code == 200
    assert "As it was at event 1" in page.text
    assert "button" not in page.text.split('id="live"')[1].split("</main>")[0]
    assert "data-stream" not in page.text


def test_the_jobs_page_filters_and_refuses_what_the_api_would(api: Api) -> None:
    api.create_job(name="alpha")
    beta = api.create_job(name="beta", priority="HIGH")
    api.set_job_status(beta["id"], "ABORTED")

    by_status = api.http.get("/ui/jobs", params={"status": "ABORTED", "name": "", "parent": ""})
    by_priority = api.http.get("/ui/jobs", params={"priority": "HIGH"})
    none = api.http.get("/ui/jobs", params={"created_to": "2000-01-01T00:00"})
    bad = api.http.get("/ui/jobs", params={"status": "DONE"})
    unknown = api.http.get("/ui/jobs", params={"colour": "red"})

    assert by_status.text.count("data-job=") == by_priority.text.count("data-job=") == 1
    assert "beta" in by_status.text
    assert "alpha" not in by_status.text
    assert none.text.count("data-job=") == 0
    assert bad.status_code == unknown.status_code == 400
    assert bad.json()["code"] == unknown.json()["code"] == "VALIDATION_ERROR"


def test_the_jobs_page_pages_twenty_jobs_at_a_time_newest_first(api: Api) -> None:
    made = [api.create_job(name=f"job-{i:02}") for i in range(23)]

    first = api.http.get("/ui/jobs", params={"name": ""}).text
    second = api.http.get("/ui/jobs", params={"page": "2"}).text
    past = api.http.get("/ui/jobs", params={"page": "3"}).text

    ids = re.findall(r'<tr data-job="([^"]+)"', first)
    assert ids == [j["id"] for j in reversed(made)][:20]
    assert re.findall(r'<tr data-job="([^"]+)"', second) == [j["id"] for j in made[:3]][::-1]
    assert 'href="?page=2" rel="next"' in first
    assert 'href="?" rel="prev"' in second
    assert "Page 2 of 2" in second
    assert "No job matches." in past


def test_jobs_are_found_by_status_newest_first_and_counted_per_status(api: Api) -> None:
    first, second, third = (api.create_job(name=n) for n in ("one", "two", "three"))
    api.set_job_status(second["id"], "PAUSED")

    newest = api.http.get("/v1/jobs", params={"newest_first": "true", "page": 1})
    paused = api.http.get("/v1/jobs", params={"status": "PAUSED", "page": 1})
    counts = api.http.get("/v1/job-counts")
    named = api.http.get("/v1/job-counts", params={"job_name": "one"})

    assert [j["id"] for j in newest.json()["items"]] == [third["id"], second["id"], first["id"]]
    assert [j["id"] for j in paused.json()["items"]] == [second["id"]]
    assert counts.json()["total"] == 3
    assert (counts.json()["byStatus"]["PENDING"], counts.json()["byStatus"]["PAUSED"]) == (2, 1)
    assert named.json()["byStatus"]["PENDING"] == named.json()["total"] == 1


# -- the sign-in cookie ------------------------------------------------------------------------


@pytest.fixture
def browser(secured: Secured) -> TestClient:
    """A client of the same app with no Authorization header: only what the console keeps."""
    return TestClient(secured.http.app, follow_redirects=False)


def sign_in(browser: TestClient, bearer: str) -> None:
    r = browser.post("/ui/login", data={"token": bearer, "next": "/ui/queues"})
    assert (r.status_code, r.headers["location"]) == (303, "/ui/queues"), r.text
    cookie = r.headers["set-cookie"]
    assert {"jobnik_token", "HttpOnly", "SameSite"} <= {
        p.strip().split("=")[0] for p in cookie.split(";")
    }
    assert "SameSite=strict" in cookie
    assert "Secure" not in cookie  # served over plain HTTP here


def test_over_tls_the_cookie_is_secure(secured: Secured) -> None:
    tls = TestClient(secured.http.app, base_url="https://testserver", follow_redirects=False)

    r = tls.post("/ui/login", data={"token": secured.bearers["reader"]})

    assert r.status_code == 303
    assert "Secure" in [p.strip() for p in r.headers["set-cookie"].split(";")]


def test_a_console_page_without_a_token_goes_to_the_login_page(browser: TestClient) -> None:
    page = browser.get("/ui/jobs")
    api = browser.get("/v1/jobs")

    assert (page.status_code, page.headers["location"]) == (303, "/ui/login")
    assert (api.status_code, api.json()["code"]) == (401, "UNAUTHENTICATED")


def test_a_wrong_token_is_refused_and_sets_no_cookie(browser: TestClient) -> None:
    r = browser.post("/ui/login", data={"token": "the-admin.wrong"})

    assert r.status_code == 401
    assert "the bearer token is not valid" in r.text
    assert "set-cookie" not in r.headers


def test_the_cookie_reads_and_writes_from_the_consoles_pages_only(
    secured: Secured, browser: TestClient
) -> None:
    job = secured.api.create_job(name="cookie")
    sign_in(browser, secured.bearers["operator"])
    pause = {"status": "PAUSED", "reason": "from the console"}
    url = f"/v1/jobs/{job['id']}/status"

    assert browser.get(f"/ui/jobs/{job['id']}").status_code == 200
    assert browser.get("/v1/jobs").status_code == 200
    with secured.api.nothing_written():
        bare = browser.put(url, json=pause)
        foreign = browser.put(url, json=pause, headers={**CONSOLE, "Origin": "http://evil.test"})
    same = browser.put(url, json=pause, headers={**CONSOLE, "Origin": ORIGIN})

    assert (bare.status_code, bare.json()["code"]) == (403, "FORBIDDEN")
    assert "X-Jobnik-Console" in bare.json()["message"]
    assert (foreign.status_code, foreign.json()["code"]) == (403, "FORBIDDEN")
    assert same.status_code == 200, same.text
    assert secured.api.events_of(job["id"]).count("JobPaused") == 1


def test_actions_show_for_the_roles_that_may_do_them(secured: Secured, browser: TestClient) -> None:
    job = secured.api.create_job(name="roles")
    pages = {}
    for role in ("reader", "producer", "operator"):
        browser.cookies.clear()
        sign_in(browser, secured.bearers[role])
        pages[role] = browser.get(f"/ui/jobs/{job['id']}").text

    def actions(html: str) -> set[str]:
        return set(re.findall(r'<button type="button" class="action[^"]*"[^>]*>([^<]+)<', html))

    assert actions(pages["reader"]) == set()
    assert actions(pages["producer"]) == {"Pause", "Abort", "Change priority"}
    assert actions(pages["operator"]) == {"Pause", "Abort", "Change priority"}  # none has ended
    assert 'the-reader <span class="role">(reader)</span>' in pages["reader"]


def test_signing_out_clears_the_cookie_and_a_foreign_form_cannot_sign_in(
    secured: Secured, browser: TestClient
) -> None:
    sign_in(browser, secured.bearers["reader"])
    out = browser.post("/ui/logout", headers={"Origin": ORIGIN})
    browser.cookies.clear()  # (the jar keeps what the answer's Max-Age=0 drops in a browser)
    foreign = browser.post(
        "/ui/login", data={"token": secured.bearers["reader"]}, headers={"Origin": "http://x.test"}
    )

    assert (out.status_code, out.headers["location"]) == (303, "/ui/login")
    cleared = out.headers["set-cookie"]
    assert cleared.startswith('jobnik_token=""')
    assert "Max-Age=0" in cleared
    assert (foreign.status_code, foreign.json()["code"]) == (403, "FORBIDDEN")


def test_the_jobs_page_offers_its_bulk_actions_to_the_roles_that_may_take_them(
    secured: Secured, browser: TestClient
) -> None:
    job = secured.api.create_job(name="bulk")
    pages = {}
    for role in ("reader", "producer"):
        browser.cookies.clear()
        sign_in(browser, secured.bearers[role])
        pages[role] = browser.get("/ui/jobs").text

    bulk = re.findall(r'data-bulk="job"[^>]*>([^<]+)<', pages["producer"])
    assert bulk == ["Pause selected", "Resume selected", "Abort selected"]
    assert f'data-select="{job["id"]}" data-name="bulk"' in pages["producer"]
    assert 'data-url="/v1/jobs/{id}/status"' in pages["producer"]  # each job's own command
    assert "data-select" not in pages["reader"]
    assert "data-bulk" not in pages["reader"]


def test_a_stage_offers_to_rerun_all_its_failed_tasks_with_one_reason(api: Api) -> None:
    job = api.create_job(name="many-failed")
    stage = api.add_stage(job["id"], type="many-failed")
    api.add_tasks(stage["id"], 3, maxAttempts=1)
    held = [api.dequeue("many-failed") for _ in range(2)]
    for task in held:
        api.report(task["id"], "FAILED")
    other = api.create_job(name="one-failed")
    api.add_tasks(api.add_stage(other["id"], type="one-failed")["id"], 1, maxAttempts=1)
    api.run_task("one-failed", "FAILED")

    many = api.http.get(f"/ui/jobs/{job['id']}").text
    one = api.http.get(f"/ui/jobs/{other['id']}").text

    assert ">Rerun 2 failed tasks</button>" in many
    assert f'data-url="/v1/stages/{stage["id"]}/rerun"' in many
    assert "One reason for all; each task&#39;s rerun records it." in many
    assert 'data-url="/v1/tasks/' not in many  # a task alone: refused while others failed
    assert one.count('data-url="/v1/tasks/') == 1
