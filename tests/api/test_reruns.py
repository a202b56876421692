"""Reruns over HTTP: what each moves, what each refuses and why, and the reason
an operator gives on every command, recorded in the job's history."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from uuid import uuid4

import pytest

from jobnik.workers import ApiError, JobnikClient, Producer

from .conftest import Api, Json, Secured


def post(api: Api, path: str, body: Json | None = None) -> Any:
    return api.http.post(path, json=body) if body is not None else api.http.post(path)


def failed_job(api: Api, tasks: int = 2, stages: int = 1) -> tuple[Json, list[Json], list[Json]]:
    """A job whose first stage failed: its first task FAILED, the others still queued."""
    job = api.create_job()
    made = [api.add_stage(job["id"]) for _ in range(stages)]
    queued = api.add_tasks(made[0]["id"], tasks, maxAttempts=1)
    for stage in made[1:]:
        api.add_tasks(stage["id"])
    api.run_task(made[0]["type"], "FAILED")
    assert api.job(job["id"])["status"] == "FAILED"
    return job, made, queued


def events(api: Api, job_id: str) -> list[Json]:
    r = api.http.get(f"/v1/jobs/{job_id}/history", params={"limit": 1000})
    assert r.status_code == 200, r.text
    return r.json()["items"]  # type: ignore[no-any-return]


def test_a_failed_task_reruns_and_its_stage_and_job_move_with_it(api: Api) -> None:
    job, [stage], tasks = failed_job(api)
    failed = next(t for t in tasks if api.task(t["id"])["status"] == "FAILED")

    r = post(api, f"/v1/tasks/{failed['id']}/rerun", {"reason": "input fixed"})

    assert r.status_code == 200, r.text
    assert r.json() == {
        "jobId": job["id"],
        "jobStatus": "IN_PROGRESS",
        "fromStageId": stage["id"],
        "reopenedStages": [stage["id"]],
        "rerunTasks": 1,
    }
    task = api.task(failed["id"])
    assert (task["status"], task["attempts"], task["attempt"]) == ("PENDING", 0, 1)
    assert "endTime" not in task
    body = api.stage(stage["id"])
    assert (body["status"], body["summary"]["pending"], body["summary"]["failed"]) == (
        "IN_PROGRESS",
        2,
        0,
    )
    assert api.job(job["id"])["status"] == "IN_PROGRESS"
    assert "endTime" not in api.job(job["id"])
    api.run_task(stage["type"])
    api.run_task(stage["type"])
    assert (api.job(job["id"])["status"], api.job(job["id"])["percentage"]) == ("COMPLETED", 100)


def test_the_history_shows_who_reran_what_and_why(api: Api) -> None:
    job, [stage], tasks = failed_job(api, tasks=1)
    before = events(api, job["id"])

    post(api, f"/v1/stages/{stage['id']}/rerun", {"reason": "flaky disk"})

    after = events(api, job["id"])
    assert after[: len(before)] == before  # nothing earlier is rewritten
    added = after[len(before) :]
    assert [(e["type"], e["entityId"]) for e in added] == [
        ("JobReopened", job["id"]),
        ("StageReopened", stage["id"]),
        ("TaskRerun", tasks[0]["id"]),
    ]
    assert {(e["actor"], e["reason"]) for e in added} == {("api", "flaky disk")}
    assert added[0]["payload"] == {
        "previous": "FAILED",
        "status": "IN_PROGRESS",
        "fromStageId": stage["id"],
        "completedStages": 0,
        "percentage": 0,
        "completing": False,
    }


def test_time_travel_shows_the_job_before_and_after_its_rerun(api: Api) -> None:
    job, _, tasks = failed_job(api, tasks=1)
    failed_at = events(api, job["id"])[-1]["position"]
    post(api, f"/v1/jobs/{job['id']}/rerun")

    then = api.job(job["id"], should_return_stages="true", as_of=failed_at)
    now = api.job(job["id"], should_return_stages="true")
    task_then = api.http.get(f"/v1/tasks/{tasks[0]['id']}", params={"as_of": failed_at}).json()

    assert (then["status"], then["stages"][0]["summary"]["failed"]) == ("FAILED", 1)
    assert (now["status"], now["stages"][0]["summary"]["pending"]) == ("IN_PROGRESS", 1)
    assert now == api.job(job["id"], should_return_stages="true", as_of=api.position)
    assert task_then["status"] == "FAILED"


def test_an_aborted_job_reruns_from_a_stage_it_names(api: Api) -> None:
    job = api.create_job()
    first, second = api.add_stage(job["id"]), api.add_stage(job["id"])
    api.add_tasks(first["id"])
    api.add_tasks(second["id"], 2)
    api.run_task(first["type"])
    api.set_job_status(job["id"], "ABORTED")

    r = post(api, f"/v1/jobs/{job['id']}/rerun", {"fromStageId": first["id"], "reason": "redo"})

    assert r.status_code == 200, r.text
    assert r.json()["reopenedStages"] == [first["id"], second["id"]]
    assert r.json()["rerunTasks"] == 3
    assert (api.job(job["id"])["percentage"], api.stage(first["id"])["status"]) == (
        0,
        "IN_PROGRESS",
    )
    assert api.stage(second["id"])["status"] == "CREATED"
    for stage_type in (first["type"], second["type"], second["type"]):
        api.run_task(stage_type)
    assert api.job(job["id"])["status"] == "COMPLETED"


def test_run_statistics_and_last_status_count_the_rerun(api: Api) -> None:
    job, [stage], _ = failed_job(api, tasks=1)
    name = api.job(job["id"])["name"]
    post(api, f"/v1/tasks/{_failed(api, stage)}/rerun")

    wait = {"min_position": api.position}
    reopened = api.http.get(f"/v1/jobs/{job['id']}/statistics", params=wait).json()
    last = api.http.get(f"/v1/job-definitions/{name}", params=wait).json()
    assert (reopened["status"], reopened["createdTaskCount"]) == ("IN_PROGRESS", 2)
    assert "endTime" not in reopened
    assert (last["lastJobStatus"], last["lastStatus"]) == ("IN_PROGRESS", "IN_PROGRESS")
    api.run_task(stage["type"])
    ended = api.http.get(
        f"/v1/jobs/{job['id']}/statistics", params={"min_position": api.position}
    ).json()
    assert (ended["status"], ended["successfulTaskCount"], ended["failedAfterRetryTaskCount"]) == (
        "COMPLETED",
        1,
        1,
    )


def _failed(api: Api, stage: Json) -> str:
    [task] = [t for t in api.http.get(f"/v1/stages/{stage['id']}/tasks").json()]
    return str(task["id"])


# -- refusals: a named code each, and nothing written ------------------------------------------


def _running_job(api: Api) -> str:
    return str(api.job_in("IN_PROGRESS")["id"])


def _completed_task(api: Api) -> str:
    return str(api.task_in("COMPLETED")["id"])


def _second_failed_task(api: Api) -> str:
    job = api.create_job()
    stage = api.add_stage(job["id"])
    api.add_tasks(stage["id"], 2, maxAttempts=1)
    first, second = api.dequeue(stage["type"]), api.dequeue(stage["type"])
    api.report(first["id"], "FAILED")
    api.report(second["id"], "FAILED")
    return str(second["id"])


def _aborted_job_stages(api: Api) -> tuple[str, str, str]:
    job = api.create_job()
    first, second = api.add_stage(job["id"]), api.add_stage(job["id"])
    api.add_tasks(first["id"])
    api.add_tasks(second["id"])
    api.set_job_status(job["id"], "ABORTED")
    return str(job["id"]), str(first["id"]), str(second["id"])


def _other_jobs_stage(api: Api) -> tuple[str, str]:
    job, _, _ = failed_job(api)
    return str(job["id"]), str(api.add_stage(api.create_job()["id"])["id"])


Refusal = Callable[[Api], tuple[str, Json | None]]
REFUSALS: list[tuple[str, Refusal, int, str]] = [
    (
        "running-job",
        lambda a: (f"/v1/jobs/{_running_job(a)}/rerun", None),
        400,
        "JOB_NOT_RERUNNABLE",
    ),
    (
        "completed-job",
        lambda a: (f"/v1/jobs/{a.job_in('COMPLETED')['id']}/rerun", None),
        400,
        "JOB_NOT_RERUNNABLE",
    ),
    (
        "stage-of-a-running-job",
        lambda a: (f"/v1/stages/{a.add_stage(_running_job(a))['id']}/rerun", None),
        400,
        "JOB_NOT_RERUNNABLE",
    ),
    (
        "completed-task",
        lambda a: (f"/v1/tasks/{_completed_task(a)}/rerun", None),
        400,
        "TASK_NOT_RERUNNABLE",
    ),
    (
        "pending-task",
        lambda a: (f"/v1/tasks/{a.task_in('PENDING')['id']}/rerun", None),
        400,
        "TASK_NOT_RERUNNABLE",
    ),
    (
        "task-with-failed-siblings",
        lambda a: (f"/v1/tasks/{_second_failed_task(a)}/rerun", None),
        400,
        "STAGE_HAS_OTHER_FAILED_TASKS",
    ),
    (
        "stage-with-nothing-failed",
        lambda a: (f"/v1/stages/{failed_job(a, stages=2)[1][1]['id']}/rerun", None),
        400,
        "STAGE_NOT_RERUNNABLE",
    ),
    (
        "stage-before-an-aborted-one",
        lambda a: (f"/v1/stages/{_aborted_job_stages(a)[1]}/rerun", None),
        400,
        "LATER_STAGE_ENDED",
    ),
    (
        "stage-after-an-unfinished-one",
        lambda a: (f"/v1/stages/{_aborted_job_stages(a)[2]}/rerun", None),
        400,
        "EARLIER_STAGE_NOT_COMPLETED",
    ),
    (
        "from-a-stage-after-the-first-unfinished",
        lambda a: (
            f"/v1/jobs/{(ids := _aborted_job_stages(a))[0]}/rerun",
            {"fromStageId": ids[2]},
        ),
        400,
        "STAGE_AFTER_FIRST_UNFINISHED",
    ),
    (
        "from-another-jobs-stage",
        lambda a: (
            f"/v1/jobs/{(ids := _other_jobs_stage(a))[0]}/rerun",
            {"fromStageId": ids[1]},
        ),
        400,
        "STAGE_NOT_IN_JOB",
    ),
    (
        "deleted-job",
        lambda a: (f"/v1/jobs/{_deleted_job(a)}/rerun", None),
        404,
        "JOB_NOT_FOUND",
    ),
    ("unknown-task", lambda a: (f"/v1/tasks/{uuid4()}/rerun", None), 404, "TASK_NOT_FOUND"),
    ("unknown-stage", lambda a: (f"/v1/stages/{uuid4()}/rerun", None), 404, "STAGE_NOT_FOUND"),
    (
        "reason-too-long",
        lambda a: (f"/v1/jobs/{failed_job(a)[0]['id']}/rerun", {"reason": "r" * 2001}),
        400,
        "VALIDATION_ERROR",
    ),
    (
        "unknown-field",
        lambda a: (f"/v1/jobs/{failed_job(a)[0]['id']}/rerun", {"force": True}),
        400,
        "VALIDATION_ERROR",
    ),
    (
        "bad-stage-id",
        lambda a: (f"/v1/jobs/{failed_job(a)[0]['id']}/rerun", {"fromStageId": "x"}),
        400,
        "VALIDATION_ERROR",
    ),
]


def _deleted_job(api: Api) -> str:
    job, _, _ = failed_job(api)
    assert api.http.delete(f"/v1/jobs/{job['id']}").status_code == 200
    return str(job["id"])


@pytest.mark.parametrize(
    ("make", "status", "code"), [r[1:] for r in REFUSALS], ids=[r[0] for r in REFUSALS]
)
def test_refused_reruns_answer_a_named_code_and_write_nothing(
    api: Api, make: Refusal, status: int, code: str
) -> None:
    path, body = make(api)

    with api.nothing_written():
        r = post(api, path, body)

    assert (r.status_code, r.json()["code"]) == (status, code), r.text
    assert r.json()["message"]


def test_each_rerun_route_documents_the_codes_it_refuses_with(api: Api) -> None:
    paths = api.http.get("/openapi.json").json()["paths"]
    expected = {
        "/v1/tasks/{taskId}/rerun": {"TASK_NOT_RERUNNABLE", "STAGE_HAS_OTHER_FAILED_TASKS"},
        "/v1/stages/{stageId}/rerun": {"STAGE_NOT_RERUNNABLE", "LATER_STAGE_ENDED"},
        "/v1/jobs/{jobId}/rerun": {"JOB_NOT_RERUNNABLE", "STAGE_NOT_IN_JOB"},
    }
    for path, codes in expected.items():
        answers = paths[path]["post"]["responses"]
        text = " ".join(a["description"] for a in answers.values())
        assert all(f"`{c}`" in text for c in codes), (path, text)
        assert "`VALIDATION_ERROR`" in answers["400"]["description"]
        assert "404" in answers


# -- reasons on the other operator commands ------------------------------------------------------


def test_pause_resume_abort_priority_and_delete_record_the_reason_given(api: Api) -> None:
    job = api.create_job()
    jid = job["id"]
    for status, reason in (("PAUSED", "night"), ("PENDING", "morning"), ("ABORTED", "done")):
        r = api.http.put(f"/v1/jobs/{jid}/status", json={"status": status, "reason": reason})
        assert r.status_code == 200, r.text
    assert api.http.patch(f"/v1/jobs/{jid}/priority", json={"priority": "HIGH", "reason": "vip"})
    assert api.http.delete(f"/v1/jobs/{jid}", params={"reason": "tidy"}).status_code == 200

    recorded = [(e["type"], e["reason"]) for e in events(api, jid)[1:]]

    assert recorded == [
        ("JobPaused", "night"),
        ("JobResumed", "morning"),
        ("JobAborted", "done"),
        ("JobPriorityChanged", "vip"),
        ("JobDeleted", "tidy"),
    ]


def test_operator_commands_without_a_reason_work_as_before(api: Api) -> None:
    job = api.create_job()

    api.set_job_status(job["id"], "PAUSED")
    r = api.http.patch(f"/v1/jobs/{job['id']}/priority", json={"priority": "LOW"})

    assert r.status_code == 200
    assert [e["reason"] for e in events(api, job["id"])[1:]] == [None, None]


@pytest.mark.parametrize(
    "request_",
    [
        ("PUT", "status", {"json": {"status": "PAUSED", "reason": "r" * 2001}}),
        ("PATCH", "priority", {"json": {"priority": "LOW", "reason": "r" * 2001}}),
        ("DELETE", "", {"params": {"reason": "r" * 2001}}),
    ],
    ids=["status", "priority", "delete"],
)
def test_a_reason_longer_than_2000_characters_is_refused(
    api: Api, request_: tuple[str, str, dict[str, Any]]
) -> None:
    method, tail, kwargs = request_
    job = api.job_in("ABORTED")
    path = f"/v1/jobs/{job['id']}/{tail}".rstrip("/")

    with api.nothing_written():
        r = api.http.request(method, path, **kwargs)

    assert (r.status_code, r.json()["code"]) == (400, "VALIDATION_ERROR"), r.text


# -- the SDK -------------------------------------------------------------------------------------


class AppTransport:
    """The SDK's transport over the in-process app (the SDK's HTTP itself: test_sdk_transport)."""

    def __init__(self, api: Api) -> None:
        self.http = api.http

    def __call__(self, method: str, path: str, body: bytes | None) -> tuple[int, bytes]:
        headers = {"Content-Type": "application/json"} if body is not None else {}
        r = self.http.request(method, path, content=body, headers=headers)
        return r.status_code, r.content

    def close(self) -> None:
        pass


def test_the_producer_reruns_and_records_its_reasons(api: Api) -> None:
    producer = Producer(JobnikClient("http://app", transport=AppTransport(api), retries=0))
    job, [first, second], _ = failed_job(api, tasks=1, stages=2)
    [task] = api.http.get(f"/v1/stages/{first['id']}/tasks").json()

    by_task = producer.rerun_task(task["id"], reason="one")
    api.run_task(first["type"], "FAILED")
    by_stage = producer.rerun_stage(first["id"])
    api.run_task(first["type"])
    producer.abort(job["id"], reason="stop")
    by_job = producer.rerun_job(job["id"], from_stage_id=first["id"], reason="all")
    with pytest.raises(ApiError) as refused:
        producer.rerun_job(job["id"])
    producer.pause(job["id"], reason="later")
    producer.set_priority(job["id"], "HIGH", reason="urgent")

    assert (by_task.job_status, by_task.rerun_tasks, by_task.from_stage_id) == (
        "IN_PROGRESS",
        1,
        first["id"],
    )
    assert (by_stage.reopened_stages, by_stage.rerun_tasks) == ([first["id"]], 1)
    assert (by_job.reopened_stages, by_job.rerun_tasks) == ([first["id"], second["id"]], 2)
    assert (refused.value.status, refused.value.code) == (400, "JOB_NOT_RERUNNABLE")
    operator = {"JobReopened", "JobAborted", "JobPaused", "JobPriorityChanged"}
    reasons = [(e["type"], e["reason"]) for e in events(api, job["id"]) if e["type"] in operator]
    assert reasons == [
        ("JobReopened", "one"),
        ("JobReopened", None),
        ("JobAborted", "stop"),
        ("JobReopened", "all"),
        ("JobPaused", "later"),
        ("JobPriorityChanged", "urgent"),
    ]


def test_the_producer_deletes_an_ended_job_with_a_reason(api: Api) -> None:
    producer = Producer(JobnikClient("http://app", transport=AppTransport(api), retries=0))
    job = api.job_in("ABORTED")

    producer.delete_job(job["id"], reason="tidy up")

    assert api.http.get(f"/v1/jobs/{job['id']}").status_code == 404
    assert events(api, job["id"])[-1]["reason"] == "tidy up"


def test_with_access_control_a_rerun_records_the_operators_token_and_needs_its_role(
    secured: Secured,
) -> None:
    job, _, _ = failed_job(secured.api, tasks=1)

    refused = secured.call(secured.bearers["producer"], "POST", f"/v1/jobs/{job['id']}/rerun")
    r = secured.call(
        secured.bearers["operator"], "POST", f"/v1/jobs/{job['id']}/rerun", {"reason": "ok"}
    )

    assert (refused.status_code, refused.json()["code"]) == (403, "FORBIDDEN")
    assert r.status_code == 200, r.text
    reopened = [e for e in events(secured.api, job["id"]) if e["type"] != "TaskFailed"][-3:]
    assert {(e["actor"], e["actorRole"], e["reason"]) for e in reopened} == {
        ("the-operator", "operator", "ok")
    }


# -- attempts an abort cancelled -------------------------------------------------------------


def _attempt_call(api: Api, call: str, task: Json) -> Any:
    """A worker's call for `task`'s attempt (the one its dequeue answered)."""
    path, body = {
        "heartbeat": ("heartbeat", {}),
        "report": ("status", {"status": "COMPLETED"}),
        "give back": ("release", {"reason": "shutting down"}),
    }[call]
    method = "PUT" if path == "status" else "POST"
    url = f"/v1/tasks/{task['id']}/{path}"
    return api.http.request(method, url, json={**body, "attempt": task["attempt"]})


def test_a_rerun_after_an_abort_queues_the_cancelled_attempts_task_and_fences_that_attempt(
    api: Api,
) -> None:
    """The abort cancelled the attempt a worker held; the rerun does not let it go on: the task
    runs again under a new attempt, and the old one's heartbeat, report and hand-back are
    refused as stale and recorded, moving nothing."""
    from jobnik.projections.rebuild.verify import verify

    job = api.create_job()
    stage = api.add_stage(job["id"])
    api.add_tasks(stage["id"], 2)
    held = api.dequeue(stage["type"])
    api.set_job_status(job["id"], "ABORTED")
    beat = _attempt_call(api, "heartbeat", held)
    assert (beat.status_code, beat.json()["cancelled"]) == (200, True), beat.text

    r = post(api, f"/v1/jobs/{job['id']}/rerun", {"reason": "resume"})

    assert r.status_code == 200, r.text
    assert r.json()["rerunTasks"] == 2
    task = api.task(held["id"])
    assert (task["status"], task["attempt"], task["attempts"]) == ("PENDING", 1, 0)
    summary = api.stage(stage["id"])["summary"]
    assert (summary["pending"], summary["inProgress"], summary["aborted"]) == (2, 0, 0)
    ended = [e for e in events(api, job["id"]) if e["entityId"] == held["id"]][-2:]
    assert [(e["type"], e["actor"], e["payload"]["previous"]) for e in ended] == [
        ("TaskAborted", "system", "IN_PROGRESS"),
        ("TaskRerun", "api", "ABORTED"),
    ]
    for call in ("heartbeat", "report", "give back"):
        with api.wrote_events():
            late = _attempt_call(api, call, held)
        assert (late.status_code, late.json()["code"]) == (409, "STALE_ATTEMPT"), (call, late.text)
        refused = events(api, job["id"])[-1]
        assert (refused["type"], refused["payload"]["attempt"]) == ("TaskAttemptRefused", 1)
    assert api.task(held["id"])["status"] == "PENDING"
    assert api.stage(stage["id"])["summary"]["completed"] == 0
    again = [api.dequeue(stage["type"]) for _ in range(2)]
    assert {(t["id"], t["attempt"]) for t in again} >= {(held["id"], 2)}
    for t in again:
        api.report(t["id"], "COMPLETED")
    assert api.job(job["id"])["status"] == "COMPLETED"
    stats = api.http.get(
        f"/v1/jobs/{job['id']}/statistics", params={"min_position": api.position}
    ).json()
    assert (stats["createdTaskCount"], stats["successfulTaskCount"]) == (4, 2)
    assert stats["canceledTaskCount"] == 2
    assert verify(api.http.app.state.store) == []  # type: ignore[attr-defined]
