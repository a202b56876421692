from __future__ import annotations

import random
from datetime import UTC, datetime
from typing import Any

import pytest

from jobnik.domain.application import Jobnik, NewJob, NewStage, NewTask
from jobnik.domain.errors import JobnikError
from jobnik.domain.principals import Principal, Role, token_principal
from jobnik.domain.statuses import JobStatus, Priority, TaskStatus
from jobnik.projections.catchup import registry
from jobnik.projections.inline.tables import LOGS, PRIMARY_KEYS, TABLES
from jobnik.projections.rebuild import apply, parallel, passes
from jobnik.projections.rebuild.bluegreen import rebuild
from jobnik.projections.rebuild.verify import verify
from jobnik.projections.store.base import SqlStore
from jobnik.projections.store.postgres import PostgresStore

TYPES = ["tiles", "upload", "export"]


def snapshot(store: SqlStore) -> dict[str, list[dict[str, Any]]]:
    with store.cursor(write=False) as cur:
        return {t: cur.all(f"SELECT * FROM {t} ORDER BY {PRIMARY_KEYS[t]}") for t in TABLES}


def random_workload(jobnik: Jobnik, rng: random.Random, steps: int) -> dict[str, int]:
    jobs: list[Any] = []
    stages: list[Any] = []
    failed: list[Any] = []  # tasks reported FAILED: what reruns mostly pick from
    done: dict[str, int] = {}

    def attempt(name: str, command: Any) -> None:
        try:
            command()
            done[name] = done.get(name, 0) + 1
        except JobnikError:
            done[name + "_refused"] = done.get(name + "_refused", 0) + 1

    for _ in range(steps):
        roll = rng.random()
        if roll < 0.08 or not jobs:
            job = jobnik.create_job(
                NewJob(
                    name=f"job-{rng.randint(1, 3)}",
                    data={"n": rng.random()},
                    priority=rng.choice(list(Priority)),
                )
            )
            jobs.append(job)
        elif roll < 0.18:
            job = rng.choice(jobs)
            attempt(
                "add_stage",
                lambda job=job: stages.append(
                    jobnik.add_stage(
                        job.id,
                        NewStage(
                            type=rng.choice(TYPES), data={}, start_as_waiting=rng.random() < 0.15
                        ),
                    )
                ),
            )
        elif roll < 0.3 and stages:
            stage = rng.choice(stages)
            count = rng.randint(1, 6)
            attempt(
                "add_tasks",
                lambda stage=stage, count=count: jobnik.add_tasks(
                    stage.id,
                    [NewTask(data={"i": i}, max_attempts=rng.randint(1, 3)) for i in range(count)],
                ),
            )
        elif roll < 0.62:

            def work() -> None:
                task = jobnik.dequeue(rng.choice(TYPES))
                if rng.random() < 0.85:
                    status = TaskStatus.COMPLETED if rng.random() < 0.8 else TaskStatus.FAILED
                    jobnik.report_task(task.id, status)
                    if status == TaskStatus.FAILED:
                        failed.append(task)

            attempt("work", work)
        elif roll < 0.66 and stages:
            kind, stage = rng.choice(["task", "stage", "job"]), rng.choice(stages)
            task = rng.choice(failed[-5:]) if failed and rng.random() < 0.8 else None
            if kind == "task" and task is not None:
                attempt("rerun_task", lambda t=task: jobnik.rerun_task(t.id, reason="rerun"))
            elif kind == "stage":
                stage_id = task.stage_id if task is not None else stage.id
                attempt("rerun_stage", lambda s=stage_id: jobnik.rerun_stage(s))
            else:  # an aborted job's too; from its first unfinished stage, or from `stage`
                job_id = task.job_id if task is not None else stage.job_id
                start = stage.id if rng.random() < 0.3 else None
                attempt("rerun_job", lambda j=job_id, s=start: jobnik.rerun_job(j, s))
        elif roll < 0.7 and stages:
            stage = rng.choice(stages)
            attempt("release", lambda stage=stage: jobnik.release_stage(stage.id))
        elif roll < 0.8:
            job = rng.choice(jobs)
            target = rng.choice(
                [JobStatus.PENDING, JobStatus.PAUSED, JobStatus.ABORTED, JobStatus.PENDING]
            )
            attempt("status", lambda job=job, target=target: jobnik.set_job_status(job.id, target))
        elif roll < 0.86:
            job = rng.choice(jobs)
            attempt(
                "priority",
                lambda job=job: jobnik.change_priority(job.id, rng.choice(list(Priority))),
            )
        elif roll < 0.92:
            job = rng.choice(jobs)
            attempt(
                "metadata",
                lambda job=job: jobnik.replace_job_user_metadata(job.id, {"r": rng.random()}),
            )
        elif roll < 0.96 and stages:
            stage = rng.choice(stages)
            attempt(
                "stage_metadata",
                lambda stage=stage: jobnik.replace_stage_user_metadata(
                    stage.id, {"r": rng.random()}
                ),
            )
        else:
            job = rng.choice(jobs)
            attempt("delete", lambda job=job: jobnik.delete_job(job.id))
    return done


