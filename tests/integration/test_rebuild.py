from __future__ import annotations

import random
from typing import Any

import pytest

from jobnik.domain.application import Jobnik, NewJob, NewStage, NewTask
from jobnik.domain.errors import JobnikError
from jobnik.domain.statuses import JobStatus, Priority, TaskStatus
from jobnik.projections.rebuild import rebuild
from jobnik.projections.schema import PRIMARY_KEYS, TABLES
from jobnik.projections.store import SqlStore

TYPES = ["tiles", "upload", "export"]


def snapshot(store: SqlStore) -> dict[str, list[dict[str, Any]]]:
    with store.cursor(write=False) as cur:
        return {t: cur.all(f"SELECT * FROM {t} ORDER BY {PRIMARY_KEYS[t]}") for t in TABLES}


def random_workload(jobnik: Jobnik, rng: random.Random, steps: int) -> dict[str, int]:
    jobs: list[Any] = []
    stages: list[Any] = []
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

            attempt("work", work)
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


@pytest.mark.parametrize("seed", [1, 2])
def test_rebuilt_read_models_equal_their_live_twins_row_for_row(
    store: SqlStore, jobnik: Jobnik, seed: int
) -> None:
    done = random_workload(jobnik, random.Random(seed), 600)
    live = snapshot(store)

    replayed = rebuild(store)

    assert replayed == store.recorder.max_notification_id()
    assert snapshot(store) == live
    assert done.get("work", 0) > 25  # the workload did real work
    assert done.get("delete", 0) > 0
    assert live["tasks_v1"]


def test_rebuild_recreates_read_models_after_they_are_dropped(
    store: SqlStore, jobnik: Jobnik
) -> None:
    random_workload(jobnik, random.Random(7), 200)
    live = snapshot(store)
    with store.cursor(write=True) as cur:
        for table in TABLES:
            cur.execute(f"DELETE FROM {table}")
    assert all(not rows for rows in snapshot(store).values())

    rebuild(store)

    assert snapshot(store) == live
