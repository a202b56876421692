"""Through HTTP: delegation to child jobs, re-dispatch, results,
semantic failures, and lastStatus with DELEGATING and WAITING."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from jobnik.api.routes import tasks
from jobnik.api.testing import memory_app
from jobnik.projections.queries import views

from .conftest import EMPTY_SUMMARY, Api, Json


def running_task(api: Api, name: str = "planner", **stage: Any) -> tuple[Json, Json]:
    """A job with one stage and one task, dequeued: (the job, the task IN_PROGRESS)."""
    job = api.create_job(name)
    created = api.add_stage(job["id"], **stage)
    api.add_tasks(created["id"])
    return job, api.dequeue(created["type"])


def child_job(api: Api, parent_task: Json, *, tasks: int = 1, name: str = "worker") -> Json:
    """A child job of `parent_task` with one stage of `tasks` tasks; returns the job and type."""
    job = api.create_job(name, parentTaskId=parent_task["id"])
    stage = api.add_stage(job["id"])
    api.add_tasks(stage["id"], tasks, maxAttempts=1)
    return {**job, "type": stage["type"], "stageId": stage["id"]}


def report(api: Api, task_id: str, **body: Any) -> Any:
    return api.http.put(f"/v1/tasks/{task_id}/status", json=body)


def definition(api: Api, name: str) -> Json:
    r = api.http.get(f"/v1/job-definitions/{name}", params={"min_position": api.position})
    assert r.status_code == 200, r.text
    body: Json = r.json()
    return body


def test_a_delegated_task_waits_for_its_children_then_decides_with_their_results(
    api: Api,
) -> None:
    job, task = running_task(api)
    first, second = child_job(api, task), child_job(api, task)
    assert (first["parentTaskId"], first["parentJobId"]) == (task["id"], job["id"])

    waiting = report(api, task["id"], status="DELEGATED").json()

    assert (waiting["status"], waiting["delegations"]) == ("DELEGATED", 1)
    assert "leaseExpiresAt" not in waiting
    assert api.stage(task["stageId"])["summary"] == {**EMPTY_SUMMARY, "total": 1, "delegated": 1}
    api.dequeue_nothing(api.stage(task["stageId"])["type"])

    done = api.dequeue(first["type"])
    assert report(api, done["id"], status="COMPLETED", result={"tiles": 12}).status_code == 200
    assert api.task(task["id"])["status"] == "DELEGATED"  # one child is still running
    assert api.events_of(task["id"])[-1] == "TaskChildEnded"

    api.run_task(second["type"], "FAILED")  # maxAttempts 1: the second child job fails

    back = api.task(task["id"])
    assert back["status"] == "PENDING"
    assert api.events_of(task["id"])[-2:] == ["TaskChildEnded", "TaskRedispatched"]
    assert api.stage(task["stageId"])["summary"] == {**EMPTY_SUMMARY, "total": 1, "pending": 1}
    again = api.dequeue(api.stage(task["stageId"])["type"])
    assert (again["id"], again["attempt"], again["delegations"]) == (task["id"], 2, 1)

    children = api.http.get(f"/v1/tasks/{task['id']}/children").json()
    assert [(c["id"], c["status"]) for c in children] == [
        (first["id"], "COMPLETED"),
        (second["id"], "FAILED"),
    ]
    assert children[0]["results"] == [
        {"taskId": done["id"], "stageType": first["type"], "result": {"tiles": 12}}
    ]
    assert children[1]["results"] == []

    # the failed child does not fail the parent: the handler decides
    final = report(api, task["id"], status="COMPLETED", result={"merged": 1}).json()
    assert (final["status"], final["result"]) == ("COMPLETED", {"merged": 1})
    assert api.job(job["id"])["status"] == "COMPLETED"


def test_children_that_ended_before_the_delegation_requeue_the_task_at_once(api: Api) -> None:
    _, task = running_task(api)
    child = child_job(api, task)
    api.run_task(child["type"])

    back = report(api, task["id"], status="DELEGATED").json()

    assert (back["status"], back["delegations"]) == ("PENDING", 1)
    assert api.events_of(task["id"])[-2:] == ["TaskDelegated", "TaskRedispatched"]


def test_delegating_without_child_jobs_is_refused_and_changes_nothing(api: Api) -> None:
    _, task = running_task(api)

    with api.nothing_written():
        r = report(api, task["id"], status="DELEGATED")

    assert r.status_code == 400
    assert r.json()["code"] == "DELEGATION_REFUSED"
    assert api.task(task["id"])["status"] == "IN_PROGRESS"


def test_a_task_creates_at_most_max_child_jobs_children() -> None:
    with TestClient(memory_app(list_shape="array", max_child_jobs=2)) as client:
        api = Api(client)
        _, task = running_task(api)
        first, second = child_job(api, task), child_job(api, task)

        with api.nothing_written():
            refused = api.http.post(
                "/v1/jobs", json={"name": "third", "data": {}, "parentTaskId": task["id"]}
            )

        assert (refused.status_code, refused.json()["code"]) == (409, "TOO_MANY_CHILD_JOBS")
        assert "2 child jobs" in refused.json()["message"]
        children = api.http.get(f"/v1/tasks/{task['id']}/children").json()
        assert [c["id"] for c in children] == [first["id"], second["id"]]
        _, other = running_task(api, "other")  # (the bound is per task)
        assert child_job(api, other)["parentTaskId"] == other["id"]


def test_a_child_lists_its_first_results_and_says_when_it_has_more(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(views, "CHILD_RESULTS", 2)
    _, task = running_task(api)
    many, one = child_job(api, task, tasks=3), child_job(api, task)
    for i in range(3):
        done = api.dequeue(many["type"])
        assert report(api, done["id"], status="COMPLETED", result={"i": i}).status_code == 200
    api.run_task(one["type"])

    children = api.http.get(f"/v1/tasks/{task['id']}/children").json()

    assert [r["result"] for r in children[0]["results"]] == [{"i": 0}, {"i": 1}]
    assert children[0]["moreResults"] is True
    assert (children[1]["results"], children[1]["moreResults"]) == ([], False)


def test_the_children_list_is_read_in_chunks_and_whole(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tasks, "CHILDREN_CHUNK", 2)
    _, task = running_task(api)
    made = [child_job(api, task)["id"] for _ in range(5)]

    listed = api.http.get(f"/v1/tasks/{task['id']}/children")
    unknown = api.http.get("/v1/tasks/00000000-0000-4000-8000-0000000000ff/children")

    assert [c["id"] for c in listed.json()] == made
    assert (unknown.status_code, unknown.json()["code"]) == (404, "TASK_NOT_FOUND")


def test_a_child_job_needs_a_running_parent_task(api: Api) -> None:
    job = api.create_job()
    stage = api.add_stage(job["id"])
    (queued,) = api.add_tasks(stage["id"])

    with api.nothing_written():
        not_running = api.http.post(
            "/v1/jobs", json={"name": "child", "data": {}, "parentTaskId": queued["id"]}
        )
        unknown = api.http.post(
            "/v1/jobs",
            json={
                "name": "child",
                "data": {},
                "parentTaskId": "00000000-0000-4000-8000-0000000000ff",
            },
        )

    assert (not_running.status_code, not_running.json()["code"]) == (
        400,
        "PARENT_TASK_NOT_IN_PROGRESS",
    )
    assert (unknown.status_code, unknown.json()["code"]) == (404, "TASK_NOT_FOUND")


def test_aborting_a_child_job_counts_as_its_end(api: Api) -> None:
    _, task = running_task(api)
    child = child_job(api, task)
    report(api, task["id"], status="DELEGATED")

    api.set_job_status(child["id"], "ABORTED")

    assert api.task(task["id"])["status"] == "PENDING"
    children = api.http.get(f"/v1/tasks/{task['id']}/children").json()
    assert [c["status"] for c in children] == ["ABORTED"]


def test_aborting_a_parent_job_aborts_its_delegated_task_and_every_descendant(api: Api) -> None:
    job, task = running_task(api)
    child = child_job(api, task)
    grandchild_task = api.dequeue(child["type"])  # the child's task delegates in turn
    grandchild = child_job(api, grandchild_task, name="leaf")
    report(api, grandchild_task["id"], status="DELEGATED")
    report(api, task["id"], status="DELEGATED")

    api.set_job_status(job["id"], "ABORTED")

    assert api.task(task["id"])["status"] == "ABORTED"
    assert api.job(child["id"])["status"] == "ABORTED"
    assert api.task(grandchild_task["id"])["status"] == "ABORTED"
    assert api.job(grandchild["id"])["status"] == "ABORTED"
    assert api.stage(task["stageId"])["summary"]["aborted"] == 1
    listed = api.http.get("/v1/jobs", params={"parent_job_id": job["id"]}).json()
    assert [j["id"] for j in listed] == [child["id"]]


def test_a_completed_result_is_kept_and_returned(api: Api) -> None:
    _, task = running_task(api)

    done = report(api, task["id"], status="COMPLETED", result={"files": ["a.tif"], "n": 1})

    assert done.json()["result"] == {"files": ["a.tif"], "n": 1}
    assert api.task(task["id"])["result"] == {"files": ["a.tif"], "n": 1}


def test_a_result_matching_a_failure_pattern_is_recorded_as_a_failure(api: Api) -> None:
    job = api.create_job("agent")
    stage = api.add_stage(
        job["id"], failurePatterns=[r"(?i)\*?\*?status\*?\*?:\s*FAILED", "I cannot complete"]
    )
    assert stage["failurePatterns"] == [r"(?i)\*?\*?status\*?\*?:\s*FAILED", "I cannot complete"]
    api.add_tasks(stage["id"], maxAttempts=2)

    first = api.dequeue(stage["type"])
    retried = report(
        api, first["id"], status="COMPLETED", result={"output": {"text": "**Status**: failed"}}
    ).json()
    assert retried["status"] == "RETRIED"
    history = api.http.get(f"/v1/jobs/{job['id']}/history").json()["items"]
    reasons = [e["reason"] for e in history if e["type"] == "TaskRetried"]
    assert len(reasons) == 1
    assert "failure pattern" in reasons[0]
    assert "**Status**: failed" in reasons[0]

    second = api.dequeue(stage["type"])
    failed = report(
        api, second["id"], status="COMPLETED", result={"output": "I cannot complete this"}
    ).json()
    assert failed["status"] == "FAILED"
    assert api.job(job["id"])["status"] == "FAILED"


def test_an_invalid_failure_pattern_is_refused(api: Api) -> None:
    job = api.create_job()
    with api.nothing_written():
        r = api.http.post(
            f"/v1/jobs/{job['id']}/stage", json={"type": "t", "data": {}, "failurePatterns": ["("]}
        )
    assert r.status_code == 400
    assert "failurePatterns" in r.json()["message"]


def test_last_status_follows_seed_001s_inference_and_links_parents_and_children(
    api: Api,
) -> None:
    job, task = running_task(api, "orchestrator")
    first, second = child_job(api, task, name="leaf"), child_job(api, task, name="leaf")
    report(api, task["id"], status="DELEGATED")

    assert definition(api, "orchestrator")["lastStatus"] == "DELEGATING"

    api.run_task(first["type"])
    assert definition(api, "orchestrator")["lastStatus"] == "WAITING"

    api.run_task(second["type"])
    assert definition(api, "orchestrator")["lastStatus"] == "IN_PROGRESS"  # re-dispatched
    api.run_task(api.stage(task["stageId"])["type"])

    parent = definition(api, "orchestrator")
    assert parent["lastStatus"] == "COMPLETED"
    assert [c["jobId"] for c in parent["childJobs"]] == [first["id"], second["id"]]
    leaf = definition(api, "leaf")
    assert leaf["sourceJob"] == {
        "jobId": job["id"],
        "name": "orchestrator",
        "status": "COMPLETED",
        "taskId": task["id"],
    }