def access_workload(jobnik: Jobnik) -> None:
    """Tokens issued (one expiring, one revoked) and a task worked by a worker token, whose
    attempt the tasks row says it holds."""
    admin = Principal("cli:ops", Role.ADMIN)
    jobnik.issue_token("ops", Role.ADMIN, by=admin)
    jobnik.issue_token("reader", Role.READER, expires_at=datetime(2999, 1, 1, tzinfo=UTC), by=admin)
    jobnik.issue_token("tiler", Role.WORKER, stage_types=["auth-tiles"], by=admin)
    jobnik.issue_token("gone", Role.PRODUCER, by=admin)
    jobnik.revoke_token("gone", by=token_principal("ops", "admin"))
    tiler = token_principal("tiler", "worker", ["auth-tiles"])
    job = jobnik.create_job(NewJob(name="auth", data={}), by=token_principal("gone", "producer"))
    stage = jobnik.add_stage(job.id, NewStage(type="auth-tiles", data={}))
    jobnik.add_tasks(stage.id, [NewTask(data={"i": i}) for i in range(2)])
    done = jobnik.dequeue("auth-tiles", by=tiler)
    jobnik.report_task(done.id, TaskStatus.COMPLETED, attempt=done.attempt, by=tiler)
    jobnik.dequeue("auth-tiles", by=tiler)  # left IN_PROGRESS, held by the tiler


@pytest.mark.parametrize("seed", [1, 2])
def test_rebuilt_read_models_equal_their_live_twins_row_for_row(
    store: SqlStore, jobnik: Jobnik, seed: int
) -> None:
    done = random_workload(jobnik, random.Random(seed), 600)
    access_workload(jobnik)
    live = snapshot(store)

    replayed = rebuild(store)

    assert replayed == store.recorder.max_notification_id()
    assert snapshot(store) == live
    assert done.get("work", 0) > 25  # the workload did real work
    assert done.get("delete", 0) > 0
    assert done.get("rerun_job", 0) + done.get("rerun_stage", 0) + done.get("rerun_task", 0) > 0
    assert live["tasks_v1"]
    assert len(live["tokens_v1"]) == 4
    assert {t["holder"] for t in live["tasks_v1"]} == {None, "tiler"}


def test_rebuild_recreates_read_models_after_they_are_dropped(
    store: SqlStore, jobnik: Jobnik
) -> None:
    random_workload(jobnik, random.Random(7), 200)
    access_workload(jobnik)
    live = snapshot(store)
    with store.cursor(write=True) as cur:
        for table in TABLES:
            cur.execute(f"DELETE FROM {table}")
    assert all(not rows for rows in snapshot(store).values())

    rebuild(store)

    assert snapshot(store) == live


def schema_of(store: SqlStore) -> dict[str, Any]:
    """Every projection table and index: its definition, and on PostgreSQL whether it is logged
    (`p`; an UNLOGGED table, `u`, is emptied by a crash)."""
    tables = [t for p in registry.ALL for t in p.tables]
    with store.cursor(write=False) as cur:
        if not isinstance(store, PostgresStore):
            rows = cur.raw_all(
                "SELECT name, tbl_name, sql FROM sqlite_master WHERE type IN ('table', 'index')"
            )
            # (SQLite quotes the table names in the stored SQL of a renamed table)
            mine = [r for r in rows if r["tbl_name"] in tables]
            return {r["name"]: (r["sql"] or "").replace('"', "") for r in mine}
        rows = cur.raw_all(
            "SELECT c.relname, c.relpersistence, i.indexdef FROM pg_class c "
            "LEFT JOIN pg_indexes i ON i.indexname = c.relname AND i.schemaname = current_schema() "
            "WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('r', 'i') "
            "AND (c.relname = ANY(%(t)s) OR i.tablename = ANY(%(t)s))",
            {"t": tables},
        )
        return {r["relname"]: (r["relpersistence"], r["indexdef"]) for r in rows}


