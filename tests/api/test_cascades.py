"""What one request moves elsewhere (the cascades), and the dequeue order."""

from __future__ import annotations

from typing import Any

from .conftest import EMPTY_SUMMARY, Api, Json, parse_time


def summary(api: Api, stage_id: str) -> Json:
    return api.stage(stage_id)["summary"]  # type: ignore[no-any-return]


def counts(api: Api, stage_id: str, **nonzero: int) -> None:
    assert summary(api, stage_id) == {**EMPTY_SUMMARY, **nonzero}


def assert_sums(s: Json) -> None:
    assert s["total"] == sum(v for k, v in s.items() if k != "total")


def two_stage_job(api: Api, tasks: int = 2, **second: Any) -> tuple[Json, Json, Json]:
    job = api.create_job()
    first = api.add_stage(job["id"])
    api.add_tasks(first["id"], count=tasks)
    other = api.add_stage(job["id"], **second)
    api.add_tasks(other["id"], count=tasks)
    return job, first, other


# -- start, progress, completion ---------------------------------------------------------


def test_first_dequeue_starts_the_stage_and_the_job(api: Api) -> None:
    job, first, second = two_stage_job(api)

    task = api.dequeue(first["type"])

    assert api.job(job["id"])["status"] == "IN_PROGRESS"
    assert api.stage(first["id"])["status"] == "IN_PROGRESS"
    assert api.stage(second["id"])["status"] == "CREATED"
    counts(api, first["id"], pending=1, inProgress=1, total=2)
    started = api.job(job["id"])["startTime"], api.stage(first["id"])["startTime"]
    assert started == (task["startTime"], task["startTime"])


def test_second_dequeue_keeps_the_start_times(api: Api) -> None:
    job, first, _ = two_stage_job(api)
    api.dequeue(first["type"])
    started = api.job(job["id"])["startTime"], api.stage(first["id"])["startTime"]

    api.dequeue(first["type"])

    assert (api.job(job["id"])["startTime"], api.stage(first["id"])["startTime"]) == started
    counts(api, first["id"], inProgress=2, total=2)


def test_completing_tasks_moves_the_stage_percentage(api: Api) -> None:
    job = api.create_job()
    stage = api.add_stage(job["id"])
    api.add_tasks(stage["id"], count=3)

    api.run_task(stage["type"])

    after = api.stage(stage["id"])
    assert (after["status"], after["percentage"]) == ("IN_PROGRESS", 33)
    counts(api, stage["id"], pending=2, completed=1, total=3)
    assert api.job(job["id"])["percentage"] == 0


def test_last_task_completes_the_stage_and_releases_the_next_created_stage(api: Api) -> None:
    job, first, second = two_stage_job(api)
    api.run_task(first["type"])

    api.run_task(first["type"])

    done, following, parent = api.stage(first["id"]), api.stage(second["id"]), api.job(job["id"])
    assert (done["status"], done["percentage"]) == ("COMPLETED", 100)
    assert "endTime" in done
    counts(api, first["id"], completed=2, total=2)
    assert following["status"] == "PENDING"
    assert (parent["status"], parent["percentage"]) == ("IN_PROGRESS", 50)
    assert api.dequeue(second["type"])["stageId"] == second["id"]


def test_job_percentage_is_floored_over_all_stages(api: Api) -> None:
    job = api.create_job()
    stages = [api.add_stage(job["id"]) for _ in range(3)]
    for s in stages:
        api.add_tasks(s["id"])

    api.run_task(stages[0]["type"])
    one_of_three = api.job(job["id"])["percentage"]
    api.run_task(stages[1]["type"])
    two_of_three = api.job(job["id"])["percentage"]

    assert (one_of_three, two_of_three) == (33, 66)


def test_adding_a_stage_does_not_lower_the_job_percentage(api: Api) -> None:
    job, first, _ = two_stage_job(api, tasks=1)
    api.run_task(first["type"])

    api.add_stage(job["id"])

    assert api.job(job["id"])["percentage"] == 50


def test_job_completes_when_every_stage_has(api: Api) -> None:
    job, first, second = two_stage_job(api, tasks=1)
    api.run_task(first["type"])

    api.run_task(second["type"])

    parent = api.job(job["id"])
    assert (parent["status"], parent["percentage"]) == ("COMPLETED", 100)
    assert parse_time(parent["startTime"]) <= parse_time(parent["endTime"])
    assert [s["status"] for s in api.http.get(f"/v1/jobs/{job['id']}/stages").json()] == [
        "COMPLETED",
        "COMPLETED",
    ]


