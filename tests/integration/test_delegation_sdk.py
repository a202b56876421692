"""Delegation with the Python SDK against a real server process, on both backends: a handler
delegates to child jobs and, re-dispatched, decides from their results; the redispatch safety
net (`jobnik jobs redispatch`) finds what the engine missed."""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from typing import Any

import pytest
from typer.testing import CliRunner

from jobnik.domain.commands import utcnow
from jobnik.domain.principals import Actor
from jobnik.projections.startup import migrate
from jobnik.projections.store.backends import open_store
from jobnik.projections.store.config import library_env
from jobnik.scripts.cli import app, parse_duration
from jobnik.workers import DELEGATED, Backoff, Producer, Task, TaskContext, Worker

from .conftest import SpawnServer

QUICK = Backoff(maximum=0.2)


def plan(task: Task, ctx: TaskContext) -> Any:
    """Fan out to one child job per part; when they have ended, sum what they returned."""
    if not ctx.redispatched:
        for part in task.data["parts"]:
            child = ctx.create_child_job("leaf-job", {"part": part})
            stage = ctx.producer.create_stage(child.id, "leaf", {})
            ctx.producer.create_tasks(stage.id, [{"n": part}], max_attempts=1)
        return DELEGATED
    results = [r["result"]["square"] for c in ctx.children for r in c.results]
    failed = [c.id for c in ctx.children if not c.succeeded]
    return {"total": sum(results), "failedChildren": len(failed)}


def leaf(task: Task, ctx: TaskContext) -> dict[str, int]:
    if task.data["n"] == 3:
        raise RuntimeError("three is unlucky")
    return {"square": task.data["n"] ** 2}


def test_a_worker_delegates_to_child_jobs_and_decides_from_their_results(
    database_url: str, spawn_server: SpawnServer
) -> None:
    server = spawn_server(database_url)
    producer = Producer(server.url)
    job = producer.create_job("fan-out", {})
    stage = producer.create_stage(job.id, "plan", {})
    [parent] = producer.create_tasks(stage.id, [{"parts": [1, 2, 3, 4]}])
    workers = [
        Worker("plan", plan, base_url=server.url, backoff=QUICK),
        Worker("leaf", leaf, base_url=server.url, concurrency=2, backoff=QUICK),
    ]
    threads = [
        threading.Thread(target=w.run, kwargs={"install_signal_handlers": False}) for w in workers
    ]
    for t in threads:
        t.start()
    try:
        deadline = time.monotonic() + 60
        while producer.job(job.id).status not in ("COMPLETED", "FAILED"):
            assert time.monotonic() < deadline, "the parent job did not end"
            time.sleep(0.1)
    finally:
        for w in workers:
            w.stop()
        for t in threads:
            t.join(30)

    done = producer.client.get(f"/v1/tasks/{parent.id}")
    assert producer.job(job.id).status == "COMPLETED"  # a failed child does not fail it
    assert (done["status"], done["delegations"], done["attempt"]) == ("COMPLETED", 1, 2)
    assert done["result"] == {"total": 1 + 4 + 16, "failedChildren": 1}
    assert workers[0].stats.delegated == 1
    assert workers[0].stats.done == 1


def test_the_redispatch_safety_net_requeues_what_the_engine_missed(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from jobnik.domain.application import Jobnik, NewJob, NewStage, NewTask

    store = open_store(library_env({"JOBNIK_DATABASE_URL": database_url}))
    migrate(store)
    engine = Jobnik(store)
    job = engine.create_job(NewJob(name="parent", data={}))
    stage = engine.add_stage(job.id, NewStage(type="plan", data={}))
    engine.add_tasks(stage.id, [NewTask(data={})])
    task = engine.dequeue("plan")
    child = engine.create_job(NewJob(name="child", data={}, parent_task_id=task.id))
    engine.report_task(task.id, "DELEGATED")  # type: ignore[arg-type]
    with store.session(write=True) as s:  # the child ends behind the engine's back
        lost = s.job(child.id)
        lost.abort(utcnow(), Actor.SYSTEM, "test: a lost notification")
        s.save(lost)
    store.close()
    monkeypatch.setenv("JOBNIK_DATABASE_URL", database_url)
    runner = CliRunner()

    fresh = runner.invoke(app, ["jobs", "redispatch", "--stale-after", "1h"])
    assert fresh.exit_code == 0, fresh.output
    assert "0 task(s) re-dispatched" in fresh.output  # delegated too recently to be stale

    stale = runner.invoke(app, ["jobs", "redispatch", "--stale-after", "0s"])
    assert stale.exit_code == 0, stale.output
    assert f"re-dispatched task {task.id}" in stale.output

    store = open_store(library_env({"JOBNIK_DATABASE_URL": database_url}))
    with store.session(write=False) as s:
        assert s.task(task.id).status == "PENDING"
    again = runner.invoke(app, ["jobs", "redispatch", "--stale-after", "0s"])
    assert "0 task(s) re-dispatched" in again.output  # nothing twice
    store.close()


def test_durations_read_as_the_cli_documents_them() -> None:
    assert parse_duration("90") == timedelta(seconds=90)
    assert parse_duration("15m") == timedelta(minutes=15)
    assert parse_duration("2h") == timedelta(hours=2)
    assert parse_duration("1d") == timedelta(days=1)
