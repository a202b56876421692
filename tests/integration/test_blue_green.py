"""Blue/green rebuilds while writes go on, verify, and version bumps detected at start-up."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from uuid import UUID

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from jobnik.api.main import app_from_env
from jobnik.domain.application import Jobnik, NewJob, NewStage, NewTask
from jobnik.domain.statuses import JobStatus, TaskStatus
from jobnik.projections.catchup import last_status
from jobnik.projections.catchup.last_status import LastStatus
from jobnik.projections.catchup.registry import CATCH_UP, INLINE, status
from jobnik.projections.catchup.runner import CatchUpRunner
from jobnik.projections.rebuild import passes
from jobnik.projections.rebuild.bluegreen import RebuildBusy, rebuild, rebuild_lock
from jobnik.projections.rebuild.verify import verify
from jobnik.projections.store.base import SqlStore
from jobnik.scripts.cli import app as cli

from .test_rebuild import random_workload, snapshot


def registered(store: SqlStore, name: str) -> Any:
    return next(s for s in status(store) if s.name == name)


def shadow_tables(store: SqlStore) -> list[str]:
    with store.cursor(write=False) as cur:
        if store.backend == "postgres":
            rows = cur.all(
                "SELECT tablename AS name FROM pg_tables WHERE schemaname = current_schema()"
            )
        else:
            rows = cur.all("SELECT name FROM sqlite_master WHERE type = 'table'")
    return [r["name"] for r in rows if "__next" in r["name"]]


class Writer:
    """A thread running whole jobs (create, stage, tasks, dequeue and complete each) until told
    to stop; remembers every job it finished and when."""

    def __init__(self, jobnik: Jobnik) -> None:
        self.jobnik = jobnik
        self.done: list[tuple[float, UUID]] = []
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run)

    def _run(self) -> None:
        n = 0
        try:
            while not self.stop.is_set():
                n += 1
                kind = f"w{n}"
                job = self.jobnik.create_job(NewJob(name="writer", data={"n": n}))
                stage = self.jobnik.add_stage(job.id, NewStage(type=kind, data={}))
                self.jobnik.add_tasks(stage.id, [NewTask(data={"i": i}) for i in range(3)])
                for _ in range(3):
                    task = self.jobnik.dequeue(kind)
                    self.jobnik.report_task(task.id, TaskStatus.COMPLETED, attempt=task.attempt)
                self.done.append((time.monotonic(), job.id))
        except BaseException as e:  # noqa: BLE001 - re-raised by the test
            self.error = e

    def __enter__(self) -> Writer:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        self.thread.join(timeout=60)
        if self.error is not None:
            raise self.error


def test_a_rebuild_while_writes_continue_ends_equal_to_a_fresh_replay_with_no_write_lost(
    store: SqlStore, jobnik: Jobnik, monkeypatch: pytest.MonkeyPatch
) -> None:
    random_workload(jobnik, random.Random(11), 400)
    monkeypatch.setattr(passes, "PAGE", 40)  # many pages: a long build to write during
    runner = CatchUpRunner(store, CATCH_UP, store.leader_lock("catchup"), interval=0.05)
    runner.start()
    try:
        with Writer(jobnik) as writer:
            while len(writer.done) < 3:  # writes are flowing before the rebuild starts
                time.sleep(0.01)
            started = time.monotonic()
            rebuild(store, lambda done, total: time.sleep(0.002))
            ended = time.monotonic()
            while not [t for t, _ in writer.done if t > ended]:  # and after the swap
                assert writer.error is None, writer.error
                time.sleep(0.01)
    finally:
        runner.stop()

    during = [j for t, j in writer.done if started < t < ended]
    assert during, "no job ran while the rebuild was building"
    views = snapshot(store)
    jobs = {r["id"]: r for r in views["jobs_v1"]}
    assert all(
        jobs[j]["status"] == JobStatus.COMPLETED and jobs[j]["percentage"] == 100
        for _, j in writer.done
    )
    assert verify(store) == []
    rebuild(store)  # quiet now: a replay from scratch
    assert snapshot(store) == views
    assert shadow_tables(store) == []


def test_a_catch_up_projection_is_rebuilt_while_its_runner_keeps_going(
    store: SqlStore, jobnik: Jobnik
) -> None:
    runner = CatchUpRunner(store, CATCH_UP, store.leader_lock("catchup"), interval=0.01)
    runner.start()
    try:
        with Writer(jobnik) as writer:
            while len(writer.done) < 3:
                time.sleep(0.01)
            rebuild(store, names=["run_stats"])
            count = len(writer.done)
            while len(writer.done) < count + 2:
                time.sleep(0.01)
    finally:
        runner.stop()

    assert registered(store, "run_stats").rebuilt_at is not None
    assert registered(store, "last_status").rebuilt_at is None
    assert verify(store, names=["run_stats", "last_status"]) == []


def test_verify_reports_every_row_corrupted_on_purpose(
    database_url: str, store: SqlStore, jobnik: Jobnik
) -> None:
    random_workload(jobnik, random.Random(12), 300)
    rebuild(store)  # every projection registered and caught up
    with store.cursor(write=True) as cur:
        task = cur.one("SELECT id, status FROM tasks_v1 ORDER BY id LIMIT 1")
        stage = cur.one("SELECT stage_id FROM summaries_v1 ORDER BY stage_id LIMIT 1")
        assert task
        assert stage
        p = store.dialect.param
        cur.execute(
            f"UPDATE tasks_v1 SET status = 'BOGUS' WHERE id = {p('id')}",
            {"id": store.dialect.dump("id", task["id"])},
        )
        cur.execute(
            f"DELETE FROM summaries_v1 WHERE stage_id = {p('s')}",
            {"s": store.dialect.dump("stage_id", stage["stage_id"])},
        )
        cur.execute("INSERT INTO last_status_v1_counts (name, status, jobs) VALUES ('x', 'y', 3)")

    found = {(d.table, tuple(d.key.values())): d for d in verify(store)}

    assert set(found) == {
        ("tasks_v1", (task["id"],)),
        ("summaries_v1", (stage["stage_id"],)),
        ("last_status_v1_counts", ("x", "y")),
    }
    assert found["tasks_v1", (task["id"],)].columns == ["status"]
    assert found["tasks_v1", (task["id"],)].replay["status"] == task["status"]  # type: ignore[index]
    assert found["summaries_v1", (stage["stage_id"],)].live is None
    assert found["last_status_v1_counts", ("x", "y")].replay is None
    result = CliRunner().invoke(
        cli, ["projections", "verify"], env={"JOBNIK_DATABASE_URL": database_url}
    )
    assert result.exit_code == 1
    assert "tasks_v1" in result.output
    assert "BOGUS" in result.output
    assert shadow_tables(store) == []


def test_the_cli_rebuilds_one_projection_and_shows_its_status(
    database_url: str, store: SqlStore, jobnik: Jobnik
) -> None:
    random_workload(jobnik, random.Random(13), 100)
    env = {"JOBNIK_DATABASE_URL": database_url}

    rebuilt = CliRunner().invoke(cli, ["projections", "rebuild", "last_status"], env=env)
    shown = CliRunner().invoke(cli, ["projections", "status"], env=env)
    verified = CliRunner().invoke(cli, ["projections", "verify", "last_status"], env=env)
    unknown = CliRunner().invoke(cli, ["projections", "rebuild", "nope"], env=env)

    assert rebuilt.exit_code == 0, rebuilt.output
    assert "rebuilt last_status" in rebuilt.output
    assert "events/s" in rebuilt.output
    lines = {line.split()[0]: line for line in shown.output.splitlines()[2:]}
    assert set(lines) == {
        "inline",
        "last_status",
        "run_stats",
        "operations",
        "activity",
        "schedule_runs",
    }
    assert "caught up" in lines["last_status"]
    assert "never" not in lines["last_status"]
    assert verified.exit_code == 0, verified.output
    assert unknown.exit_code == 2


def test_a_second_rebuild_at_the_same_time_is_refused(store: SqlStore) -> None:
    with rebuild_lock(store), pytest.raises(RebuildBusy):
        rebuild(store)


def test_shadows_left_by_a_crashed_rebuild_are_dropped_by_the_next(
    store: SqlStore, jobnik: Jobnik
) -> None:
    random_workload(jobnik, random.Random(14), 100)
    live = snapshot(store)
    with store.cursor(write=True) as cur:
        cur.execute("CREATE TABLE jobs_v1__next (leftover INTEGER)")

    rebuild(store)

    assert snapshot(store) == live
    assert shadow_tables(store) == []


# -- version bumps at start-up ----------------------------------------------------------------


@pytest.fixture
def http_env(database_url: str) -> dict[str, str]:
    return {
        "JOBNIK_DATABASE_URL": database_url,
        "JOBNIK_SWEEP_INTERVAL": "0",
        "JOBNIK_CATCHUP_INTERVAL": "0.02",
        "JOBNIK_LIST_SHAPE": "array",
    }


@contextmanager
def serve(env: dict[str, str]) -> Iterator[TestClient]:
    with TestClient(app_from_env(env)) as client:
        yield client


def abort_a_job(http: TestClient) -> tuple[str, int]:
    job = http.post("/v1/jobs", json={"name": "nightly", "data": {}}).json()
    r = http.put(f"/v1/jobs/{job['id']}/status", json={"status": "ABORTED"})
    assert r.status_code == 200, r.text
    return job["id"], int(r.headers["X-Jobnik-Position"])


def test_an_inline_version_bump_is_rebuilt_at_start_up_before_serving(
    http_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    with serve(http_env) as client:
        job_id, _ = abort_a_job(client)
        store = client.app.state.store  # type: ignore[attr-defined]
        with store.cursor(write=True) as cur:  # a row the old code got wrong
            cur.execute("UPDATE jobs_v1 SET percentage = 42")
    bumped = INLINE.version + 1
    monkeypatch.setattr(INLINE, "version", bumped)

    with serve(http_env) as client:
        store = client.app.state.store  # type: ignore[attr-defined]
        inline = registered(store, "inline")
        job = client.get(f"/v1/jobs/{job_id}").json()

    assert (inline.built_version, inline.stale) == (bumped, False)
    assert inline.rebuilt_at is not None
    assert job["percentage"] == 0


def test_with_rebuild_on_start_off_a_version_bump_is_only_reported(
    http_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    with serve(http_env) as client:
        abort_a_job(client)
        store = client.app.state.store  # type: ignore[attr-defined]
        with store.cursor(write=True) as cur:
            cur.execute("UPDATE jobs_v1 SET percentage = 42")
    monkeypatch.setattr(INLINE, "version", INLINE.version + 1)
    monkeypatch.setattr(LastStatus, "version", LastStatus.version + 1)

    with serve({**http_env, "JOBNIK_REBUILD_ON_START": "off"}) as client:
        store = client.app.state.store  # type: ignore[attr-defined]
        lines = {s.name: s for s in status(store)}
        job = client.get("/v1/jobs").json()[0]

    assert lines["inline"].stale
    assert lines["last_status"].stale
    assert lines["inline"].rebuilt_at is None
    assert job["percentage"] == 42


def test_a_catch_up_version_bump_is_rebuilt_by_the_runner_while_the_old_rows_serve(
    http_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    with serve(http_env) as client:
        _, position = abort_a_job(client)
        before = client.get("/v1/job-definitions/nightly", params={"min_position": position})
    # the next version of the projection says CANCELED where this one said FAILED
    bumped = LastStatus.version + 1
    monkeypatch.setattr(LastStatus, "version", bumped)
    monkeypatch.setitem(last_status.DEFINITION_STATUS, JobStatus.ABORTED, "CANCELED")

    with serve(http_env) as client:
        store = client.app.state.store  # type: ignore[attr-defined]
        deadline = time.monotonic() + 20
        while registered(store, "last_status").built_version != bumped:
            assert time.monotonic() < deadline, "the stale projection was not rebuilt"
            time.sleep(0.02)
        after = client.get("/v1/job-definitions/nightly")
        rebuilt_at = registered(store, "last_status").rebuilt_at

    assert before.json()["lastStatus"] == "FAILED"
    assert after.json()["lastStatus"] == "CANCELED"
    assert rebuilt_at is not None