@pytest.mark.parametrize("processes", [1, 2])
def test_a_rebuild_leaves_the_tables_and_indexes_the_migrations_made(
    store: SqlStore, jobnik: Jobnik, processes: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The replay fills shadows that lack the late indexes; what is swapped in has every index,
    defined as before (and on PostgreSQL is logged)."""
    monkeypatch.setattr(parallel, "MIN_EVENTS", 0)  # two processes: the parts' path too
    random_workload(jobnik, random.Random(3), 150)
    before = schema_of(store)
    live = snapshot(store)
    late = registry.INLINE.late_indexes
    assert late <= before.keys()  # (a renamed index would silently stop being late)

    rebuild(store, processes=processes)

    assert schema_of(store) == before
    assert snapshot(store) == live
    if isinstance(store, PostgresStore):
        assert {persistence for persistence, _ in before.values()} == {"p"}


ODD = ["plain", "", "NULL", "a\tb\nc", 'quote " and \\ backslash', "{braces,comma}", "ünï ✓"]


def rerun_workload(jobnik: Jobnik) -> None:
    """Each kind of rerun at least once: a failed task (its queued siblings reopened with it),
    a stage, an aborted job from an earlier stage, and a rerun that fails again."""
    kind = "rerun"
    job = jobnik.create_job(NewJob(name="reruns", data={}))
    first, second = (jobnik.add_stage(job.id, NewStage(type=kind, data={})) for _ in "12")
    jobnik.add_tasks(first.id, [NewTask(data={"i": i}, max_attempts=1) for i in range(3)])
    jobnik.add_tasks(second.id, [NewTask(data={}, max_attempts=1)])
    task = jobnik.dequeue(kind)
    jobnik.report_task(task.id, TaskStatus.FAILED)
    jobnik.rerun_task(task.id, reason="again")
    jobnik.report_task(jobnik.dequeue(kind).id, TaskStatus.FAILED)  # the stage fails anew
    jobnik.rerun_stage(first.id)
    for _ in range(3):
        jobnik.report_task(jobnik.dequeue(kind).id, TaskStatus.COMPLETED)
    jobnik.dequeue(kind)  # the second stage's task, held when the job is aborted
    jobnik.set_job_status(job.id, JobStatus.ABORTED)
    jobnik.rerun_job(job.id, first.id, reason="from the top")
    jobnik.report_task(jobnik.dequeue(kind).id, TaskStatus.COMPLETED)


def busy_workload(jobnik: Jobnik, rng: random.Random, steps: int) -> None:
    """random_workload and reruns, plus leases, heartbeats, hand-backs, logs and awkward
    strings."""
    rerun_workload(jobnik)
    random_workload(jobnik, rng, steps)
    for kind in TYPES:  # work for the loop below, whatever the random part left
        job = jobnik.create_job(NewJob(name="busy", data={"odd": ODD}))
        stage = jobnik.add_stage(job.id, NewStage(type=kind, data={}))
        jobnik.add_tasks(stage.id, [NewTask(data={"s": s}, max_attempts=3) for s in ODD])
    for _ in range(steps // 3):
        try:
            task = jobnik.dequeue(rng.choice(TYPES), lease_seconds=rng.choice([None, 30]))
        except JobnikError:
            continue
        try:
            jobnik.append_log(task.id, rng.sample(ODD, rng.randint(1, 3)), task.attempt)
            jobnik.heartbeat(task.id, task.attempt)
            jobnik.replace_task_user_metadata(task.id, {rng.choice(ODD): rng.choice(ODD)})
            roll = rng.random()
            if roll < 0.3:
                jobnik.give_back(task.id, task.attempt, rng.choice(ODD))
            elif roll < 0.8:
                jobnik.report_task(task.id, rng.choice([TaskStatus.COMPLETED, TaskStatus.FAILED]))
        except JobnikError:
            pass
    random_workload(jobnik, rng, steps // 2)


@pytest.mark.parametrize("page", [5, 97])
def test_the_folded_rebuild_writes_exactly_the_rows_of_the_event_by_event_one(
    store: SqlStore, jobnik: Jobnik, monkeypatch: pytest.MonkeyPatch, page: int
) -> None:
    busy_workload(jobnik, random.Random(page), 500)
    live = snapshot(store)
    monkeypatch.setattr(passes, "PAGE", page)  # rows cross pages, barriers mid-page
    monkeypatch.setattr(apply, "FOLD", False)
    rebuild(store)
    slow = snapshot(store)
    monkeypatch.setattr(apply, "FOLD", True)

    rebuild(store)

    assert snapshot(store) == slow
    assert slow == live
    assert slow[LOGS]
    assert any(r["lease_expires_at"] for r in slow["tasks_v1"])
    assert verify(store) == []


def test_rebuilt_json_columns_hold_what_the_live_path_wrote(
    store: SqlStore, jobnik: Jobnik, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rebuild's writers dump jsonb with orjson, and with the json module what orjson
    refuses (an integer beyond 64 bits): the values are the live path's either way."""
    data = {
        "big": 2**70,
        "negative": -(2**63),
        "float": 0.1,
        "tiny": 1e-300,
        "odd": ODD,
        "nested": [{"a": [1, 2.5, None, True]}, {}],
    }
    job = jobnik.create_job(NewJob(name="json", data=data))
    stage = jobnik.add_stage(job.id, NewStage(type=TYPES[0], data={"only": 2**64}))
    jobnik.add_tasks(stage.id, [NewTask(data=data), NewTask(data={"i": 1})])
    live = snapshot(store)
    monkeypatch.setattr(parallel, "MIN_EVENTS", 1)  # the part processes' writers as well

    rebuild(store, processes=2)

    assert snapshot(store) == live
    tasks = {r["data"].get("i", -1): r["data"] for r in live["tasks_v1"]}
    assert tasks[-1] == data