def test_a_waiting_next_stage_stays_waiting_until_released(api: Api) -> None:
    job, first, waiting = two_stage_job(api, tasks=1, startAsWaiting=True)
    api.run_task(first["type"])

    held = api.stage(waiting["id"])["status"]
    api.dequeue_nothing(waiting["type"])
    parent = api.job(job["id"])
    api.release(waiting["id"])
    api.run_task(waiting["type"])

    assert held == "WAITING"
    assert (parent["status"], parent["percentage"]) == ("IN_PROGRESS", 50)
    assert api.job(job["id"])["status"] == "COMPLETED"


def test_a_waiting_first_stage_is_invisible_to_dequeue_until_released(api: Api) -> None:
    job = api.create_job()
    stage = api.add_stage(job["id"], startAsWaiting=True)
    api.add_tasks(stage["id"])

    api.dequeue_nothing(stage["type"])
    api.release(stage["id"])
    task = api.dequeue(stage["type"])

    assert task["stageId"] == stage["id"]
    assert api.job(job["id"])["status"] == "IN_PROGRESS"


# -- failure and retry --------------------------------------------------------------------


def test_a_failed_attempt_is_retried_and_immediately_dequeueable(api: Api) -> None:
    job = api.create_job()
    stage = api.add_stage(job["id"])
    api.add_tasks(stage["id"])
    first = api.dequeue(stage["type"])
    task = first

    retried = api.report(task["id"], "FAILED")
    counted = summary(api, stage["id"])
    again = api.dequeue(stage["type"])
    done = api.report(task["id"], "COMPLETED")

    assert (retried["status"], retried["attempts"]) == ("RETRIED", 1)
    assert "endTime" not in retried
    assert counted == {**EMPTY_SUMMARY, "retried": 1, "total": 1}
    assert (again["id"], again["status"], again["attempts"]) == (task["id"], "IN_PROGRESS", 1)
    assert parse_time(again["startTime"]) >= parse_time(first["startTime"])
    assert (done["status"], done["attempts"]) == ("COMPLETED", 1)
    assert api.stage(stage["id"])["status"] == "COMPLETED"
    assert api.job(job["id"])["status"] == "COMPLETED"


def test_three_failures_with_three_attempts_fail_the_task_stage_and_job(api: Api) -> None:
    job = api.create_job()
    stage = api.add_stage(job["id"])
    (task,) = api.add_tasks(stage["id"])

    reports = [api.run_task(stage["type"], "FAILED") for _ in range(3)]

    assert {r["id"] for r in reports} == {task["id"]}

    assert [(r["status"], r["attempts"]) for r in reports] == [
        ("RETRIED", 1),
        ("RETRIED", 2),
        ("FAILED", 3),
    ]
    assert "endTime" in reports[-1]
    assert api.stage(stage["id"])["status"] == "FAILED"
    assert api.job(job["id"])["status"] == "FAILED"
    counts(api, stage["id"], failed=1, total=1)
    api.dequeue_nothing(stage["type"])


def test_final_failure_fails_the_stage_and_the_job_but_not_later_stages(api: Api) -> None:
    job = api.create_job()
    stage = api.add_stage(job["id"])
    (retried,) = api.add_tasks(stage["id"])
    (doomed,) = api.add_tasks(stage["id"], maxAttempts=1)
    (pending,) = api.add_tasks(stage["id"])
    created = api.add_stage(job["id"])
    waiting = api.add_stage(job["id"], startAsWaiting=True)
    api.add_tasks(created["id"])
    assert api.run_task(stage["type"], "FAILED")["id"] == retried["id"]
    assert api.dequeue(stage["type"])["id"] == doomed["id"]

    api.report(doomed["id"], "FAILED")

    failed, parent = api.stage(stage["id"]), api.job(job["id"])
    assert failed["status"] == "FAILED"
    assert "endTime" in failed
    assert (parent["status"], parent["percentage"]) == ("FAILED", 0)
    assert "endTime" in parent
    assert api.stage(created["id"])["status"] == "CREATED"
    assert api.stage(waiting["id"])["status"] == "WAITING"
    assert api.task(retried["id"])["status"] == "RETRIED"
    assert api.task(pending["id"])["status"] == "PENDING"
    counts(api, stage["id"], pending=1, retried=1, failed=1, total=3)
    api.dequeue_nothing(stage["type"])
    api.dequeue_nothing(created["type"])


