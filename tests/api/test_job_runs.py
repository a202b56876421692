"""Job runs through HTTP: job modes, finish, the completion phase, and the job
seen as a job run."""

from __future__ import annotations

from typing import Any

from .conftest import Api, Json


def run(api: Api, job_id: str) -> Json:
    r = api.http.get(f"/v1/jobs/{job_id}/run", params={"min_position": api.position})
    assert r.status_code == 200, r.text
    body: Json = r.json()
    return body


def finish(api: Api, job_id: str) -> Any:
    return api.http.post(f"/v1/jobs/{job_id}/finish")


def stage_with_tasks(api: Api, job_id: str, tasks: int = 1, **fields: Any) -> Json:
    stage = api.add_stage(job_id, **fields)
    if tasks:
        api.add_tasks(stage["id"], tasks)
    return stage


def test_a_standard_job_stays_open_for_new_stages_until_finished(api: Api) -> None:
    job = api.create_job(mode="standard")
    assert job["mode"] == "standard"
    first = stage_with_tasks(api, job["id"])
    api.run_task(first["type"])

    assert api.job(job["id"])["status"] == "IN_PROGRESS"  # a runOnce job would be COMPLETED
    assert run(api, job["id"])["state"] == "RUNNING"
    later = stage_with_tasks(api, job["id"])
    assert api.stage(later["id"])["status"] == "PENDING"  # its predecessor has completed
    api.run_task(later["type"])
    assert api.job(job["id"])["percentage"] == 100

    finished = finish(api, job["id"])

    assert finished.status_code == 202
    assert finished.json()["status"] == "COMPLETED"
    body = run(api, job["id"])
    assert body["state"] == "SUCCEEDED"
    assert body["finishTime"] <= body["endTime"]
    assert body["tasks"]["successfulTaskCount"] == 2


def test_a_finishing_job_accepts_nothing_new_and_completes_when_its_work_is_done(
    api: Api,
) -> None:
    job = api.create_job(mode="standard")
    stage = stage_with_tasks(api, job["id"], 2)
    upload = stage_with_tasks(api, job["id"])  # CREATED: would take tasks if not finishing
    api.run_task(stage["type"])

    assert finish(api, job["id"]).json()["status"] == "IN_PROGRESS"
    assert run(api, job["id"])["state"] == "FINISHING"
    with api.nothing_written():
        assert finish(api, job["id"]).status_code == 202  # again: a no-op
        new_stage = api.http.post(f"/v1/jobs/{job['id']}/stage", json={"type": "x", "data": {}})
        new_tasks = api.http.post(f"/v1/stages/{upload['id']}/tasks", json=[{"data": {}}])
    assert (new_stage.status_code, new_stage.json()["code"]) == (400, "JOB_FINISHING")
    assert (new_tasks.status_code, new_tasks.json()["code"]) == (400, "JOB_FINISHING")

    api.run_task(stage["type"])
    assert api.job(job["id"])["status"] == "IN_PROGRESS"
    api.run_task(upload["type"])

    assert api.job(job["id"])["status"] == "COMPLETED"
    ended = finish(api, job["id"])
    assert (ended.status_code, ended.json()["code"]) == (400, "JOB_IN_FINITE_STATE")


def test_finishing_a_job_with_nothing_to_do_completes_it(api: Api) -> None:
    job = api.create_job(mode="standard")
    assert run(api, job["id"])["state"] == "PREPARING"

    assert finish(api, job["id"]).json()["status"] == "COMPLETED"
    assert run(api, job["id"])["state"] == "SUCCEEDED"


