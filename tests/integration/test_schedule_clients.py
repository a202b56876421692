"""Schedules through a live server: its sweeper runs them on the real clock, the SDK's Producer
and `jobnik schedules` steer them."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from typer.testing import CliRunner

from jobnik.scripts.cli import app
from jobnik.workers import Producer

ENV = {"JOBNIK_SWEEP_INTERVAL": "0.1", "JOBNIK_CATCHUP_INTERVAL": "0.1"}


def wait_for(what: str, ready: Callable[[], Any], timeout: float = 30.0) -> Any:
    end = time.monotonic() + timeout
    while not (found := ready()):
        assert time.monotonic() < end, f"not within {timeout}s: {what}"
        time.sleep(0.05)
    return found


def test_the_sweeper_runs_a_schedule_and_the_sdk_steers_it(
    database_url: str, spawn_server: Callable[..., Any]
) -> None:
    server = spawn_server(database_url, env=ENV)
    producer = Producer(server.url)
    made = producer.create_schedule(
        "every-second",
        {"name": "tick", "data": {"n": 1}, "stages": [{"type": "tick", "tasks": [{"data": {}}]}]},
        interval_seconds=1,
        overlap_policy="allowAll",
    )
    assert made.next_fire_times[1] - made.next_fire_times[0] == timedelta(seconds=1)

    runs = wait_for(
        "three runs", lambda: (r := producer.schedule_runs(made.id)) and len(r) >= 3 and r
    )
    nominal = [r.nominal_time for r in runs]
    assert nominal == sorted(nominal, reverse=True)
    assert len(set(nominal)) == len(nominal)
    assert {r.started_by for r in runs} == {"schedule"}
    job = producer.job(runs[-1].job_id)
    assert (job.name, job.data) == ("tick", {"n": 1})

    paused = producer.pause_schedule(made.id, reason="enough")
    assert (paused.paused, paused.next_fire_times) == (True, [])
    fired = producer.schedule(made.id).counts["fired"]
    time.sleep(1.5)  # (nothing should happen while paused)
    assert producer.schedule(made.id).counts["fired"] == fired
    triggered = producer.trigger_schedule(made.id, reason="once more")
    assert not triggered.already_ran
    assert producer.schedule(made.id).counts["fired"] == fired + 1
    assert [s.id for s in producer.schedules(name="every-second")] == [made.id]
    producer.delete_schedule(made.id, reason="done")
    assert producer.schedules() == []


def test_jobnik_schedules_commands_create_steer_and_delete(
    database_url: str, spawn_server: Callable[..., Any]
) -> None:
    server = spawn_server(database_url, env={"JOBNIK_SWEEP_INTERVAL": "0"})
    runner = CliRunner()
    env = {"JOBNIK_API_URL": server.url}

    def jobnik(*args: str) -> str:
        result = runner.invoke(app, ["schedules", *args], env=env)
        assert result.exit_code == 0, result.output
        return result.output

    create = ("create", "nightly", "--cron", "30 2 * * *", "--timezone", "Europe/Berlin")
    out = jobnik(*create, "--hook", "plan", "--overlap", "bufferOne")
    assert out.startswith("schedule ")
    assert out.count("\nnext ") == 5
    assert "nightly  30 2 * * * (Europe/Berlin)" in jobnik("list")
    assert "paused" in jobnik("pause", "nightly", "--reason", "maintenance")
    assert "job " in jobnik("trigger", "nightly")
    out = jobnik("backfill", "nightly", "--start", "2026-03-28", "--end", "2026-03-30T12:00:00")
    assert "run 2026-03-29T01:00:00+00:00: job " in out  # 03:00 in Berlin: 02:30 did not exist
    assert out.endswith("3 run(s) started\n")
    assert '"pauseReason": "maintenance"' in jobnik("show", "nightly")
    assert "running" in jobnik("resume", "nightly")
    assert "deleted" in jobnik("delete", "nightly", "--reason", "retired")
    refused = runner.invoke(
        app, ["schedules", "create", "bad", "--cron", "61 * * * *", "--hook", "x"], env=env
    )
    assert refused.exit_code == 1
    assert "INVALID_CRON_EXPRESSION" in refused.output
