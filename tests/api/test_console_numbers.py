"""The console says what its numbers mean: the job's progress beside its tasks', the run counters
in words, why a queued task waits; and it charts the last hour of each stage type and a job's
completions from the activity projection."""

from __future__ import annotations

import html
import re
from datetime import UTC, datetime, timedelta

from jobnik.projections.catchup.runner import wait_for

from .conftest import Api
from .test_activity import steady
from .test_queues import at

T0 = datetime(2030, 1, 1, 9, 0, tzinfo=UTC)


def caught_up(api: Api) -> None:
    store = api.http.app.state.store  # type: ignore[attr-defined]
    for name in ("run_stats", "activity"):
        assert wait_for(store, name, api.position, 10) >= api.position


def text(page: str) -> str:
    """The page's words, tags and charts left out."""
    page = re.sub(r"<svg.*?</svg>", " ", page, flags=re.S)
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", page)))


def bar_value(page: str, label: str) -> str:
    found = re.search(rf'<progress [^>]*value="(\d+)" aria-label="{re.escape(label)}"', page)
    assert found, label
    return found.group(1)


def test_the_jobs_progress_counts_stages_and_is_shown_beside_its_tasks_each_labelled(
    api: Api,
) -> None:
    job = api.create_job("two-stages")
    first = api.add_stage(job["id"], type="first")
    api.add_stage(job["id"], type="second")
    api.add_tasks(first["id"], 4)
    api.run_task("first")

    page = api.http.get(f"/ui/jobs/{job['id']}").text

    assert bar_value(page, "Job progress (stages completed)") == "0"
    assert bar_value(page, "Tasks completed, all stages") == "25"
    assert bar_value(page, "Progress of stage first") == "25"
    words = text(page)
    assert "Job progress: stages completed 0% 0% 0 of 2 stages" in words
    assert "Tasks completed, all stages 25% 25% 1 of 4 tasks" in words
    assert "The job's progress counts its completed stages" in words


def test_run_counters_are_named_in_words_and_say_why_created_exceeds_the_tasks(
    api: Api,
) -> None:
    job = api.create_job("retrying")
    stage = api.add_stage(job["id"], type="retrying")
    api.add_tasks(stage["id"], 12, maxAttempts=3)
    api.run_task("retrying", "FAILED")
    api.run_task("retrying", "FAILED")
    caught_up(api)

    words = text(api.http.get(f"/ui/jobs/{job['id']}").text)

    assert "created 14 (12 tasks + 2 re-created by a retry or rerun)" in words
    assert "retried after error 2" in words
    assert "retriedAfterError" not in words
    assert "obsolete still queued when the job ended (a failed job's leftovers)" in words


def test_a_paused_jobs_queued_tasks_show_as_paused_and_how_long_ago_they_were_queued(
    api: Api,
) -> None:
    at(api, T0)
    job = api.create_job("paused")
    stage = api.add_stage(job["id"], type="pausing")
    api.add_tasks(stage["id"], 2)
    api.dequeue("pausing")
    api.set_job_status(job["id"], "PAUSED")
    at(api, T0 + timedelta(minutes=7))

    page = api.http.get(f"/ui/jobs/{job['id']}").text

    rows = re.findall(r"<tr data-task=.*?</tr>", page, flags=re.S)
    held = [r for r in rows if "IN_PROGRESS" in r]
    queued = [r for r in rows if "PENDING" in r]
    assert (len(held), len(queued)) == (1, 1)
    assert "IN_PROGRESS held by a worker" in text(held[0])
    assert "PENDING paused paused with its job (queued 7 min ago)" in text(queued[0])
    assert '<span class="status s-paused">paused</span>' in queued[0]
    assert "s-paused" not in held[0]


def test_a_queued_tasks_wait_is_said_for_each_reason_it_is_not_handed_out(api: Api) -> None:
    at(api, T0)
    job = api.create_job("held")
    first = api.add_stage(job["id"], type="held-first")
    later = api.add_stage(job["id"], type="held-later")
    api.add_tasks(first["id"], 1)
    api.add_tasks(later["id"], 1)
    at(api, T0 + timedelta(seconds=45))

    now = text(api.http.get(f"/ui/jobs/{job['id']}").text)
    waiting = text(api.http.get(f"/ui/jobs/{job['id']}", params={"stage": later["id"]}).text)

    assert "PENDING queued 45 s ago" in now
    assert "PENDING held until its stage is released" in waiting


def test_the_queues_page_charts_each_stage_types_last_hour(api: Api) -> None:
    at(api, T0)
    job = api.create_job("charted")
    api.add_tasks(api.add_stage(job["id"], type="render")["id"], 4, maxAttempts=2)
    at(api, T0 + timedelta(minutes=2))
    api.run_task("render")
    api.run_task("render", "FAILED")
    caught_up(api)
    at(api, T0 + timedelta(minutes=5))

    page = api.http.get("/ui/queues").text

    card = re.search(r'<article class="card" data-stage-type="render".*?</article>', page, re.S)
    assert card is not None
    words = text(card.group(0))
    for figure in ("Queued now 3", "Dequeued 2", "Completed 1", "Retried 1", "Failed 0"):
        assert figure in words
    descriptions = re.findall(r"<desc[^>]*>([^<]*)</desc>", card.group(0))
    assert descriptions == [
        "queued: 0 at 08:06, 3 at 09:06 UTC, at most 4",
        "1 completed, 1 retried, 0 failed from 08:06 to 09:06 UTC; at most 2 a minute",
    ]
    assert card.group(0).count('role="img"') == 2
    assert "<script" not in card.group(0)


def test_a_jobs_page_charts_its_completions_per_minute(api: Api) -> None:
    job = steady(api, 5, (1, 1, 3))

    page = api.http.get(f"/ui/jobs/{job}").text

    chart = re.search(r'<svg [^>]*id="completions".*?</svg>', page, re.S)
    assert chart is not None
    assert re.findall(r"<title>([^<]*)</title>", chart.group(0)) == [
        "09:01 UTC: 2 completed",
        "09:03 UTC: 1 completed",
    ]
    assert "3 completed from" in chart.group(0)
