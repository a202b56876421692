from __future__ import annotations

import pytest

from .conftest import Api


def stream(api: Api, job_id: str, last_event_id: str) -> list[str]:
    with api.http.stream(
        "GET", f"/v1/jobs/{job_id}/stream", headers={"Last-Event-ID": last_event_id}
    ) as r:
        assert r.status_code == 200
        text = r.read().decode()
    return [line[4:] for line in text.splitlines() if line.startswith("id: ")]


@pytest.mark.parametrize("past", [0, 1, 1000])
def test_a_stream_resumed_at_or_after_the_terminal_event_closes_at_once(
    api: Api, past: int
) -> None:
    job = api.job_in("COMPLETED")
    api.create_job("later")  # events after the terminal one, in the global log
    history = api.http.get(f"/v1/jobs/{job['id']}/history").json()["items"]
    terminal = history[-1]
    assert terminal["type"] == "JobCompleted"

    ids = stream(api, job["id"], str(terminal["position"] + past))

    assert ids == []


def test_a_stream_resumed_before_the_terminal_event_ends_after_it(api: Api) -> None:
    job = api.job_in("ABORTED")
    history = api.http.get(f"/v1/jobs/{job['id']}/history").json()["items"]

    ids = stream(api, job["id"], str(history[0]["position"]))

    assert ids == [str(e["position"]) for e in history[1:]]


def test_a_stream_ends_at_the_abort_though_a_late_report_follows_it(api: Api) -> None:
    job = api.create_job()
    stage = api.add_stage(job["id"])
    api.add_tasks(stage["id"])
    task = api.dequeue(stage["type"])
    api.set_job_status(job["id"], "ABORTED")
    api.report(task["id"], "COMPLETED")  # recorded after the abort, moves nothing
    history = api.http.get(f"/v1/jobs/{job['id']}/history").json()["items"]
    types = [e["type"] for e in history]
    aborted = types.index("JobAborted")
    assert aborted < len(types) - 1

    ids = stream(api, job["id"], str(history[0]["position"]))

    assert ids == [str(e["position"]) for e in history[1 : aborted + 1]]


def test_a_stream_resumed_at_a_failure_a_rerun_reopened_goes_on_to_the_next_end(
    api: Api,
) -> None:
    job = api.create_job()
    stage = api.add_stage(job["id"])
    api.add_tasks(stage["id"], maxAttempts=1)
    api.run_task(stage["type"], "FAILED")
    failed = api.http.get(f"/v1/jobs/{job['id']}/history").json()["items"][-1]
    assert failed["type"] == "JobFailed"
    assert api.http.post(f"/v1/jobs/{job['id']}/rerun").status_code == 200
    api.run_task(stage["type"], "COMPLETED")
    history = api.http.get(f"/v1/jobs/{job['id']}/history").json()["items"]
    after = [e for e in history if e["position"] > failed["position"]]

    ids = stream(api, job["id"], str(failed["position"]))

    assert "JobReopened" in [e["type"] for e in after]
    assert after[-1]["type"] == "JobCompleted"
    assert ids == [str(e["position"]) for e in after]