def test_a_failed_job_keeps_its_last_percentage(api: Api) -> None:
    job, first, second = two_stage_job(api, tasks=1)
    api.run_task(first["type"])

    api.run_task(second["type"], "FAILED")
    api.run_task(second["type"], "FAILED")
    api.run_task(second["type"], "FAILED")

    parent = api.job(job["id"])
    assert (parent["status"], parent["percentage"]) == ("FAILED", 50)


def test_a_late_completion_into_a_failed_stage_only_counts(api: Api) -> None:
    job = api.create_job()
    stage = api.add_stage(job["id"])
    api.add_tasks(stage["id"], count=2, maxAttempts=1)
    a, b = api.dequeue(stage["type"]), api.dequeue(stage["type"])
    api.report(a["id"], "FAILED")

    late = api.report(b["id"], "COMPLETED")

    assert late["status"] == "COMPLETED"
    assert api.stage(stage["id"])["status"] == "FAILED"
    assert api.job(job["id"])["status"] == "FAILED"
    counts(api, stage["id"], completed=1, failed=1, total=2)


# -- pause and resume ---------------------------------------------------------------------


def test_pause_hides_tasks_and_resume_shows_them_again(api: Api) -> None:
    job = api.create_job()
    stage = api.add_stage(job["id"])
    api.add_tasks(stage["id"], count=2)
    api.dequeue(stage["type"])

    api.set_job_status(job["id"], "PAUSED")
    api.dequeue_nothing(stage["type"])
    paused = api.stage(stage["id"])["status"], summary(api, stage["id"])
    api.set_job_status(job["id"], "PENDING")

    assert paused == ("IN_PROGRESS", {**EMPTY_SUMMARY, "pending": 1, "inProgress": 1, "total": 2})
    assert api.job(job["id"])["status"] == "IN_PROGRESS"
    assert api.dequeue(stage["type"])["status"] == "IN_PROGRESS"


def test_a_job_paused_before_it_started_resumes_pending(api: Api) -> None:
    job = api.create_job()
    stage = api.add_stage(job["id"])
    api.add_tasks(stage["id"])
    api.set_job_status(job["id"], "PAUSED")

    api.set_job_status(job["id"], "PENDING")

    assert api.job(job["id"])["status"] == "PENDING"
    api.dequeue(stage["type"])
    assert api.job(job["id"])["status"] == "IN_PROGRESS"


def test_a_report_during_pause_is_accepted_and_the_job_stays_paused(api: Api) -> None:
    job, first, second = two_stage_job(api, tasks=1)
    task = api.dequeue(first["type"])
    api.set_job_status(job["id"], "PAUSED")

    done = api.report(task["id"], "COMPLETED")

    parent = api.job(job["id"])
    assert done["status"] == "COMPLETED"
    assert api.stage(first["id"])["status"] == "COMPLETED"
    assert api.stage(second["id"])["status"] == "PENDING"
    assert (parent["status"], parent["percentage"]) == ("PAUSED", 50)
    api.dequeue_nothing(second["type"])
    api.set_job_status(job["id"], "PENDING")
    assert api.job(job["id"])["status"] == "IN_PROGRESS"
    assert api.dequeue(second["type"])["stageId"] == second["id"]


def test_a_paused_job_whose_last_stage_completes_is_completed(api: Api) -> None:
    job = api.create_job()
    stage = api.add_stage(job["id"])
    api.add_tasks(stage["id"])
    task = api.dequeue(stage["type"])
    api.set_job_status(job["id"], "PAUSED")

    api.report(task["id"], "COMPLETED")

    parent = api.job(job["id"])
    assert (parent["status"], parent["percentage"]) == ("COMPLETED", 100)


def test_a_paused_job_whose_task_fails_for_good_is_failed(api: Api) -> None:
    job = api.create_job()
    stage = api.add_stage(job["id"])
    api.add_tasks(stage["id"], maxAttempts=1)
    task = api.dequeue(stage["type"])
    api.set_job_status(job["id"], "PAUSED")

    api.report(task["id"], "FAILED")

    assert api.stage(stage["id"])["status"] == "FAILED"
    assert api.job(job["id"])["status"] == "FAILED"


def test_a_retry_during_pause_waits_for_resume(api: Api) -> None:
    job = api.create_job()
    stage = api.add_stage(job["id"])
    api.add_tasks(stage["id"])
    task = api.dequeue(stage["type"])
    api.set_job_status(job["id"], "PAUSED")

    assert api.report(task["id"], "FAILED")["status"] == "RETRIED"
    api.dequeue_nothing(stage["type"])
    api.set_job_status(job["id"], "PENDING")
    assert api.dequeue(stage["type"])["id"] == task["id"]


