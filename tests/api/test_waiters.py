from __future__ import annotations

import asyncio
from typing import Any

import httpx

from jobnik.api.main import app_from_env

FAR = 2**62  # a position no projection reaches in this test


def app(database_url: str, **settings: str) -> Any:
    env = {
        "JOBNIK_DATABASE_URL": database_url,
        "JOBNIK_CATCHUP_INTERVAL": "0",  # no runner: the waits run to their end
        "JOBNIK_SWEEP_INTERVAL": "0",
        "JOBNIK_MIN_POSITION_WAIT": "1",
        **{f"JOBNIK_{k.upper()}": v for k, v in settings.items()},
    }
    return app_from_env(env)


async def waiting_reads(database_url: str, waiters: int, limit: str) -> tuple[Any, ...]:
    application = app(database_url, max_waiters=limit)
    transport = httpx.ASGITransport(app=application)
    async with httpx.AsyncClient(transport=transport, base_url="http://jobnik") as http:
        job = (await http.post("/v1/jobs", json={"name": "ab", "data": {}})).json()
        waits = [
            asyncio.create_task(http.get(f"/v1/job-definitions/ab?min_position={FAR}"))
            for _ in range(waiters)
        ]
        while application.state.waiters.waiting < min(waiters, int(limit)):
            await asyncio.sleep(0.01)
        other = await http.get(f"/v1/jobs/{job['id']}")
        still_waiting = sum(not w.done() for w in waits)
        answers = await asyncio.gather(*waits)
    application.state.store.close()
    return other, still_waiting, answers


def test_waiting_reads_hold_no_thread_other_requests_need(database_url: str) -> None:
    other, still_waiting, answers = asyncio.run(waiting_reads(database_url, 60, "64"))

    assert other.status_code == 200
    assert still_waiting == 60  # the unrelated read was answered while all 60 still waited
    # the wait ran out: the answer is what the (idle) projection has, and says where it is
    assert {(a.status_code, a.json()["code"]) for a in answers} == {(404, "JOB_NOT_FOUND")}
    assert {a.headers["X-Jobnik-Projection-Position"] for a in answers} == {"0"}


def test_waiters_beyond_the_limit_are_answered_503_at_once(database_url: str) -> None:
    _, _, answers = asyncio.run(waiting_reads(database_url, 5, "3"))

    busy = [a for a in answers if a.status_code == 503]
    assert sorted(a.status_code for a in answers) == [404, 404, 404, 503, 503]
    assert {a.json()["code"] for a in busy} == {"TOO_MANY_WAITERS"}
    assert all(a.headers["Retry-After"] == "1" for a in busy)