def test_completion_stages_run_after_every_normal_stage(api: Api) -> None:
    job = api.create_job()  # runOnce: the completion phase starts by itself
    first = stage_with_tasks(api, job["id"])
    cleanup = stage_with_tasks(api, job["id"], completion=True)
    last = stage_with_tasks(api, job["id"])  # a normal stage added after the completion stage
    assert cleanup["completion"] is True
    assert api.stage(cleanup["id"])["status"] == "CREATED"
    held = api.http.put(f"/v1/stages/{cleanup['id']}/status", json={"status": "PENDING"})
    assert (held.status_code, held.json()["code"]) == (400, "COMPLETION_STAGE_HELD")

    api.run_task(first["type"])
    assert api.stage(last["id"])["status"] == "PENDING"  # the next normal stage, not cleanup
    assert api.stage(cleanup["id"])["status"] == "CREATED"
    api.dequeue_nothing(cleanup["type"])

    api.run_task(last["type"])
    assert run(api, job["id"])["state"] == "COMPLETING"
    assert api.stage(cleanup["id"])["status"] == "PENDING"
    assert api.job(job["id"])["status"] == "IN_PROGRESS"

    api.run_task(cleanup["type"])

    assert api.job(job["id"])["status"] == "COMPLETED"
    body = run(api, job["id"])
    assert body["state"] == "SUCCEEDED"
    assert list(body["worker"]) == [
        f"0_{first['type']}",
        f"1_{cleanup['type']}",
        f"2_{last['type']}",
    ]


def test_an_empty_completion_stage_ends_the_phase_at_once(api: Api) -> None:
    job = api.create_job(mode="standard")
    work = stage_with_tasks(api, job["id"])
    cleanup = stage_with_tasks(api, job["id"], 0, completion=True)
    api.run_task(work["type"])
    assert run(api, job["id"])["state"] == "RUNNING"  # standard: waits for finish

    assert finish(api, job["id"]).json()["status"] == "COMPLETED"
    assert api.stage(cleanup["id"])["status"] == "COMPLETED"


def test_a_failed_job_fails_its_run(api: Api) -> None:
    job = api.create_job()
    stage = api.add_stage(job["id"])
    api.add_tasks(stage["id"], maxAttempts=1)
    api.run_task(stage["type"], "FAILED")

    body = run(api, job["id"])
    assert (body["state"], body["status"]) == ("FAILED", "FAILED")
    assert body["tasks"]["failedAfterRetryTaskCount"] == 1


def test_an_aborted_job_is_canceling_while_workers_hold_its_tasks(api: Api) -> None:
    job = api.create_job()
    stage = stage_with_tasks(api, job["id"], 2)
    held = api.dequeue(stage["type"])
    api.set_job_status(job["id"], "ABORTED")

    assert run(api, job["id"])["state"] == "CANCELING"
    api.report(held["id"], "COMPLETED")  # the late report: recorded as the task's abort

    body = run(api, job["id"])
    assert body["state"] == "CANCELED"
    assert body["tasks"]["canceledTaskCount"] == 2
    assert body["endTime"] >= body["startTime"]


def test_a_paused_job_keeps_its_run_state_and_says_it_is_paused(api: Api) -> None:
    job = api.create_job()
    stage_with_tasks(api, job["id"])
    api.set_job_status(job["id"], "PAUSED")

    body = run(api, job["id"])
    assert (body["state"], body["paused"], body["mode"]) == ("RUNNING", True, "runOnce")


def test_an_unknown_mode_is_refused(api: Api) -> None:
    with api.nothing_written():
        r = api.http.post("/v1/jobs", json={"name": "x1", "data": {}, "mode": "forever"})
    assert r.status_code == 400
    assert "mode" in r.json()["message"]


def test_the_seed_systems_rows_rebuild_from_the_log_exactly(api: Api) -> None:
    """Delegation, results, modes, finish and completion stages: verify replays every event
    into shadow tables and finds no row that differs from the live one."""
    from jobnik.projections.rebuild.verify import verify

    job = api.create_job(mode="standard")
    plan = stage_with_tasks(api, job["id"])
    stage_with_tasks(api, job["id"], 0, completion=True)
    cleanup = stage_with_tasks(api, job["id"], completion=True)
    task = api.dequeue(plan["type"])
    child = api.create_job("child", parentTaskId=task["id"])
    child_stage = stage_with_tasks(api, child["id"])
    api.http.put(f"/v1/tasks/{task['id']}/status", json={"status": "DELEGATED"})
    api.run_task(child_stage["type"])
    again = api.dequeue(plan["type"])
    api.http.put(
        f"/v1/tasks/{again['id']}/status", json={"status": "COMPLETED", "result": {"a": 1}}
    )
    finish(api, job["id"])
    api.run_task(cleanup["type"])
    assert api.job(job["id"])["status"] == "COMPLETED"

    assert verify(api.http.app.state.store) == []  # type: ignore[attr-defined]