def test_tasks_added_during_pause_are_dequeued_after_resume(api: Api) -> None:
    job = api.create_job()
    stage = api.add_stage(job["id"])
    api.set_job_status(job["id"], "PAUSED")
    (task,) = api.add_tasks(stage["id"])

    api.dequeue_nothing(stage["type"])
    api.set_job_status(job["id"], "PENDING")

    assert api.dequeue(stage["type"])["id"] == task["id"]


def test_pause_and_resume_mid_stage_never_wedges_the_job(api: Api) -> None:
    job = api.create_job()
    stage = api.add_stage(job["id"])
    api.add_tasks(stage["id"], count=2)
    first = api.dequeue(stage["type"])
    api.set_job_status(job["id"], "PAUSED")
    api.set_job_status(job["id"], "PENDING")
    second = api.dequeue(stage["type"])

    api.report(first["id"], "COMPLETED")
    api.report(second["id"], "COMPLETED")

    assert api.job(job["id"])["status"] == "COMPLETED"


# -- abort --------------------------------------------------------------------------------


def aborted_mid_flight(api: Api) -> tuple[Json, list[Json], Json, Json]:
    """Stage 1 COMPLETED; stage 2 running with one task in progress, one retried, two pending;
    stage 3 CREATED; stage 4 WAITING. Then the job is aborted."""
    job = api.create_job()
    done = api.add_stage(job["id"])
    api.add_tasks(done["id"])
    running = api.add_stage(job["id"])
    api.add_tasks(running["id"], count=4)
    created = api.add_stage(job["id"])
    api.add_tasks(created["id"])
    waiting = api.add_stage(job["id"], startAsWaiting=True)
    api.run_task(done["type"])
    in_flight = api.dequeue(running["type"])
    api.run_task(running["type"], "FAILED")  # the second task: RETRIED, back in the queue
    api.set_job_status(job["id"], "ABORTED")
    return job, [done, running, created, waiting], in_flight, api.job(job["id"])


def test_abort_cascades_to_unfinished_stages_and_queued_tasks(api: Api) -> None:
    job, (done, running, created, waiting), in_flight, aborted = aborted_mid_flight(api)

    stages = api.http.get(f"/v1/jobs/{job['id']}/stages").json()
    tasks = api.http.get(f"/v1/stages/{running['id']}/tasks").json()

    assert (aborted["status"], aborted["percentage"]) == ("ABORTED", 25)
    assert "endTime" in aborted
    assert [s["status"] for s in stages] == ["COMPLETED", "ABORTED", "ABORTED", "ABORTED"]
    assert all("endTime" in s for s in stages)
    assert sorted(t["status"] for t in tasks) == ["ABORTED", "ABORTED", "ABORTED", "IN_PROGRESS"]
    assert api.task(in_flight["id"])["status"] == "IN_PROGRESS"
    running_summary = summary(api, running["id"])
    assert running_summary == {**EMPTY_SUMMARY, "inProgress": 1, "aborted": 3, "total": 4}
    assert_sums(running_summary)
    counts(api, created["id"], aborted=1, total=1)
    counts(api, done["id"], completed=1, total=1)
    for s in (done, running, created, waiting):
        api.dequeue_nothing(s["type"])


def test_a_late_completion_after_abort_is_recorded_and_moves_nothing(api: Api) -> None:
    job, _, in_flight, aborted = aborted_mid_flight(api)
    before = api.http.get(f"/v1/jobs/{job['id']}/stages").json()

    r = api.http.put(f"/v1/tasks/{in_flight['id']}/status", json={"status": "COMPLETED"})

    after = api.http.get(f"/v1/jobs/{job['id']}/stages").json()
    assert r.status_code == 200
    assert r.json()["status"] == "ABORTED"
    assert api.task(in_flight["id"])["status"] == "ABORTED"
    assert api.job(job["id"])["status"] == "ABORTED"
    assert api.job(job["id"])["percentage"] == aborted["percentage"]
    assert [(s["status"], s["percentage"]) for s in after] == [
        (s["status"], s["percentage"]) for s in before
    ]
    assert after[1]["summary"] == {**EMPTY_SUMMARY, "aborted": 4, "total": 4}
    assert api.events_of(in_flight["id"])[-1] == "TaskAborted"


