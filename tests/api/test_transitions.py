"""Every status change a caller can ask for, from every status the API can reach.

Legal requests answer 200 and move the entity; illegal ones answer the exact 400 body and write
nothing to the event log.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from .conftest import Api, Json


def illegal(kind: str, current: str, target: str) -> dict[str, str]:
    return {
        "message": f"Illegal status transition from {current} to {target}",
        "code": f"ILLEGAL_{kind}_STATUS_TRANSITION",
    }


# -- jobs: PUT /v1/jobs/{id}/status -----------------------------------------------------------

JOB_CASES = [
    # (from, requested, status after or None when refused)
    ("PENDING", "PENDING", None),
    ("PENDING", "PAUSED", "PAUSED"),
    ("PENDING", "ABORTED", "ABORTED"),
    ("IN_PROGRESS", "PENDING", None),
    ("IN_PROGRESS", "PAUSED", "PAUSED"),
    ("IN_PROGRESS", "ABORTED", "ABORTED"),
    ("PAUSED", "PENDING", "PENDING"),  # paused before it started: resumes PENDING
    ("PAUSED", "PAUSED", None),
    ("PAUSED", "ABORTED", "ABORTED"),
    ("COMPLETED", "PENDING", None),
    ("COMPLETED", "PAUSED", None),
    ("COMPLETED", "ABORTED", None),
    ("FAILED", "PENDING", None),
    ("FAILED", "PAUSED", None),
    ("FAILED", "ABORTED", None),
    ("ABORTED", "PENDING", None),
    ("ABORTED", "PAUSED", None),
    ("ABORTED", "ABORTED", None),
]


@pytest.mark.parametrize(("current", "target", "after"), JOB_CASES)
def test_job_status_request(api: Api, current: str, target: str, after: str | None) -> None:
    job = api.job_in(current)

    with api.writes_iff(after is not None):
        r = api.http.put(f"/v1/jobs/{job['id']}/status", json={"status": target})

    if after is None:
        assert (r.status_code, r.json()) == (400, illegal("JOB", current, target))
        assert api.job(job["id"])["status"] == current
    else:
        assert (r.status_code, r.json()) == (200, {"code": "JOB_MODIFIED_SUCCESSFULLY"})
        assert api.job(job["id"])["status"] == after


def test_resuming_a_started_job_restores_in_progress(api: Api) -> None:
    job = api.job_in("IN_PROGRESS")
    api.set_job_status(job["id"], "PAUSED")

    api.set_job_status(job["id"], "PENDING")

    assert api.job(job["id"])["status"] == "IN_PROGRESS"


# -- stages: PUT /v1/stages/{id}/status {"status": "PENDING"} ------------------------------


def _first_stage(api: Api, **fields: Any) -> tuple[Json, Json]:
    job = api.create_job()
    return job, api.add_stage(job["id"], **fields)


def stage_created_behind_unfinished(api: Api) -> Json:
    job, first = _first_stage(api)
    api.add_tasks(first["id"])
    return api.add_stage(job["id"])


def stage_waiting_first(api: Api) -> Json:
    return _first_stage(api, startAsWaiting=True)[1]


def stage_waiting_behind_unfinished(api: Api) -> Json:
    job, first = _first_stage(api)
    api.add_tasks(first["id"])
    return api.add_stage(job["id"], startAsWaiting=True)


def stage_waiting_behind_completed(api: Api) -> Json:
    job, first = _first_stage(api)
    api.add_tasks(first["id"])
    waiting = api.add_stage(job["id"], startAsWaiting=True)
    api.run_task(first["type"])
    return waiting


def stage_pending_first(api: Api) -> Json:
    return _first_stage(api)[1]


def stage_pending_behind_completed(api: Api) -> Json:
    job, first = _first_stage(api)
    api.add_tasks(first["id"])
    second = api.add_stage(job["id"])
    api.run_task(first["type"])
    return second


def stage_in_progress_first(api: Api) -> Json:
    _, stage = _first_stage(api)
    api.add_tasks(stage["id"], count=2)
    api.dequeue(stage["type"])
    return stage


def stage_in_progress_behind_completed(api: Api) -> Json:
    second = stage_pending_behind_completed(api)
    api.add_tasks(second["id"], count=2)
    api.dequeue(second["type"])
    return second


def stage_completed_first(api: Api) -> Json:
    job, first = _first_stage(api)
    api.add_tasks(first["id"])
    api.add_stage(job["id"])
    api.run_task(first["type"])
    return first


def stage_failed_first(api: Api) -> Json:
    _, stage = _first_stage(api)
    api.add_tasks(stage["id"], maxAttempts=1)
    api.run_task(stage["type"], "FAILED")
    return stage


def stage_failed_behind_completed(api: Api) -> Json:
    second = stage_pending_behind_completed(api)
    api.add_tasks(second["id"], maxAttempts=1)
    api.run_task(second["type"], "FAILED")
    return second


def stage_created_behind_failed(api: Api) -> Json:
    job, first = _first_stage(api)
    api.add_tasks(first["id"], maxAttempts=1)
    second = api.add_stage(job["id"])
    api.run_task(first["type"], "FAILED")
    return second


def stage_aborted_first(api: Api) -> Json:
    job, stage = _first_stage(api)
    api.set_job_status(job["id"], "ABORTED")
    return stage


def stage_aborted_behind_aborted(api: Api) -> Json:
    job, _ = _first_stage(api)
    second = api.add_stage(job["id"])
    api.set_job_status(job["id"], "ABORTED")
    return second


def stage_aborted_behind_completed(api: Api) -> Json:
    second = stage_pending_behind_completed(api)
    api.set_job_status(api.stage(second["id"])["jobId"], "ABORTED")
    return second


NOT_COMPLETED = {
    "message": "Previous stage is not COMPLETED",
    "code": "ILLEGAL_STAGE_STATUS_TRANSITION",
}

# CREATED behind a COMPLETED stage cannot be reached: the previous stage's completion releases it.
STAGE_CASES: list[tuple[Callable[[Api], Json], str, dict[str, str] | None, str]] = [
    (stage_created_behind_unfinished, "CREATED", NOT_COMPLETED, "CREATED"),
    (stage_created_behind_failed, "CREATED", NOT_COMPLETED, "CREATED"),
    (stage_waiting_first, "WAITING", None, "PENDING"),
    (stage_waiting_behind_unfinished, "WAITING", NOT_COMPLETED, "WAITING"),
    (stage_waiting_behind_completed, "WAITING", None, "PENDING"),
    (stage_pending_first, "PENDING", None, "PENDING"),
    (stage_pending_behind_completed, "PENDING", None, "PENDING"),
    (
        stage_in_progress_first,
        "IN_PROGRESS",
        illegal("STAGE", "IN_PROGRESS", "PENDING"),
        "IN_PROGRESS",
    ),
    (
        stage_in_progress_behind_completed,
        "IN_PROGRESS",
        illegal("STAGE", "IN_PROGRESS", "PENDING"),
        "IN_PROGRESS",
    ),
    (stage_completed_first, "COMPLETED", illegal("STAGE", "COMPLETED", "PENDING"), "COMPLETED"),
    (stage_failed_first, "FAILED", illegal("STAGE", "FAILED", "PENDING"), "FAILED"),
    (stage_failed_behind_completed, "FAILED", illegal("STAGE", "FAILED", "PENDING"), "FAILED"),
    (stage_aborted_first, "ABORTED", illegal("STAGE", "ABORTED", "PENDING"), "ABORTED"),
    (stage_aborted_behind_aborted, "ABORTED", NOT_COMPLETED, "ABORTED"),
    (stage_aborted_behind_completed, "ABORTED", illegal("STAGE", "ABORTED", "PENDING"), "ABORTED"),
]


@pytest.mark.parametrize(
    ("arrange", "current", "error", "after"),
    STAGE_CASES,
    ids=[case[0].__name__.removeprefix("stage_") for case in STAGE_CASES],
)
def test_stage_release_request(
    api: Api,
    arrange: Callable[[Api], Json],
    current: str,
    error: dict[str, str] | None,
    after: str,
) -> None:
    stage = arrange(api)
    assert api.stage(stage["id"])["status"] == current
    no_op = current == "PENDING"

    with api.writes_iff(error is None and not no_op):
        r = api.http.put(f"/v1/stages/{stage['id']}/status", json={"status": "PENDING"})

    if error is None:
        assert (r.status_code, r.json()) == (200, {"code": "STAGE_MODIFIED_SUCCESSFULLY"})
    else:
        assert (r.status_code, r.json()) == (400, error)
    assert api.stage(stage["id"])["status"] == after


def test_releasing_a_stage_leaves_its_job_alone(api: Api) -> None:
    job, stage = _first_stage(api, startAsWaiting=True)

    api.release(stage["id"])

    assert api.job(job["id"])["status"] == "PENDING"


# -- tasks: PUT /v1/tasks/{id}/status -----------------------------------------------------

TASK_CASES = [
    # (from, reported, status after or the computed target named in the refusal)
    ("PENDING", "COMPLETED", None, "COMPLETED"),
    ("PENDING", "FAILED", None, "RETRIED"),  # FAILED is rewritten before validation
    ("IN_PROGRESS", "COMPLETED", "COMPLETED", None),
    ("IN_PROGRESS", "FAILED", "RETRIED", None),
    ("RETRIED", "COMPLETED", None, "COMPLETED"),
    ("RETRIED", "FAILED", None, "RETRIED"),
    ("COMPLETED", "COMPLETED", None, "COMPLETED"),
    ("COMPLETED", "FAILED", None, "RETRIED"),
    ("FAILED", "COMPLETED", None, "COMPLETED"),
    ("FAILED", "FAILED", None, "FAILED"),
    ("ABORTED", "COMPLETED", None, "COMPLETED"),
    ("ABORTED", "FAILED", None, "RETRIED"),
]


@pytest.mark.parametrize(("current", "reported", "after", "named"), TASK_CASES)
def test_task_report(
    api: Api, current: str, reported: str, after: str | None, named: str | None
) -> None:
    task = api.task_in(current)

    with api.writes_iff(after is not None):
        r = api.http.put(f"/v1/tasks/{task['id']}/status", json={"status": reported})

    if after is None:
        assert (r.status_code, r.json()) == (400, illegal("TASK", current, str(named)))
        assert api.task(task["id"]) == task
    else:
        assert r.status_code == 200
        assert r.json()["status"] == after
        assert r.json() == api.task(task["id"])


def test_a_pending_task_with_one_attempt_names_failed_in_the_refusal(api: Api) -> None:
    job = api.create_job()
    stage = api.add_stage(job["id"])
    (task,) = api.add_tasks(stage["id"], maxAttempts=1)

    with api.nothing_written():
        r = api.http.put(f"/v1/tasks/{task['id']}/status", json={"status": "FAILED"})

    assert (r.status_code, r.json()) == (400, illegal("TASK", "PENDING", "FAILED"))


def test_an_in_progress_task_with_one_attempt_fails_for_good(api: Api) -> None:
    job = api.create_job()
    stage = api.add_stage(job["id"])
    api.add_tasks(stage["id"], maxAttempts=1)
    task = api.dequeue(stage["type"])

    done = api.report(task["id"], "FAILED")

    assert (done["status"], done["attempts"]) == ("FAILED", 1)
