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