def test_a_late_failure_after_abort_is_recorded_and_moves_nothing(api: Api) -> None:
    job, stages, in_flight, _ = aborted_mid_flight(api)

    r = api.http.put(f"/v1/tasks/{in_flight['id']}/status", json={"status": "FAILED"})

    assert (r.status_code, r.json()["status"], r.json()["attempts"]) == (200, "ABORTED", 0)
    assert api.stage(stages[1]["id"])["summary"]["aborted"] == 4
    assert api.job(job["id"])["status"] == "ABORTED"


def test_aborting_a_paused_job_cascades_too(api: Api) -> None:
    job = api.create_job()
    stage = api.add_stage(job["id"])
    api.add_tasks(stage["id"], count=2)
    api.set_job_status(job["id"], "PAUSED")

    api.set_job_status(job["id"], "ABORTED")

    assert api.stage(stage["id"])["status"] == "ABORTED"
    counts(api, stage["id"], aborted=2, total=2)


# -- dequeue order ------------------------------------------------------------------------


def test_dequeue_takes_priority_first_then_enqueue_order(api: Api) -> None:
    def stage_of(priority: str) -> Json:
        return api.add_stage(api.create_job(priority=priority)["id"], type="shared")

    low, medium_a, high = stage_of("LOW"), stage_of("MEDIUM"), stage_of("HIGH")
    medium_b, very_high, very_low = stage_of("MEDIUM"), stage_of("VERY_HIGH"), stage_of("VERY_LOW")
    expected = []
    for s in (very_low, low, medium_a, high, medium_b, very_high):
        expected.append((s["id"], api.add_tasks(s["id"])[0]["id"]))
    (late_a,) = api.add_tasks(medium_a["id"])  # same priority as medium_b's task, enqueued later

    order = [api.dequeue("shared")["id"] for _ in range(7)]

    by_stage = dict(expected)
    assert order == [
        by_stage[very_high["id"]],
        by_stage[high["id"]],
        by_stage[medium_a["id"]],
        by_stage[medium_b["id"]],
        late_a["id"],
        by_stage[low["id"]],
        by_stage[very_low["id"]],
    ]
    api.dequeue_nothing("shared")


def test_a_priority_change_takes_effect_on_the_next_dequeue(api: Api) -> None:
    first = api.create_job(priority="MEDIUM")
    second = api.create_job(priority="MEDIUM")
    (a,) = api.add_tasks(api.add_stage(first["id"], type="q")["id"])
    (b,) = api.add_tasks(api.add_stage(second["id"], type="q")["id"])

    api.http.patch(f"/v1/jobs/{second['id']}/priority", json={"priority": "HIGH"})

    assert [api.dequeue("q")["id"] for _ in range(2)] == [b["id"], a["id"]]


def test_a_retried_task_goes_to_the_back_of_the_queue(api: Api) -> None:
    job = api.create_job()
    stage = api.add_stage(job["id"])
    a, b = api.add_tasks(stage["id"], count=2)
    api.run_task(stage["type"], "FAILED")

    order = [api.dequeue(stage["type"])["id"] for _ in range(2)]

    assert order == [b["id"], a["id"]]


def test_stage_types_are_queues_shared_across_jobs(api: Api) -> None:
    one, two = api.create_job(), api.create_job()
    s1 = api.add_stage(one["id"], type="shared")
    s2 = api.add_stage(two["id"], type="shared")
    api.add_tasks(s1["id"])
    api.add_tasks(s2["id"])

    got = {api.dequeue("shared")["stageId"] for _ in range(2)}

    assert got == {s1["id"], s2["id"]}
    assert api.job(one["id"])["status"] == api.job(two["id"])["status"] == "IN_PROGRESS"
    api.dequeue_nothing("shared")


def test_a_stage_type_holding_a_slash_is_a_queue_like_any_other(api: Api) -> None:
    job = api.create_job()
    stage = api.add_stage(job["id"], type="tiles/v2")
    (task,) = api.add_tasks(stage["id"])

    r = api.http.patch("/v1/stages/tiles%2Fv2/tasks/dequeue")

    assert (r.status_code, r.json()["id"]) == (200, task["id"])
    api.dequeue_nothing("tiles%2Fv2")


def test_only_the_current_stage_of_a_job_is_dequeued(api: Api) -> None:
    job = api.create_job()
    first = api.add_stage(job["id"], type="same")
    second = api.add_stage(job["id"], type="same")
    api.add_tasks(first["id"])
    api.add_tasks(second["id"])

    a = api.dequeue("same")
    api.dequeue_nothing("same")
    api.report(a["id"], "COMPLETED")
    b = api.dequeue("same")

    assert (a["stageId"], b["stageId"]) == (first["id"], second["id"])
