"""Exactly once per nominal time across server processes: two servers share a PostgreSQL
database, the one whose sweeper leads is killed (SIGKILL) in the middle of a fire, after its
transaction wrote the run's job and before it committed; the other takes over and every nominal
time has exactly one run.

The fire is held at its last write, the run's fire key: the test holds a SHARE lock on the fire
keys' table, which lets the fire read it but makes its INSERT wait, after the job's events and
rows were written in the same transaction. The servers' connections check for a lost client
while they wait (client_connection_check_interval), so the killed server's transaction is rolled
back at once, not left to finish its pipelined COMMIT once the lock goes.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import httpx
import psycopg

from .conftest import Server
from .locks import advisory_holders
from .test_server_processes import POSTGRES_ONLY

ENV = {
    "JOBNIK_SWEEP_INTERVAL": "0.1",
    "JOBNIK_CATCHUP_INTERVAL": "0.2",
    "PGOPTIONS": "-c client_connection_check_interval=100",
}
SCHEDULE = {
    "name": "every-second",
    "intervalSeconds": 1,
    "overlapPolicy": "allowAll",
    "catchupPolicy": "all",
    "job": {"name": "tick", "stages": [{"type": "tick", "tasks": [{"data": {}}]}]},
}
WAITING_FIRE = """
SELECT w.pid FROM pg_locks w
WHERE NOT w.granted AND w.relation = 'schedule_fires_v1'::regclass
"""
HOLDS_EVENTS_LOCK = """
SELECT c.relname FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
WHERE l.pid = %s AND l.granted AND l.mode = 'ExclusiveLock'
"""


def wait_for(what: str, ready: Callable[[], Any], timeout: float = 60.0) -> Any:
    end = time.monotonic() + timeout
    while not (found := ready()):
        assert time.monotonic() < end, f"not within {timeout}s: {what}"
        time.sleep(0.02)
    return found


def one(conn: psycopg.Connection[Any], sql: str, *params: Any) -> Any:
    row = conn.execute(sql, params).fetchone()
    return row[0] if row else None


@POSTGRES_ONLY
def test_a_fire_killed_before_its_commit_runs_once_in_the_other_process(
    database_url: str, spawn_server: Callable[..., Server]
) -> None:
    leader = spawn_server(database_url, env=ENV)
    wait_for(
        "the first server leads the sweeper", lambda: advisory_holders(database_url, "sweeper")
    )
    other = spawn_server(database_url, env=ENV)
    assert advisory_holders(database_url, "sweeper") == 1

    with psycopg.connect(database_url, autocommit=True) as look:
        with psycopg.connect(database_url) as holder:
            holder.execute("LOCK TABLE schedule_fires_v1 IN SHARE MODE")  # fires wait at the key
            made = httpx.post(f"{other.url}/v1/schedules", json=SCHEDULE, timeout=10).json()
            first = datetime.fromisoformat(made["nextFireTime"].replace("Z", "+00:00"))
            pid = wait_for("a fire waiting at its fire key", lambda: one(look, WAITING_FIRE))
            held = [r[0] for r in look.execute(HOLDS_EVENTS_LOCK, (pid,)).fetchall()]
            assert any("events" in name for name in held), held  # it wrote the job's events

            assert leader.proc is not None
            os.killpg(leader.proc.pid, signal.SIGKILL)
            leader.proc.wait(timeout=30)
            wait_for(
                "the killed server's transaction ended",
                lambda: not one(look, "SELECT count(*) FROM pg_stat_activity WHERE pid = %s", pid),
            )
            assert one(look, "SELECT count(*) FROM schedule_fires_v1") == 0
            assert one(look, "SELECT count(*) FROM jobs_v1") == 0
            holder.rollback()  # the lock goes: the other server may fire

        wait_for(
            "the other server ran five nominal times",
            lambda: one(look, "SELECT count(*) FROM schedule_fires_v1") >= 5,
        )
        paused = httpx.post(f"{other.url}/v1/schedules/{made['id']}/pause", timeout=10)
        assert paused.status_code == 200, paused.text
        nominal = [
            r[0]
            for r in look.execute(
                "SELECT nominal_time FROM schedule_fires_v1 ORDER BY nominal_time"
            ).fetchall()
        ]
        jobs = one(look, "SELECT count(*) FROM jobs_v1 WHERE name = 'tick'")
    params = {"type": "JobCreatedBySchedule", "limit": 500}
    logged = httpx.get(f"{other.url}/v1/events", params=params, timeout=10).json()["items"]
    assert nominal[0] == first  # the nominal time the killed server was firing ran
    assert nominal == [first + timedelta(seconds=n) for n in range(len(nominal))]
    assert jobs == len(nominal)
    assert sorted(datetime.fromisoformat(e["payload"]["nominalTime"]) for e in logged) == nominal
