"""Per-key concurrency limits on both backends: no key ever has more of a stage type's tasks in
progress than its limit, even with 8 claimers at once; a claim takes every task the keys have
room for, never fewer; a rebuild gives the same queue (which tasks are held included) and verify
is clean."""

from __future__ import annotations

import random
import threading
import time
from typing import Any
from uuid import UUID

import pytest

from jobnik.domain.application import Jobnik, NewJob, NewStage, NewTask
from jobnik.domain.limit_commands import LimitCommands
from jobnik.domain.principals import Principal, Role
from jobnik.domain.statuses import JobStatus, Priority, TaskStatus
from jobnik.projections.rebuild.bluegreen import rebuild
from jobnik.projections.rebuild.verify import verify
from jobnik.projections.store.base import SqlStore

from .test_rebuild import snapshot
from .threads import in_threads

OPS = Principal("ops", Role.OPERATOR)


def queue(
    jobnik: Jobnik, n: int, key: str | None = None, priority: str = "MEDIUM"
) -> tuple[UUID, list[UUID]]:
    """A job of `n` render tasks (of concurrency key `key`): its id and its tasks'."""
    new = NewJob("work", {}, priority=Priority(priority), concurrency_key=key)
    job = jobnik.create_job(new)
    stage = jobnik.add_stage(job.id, NewStage("render", {}))
    tasks = jobnik.add_tasks(stage.id, [NewTask({"i": i}) for i in range(n)])
    return job.id, [t.id for t in tasks]


def running_by_key(store: SqlStore) -> dict[str, int]:
    """The database's count of render tasks in progress, by key (a job's gate)."""
    with store.cursor(write=False) as cur:
        rows = cur.all(
            "SELECT j.gate AS g, count(*) AS n FROM tasks_v1 t JOIN jobs_v1 j ON j.id = t.job_id "
            "WHERE t.stage_type = 'render' AND t.status = 'IN_PROGRESS' GROUP BY j.gate"
        )
    return {r["g"]: int(r["n"]) for r in rows}


@pytest.mark.parametrize("batch", [1, 3])
def test_eight_concurrent_claimers_never_exceed_a_keys_limit_and_leave_nothing_behind(
    store: SqlStore, jobnik: Jobnik, limits: LimitCommands, batch: int
) -> None:
    """8 threads claim, hold and complete until every task is done; a watcher reads the
    database's count in progress by key. No key is ever over its limit, and every task ends."""
    limit, per_job = 2, 10
    limits.set_key_limit("render", limit, by=OPS)
    for key in ("shared", "shared", None, None):
        queue(jobnik, per_job, key)
    total = 4 * per_job
    lock = threading.Lock()
    done = [0]
    sampled: list[int] = []
    finished = threading.Event()

    def claimer(seed: int) -> None:
        rng = random.Random(seed)
        while True:
            with lock:
                if done[0] == total:
                    return
            tasks = jobnik.dequeue_batch("render", batch)
            if not tasks:
                time.sleep(0.002)
                continue
            time.sleep(rng.random() * 0.005)
            for task in tasks:
                jobnik.report_task(task.id, TaskStatus.COMPLETED)
            with lock:
                done[0] += len(tasks)

    def watcher() -> None:
        while not finished.is_set():
            sampled.append(max(running_by_key(store).values(), default=0))
            time.sleep(0.001)

    watching = threading.Thread(target=watcher)
    watching.start()
    errors = in_threads(claimer)
    finished.set()
    watching.join()

    assert errors == []
    assert done[0] == total
    assert sampled
    assert max(sampled) <= limit
    assert running_by_key(store) == {}


@pytest.mark.parametrize("seed", [11, 12, 13])
def test_a_claim_takes_exactly_what_the_keys_have_room_for(
    store: SqlStore, jobnik: Jobnik, limits: LimitCommands, seed: int
) -> None:
    """A random walk of batched claims, reports, pauses and limit changes against a model: each
    claim takes min(asked, the sum over keys of min(queued, limit - in progress)) tasks."""
    rng = random.Random(seed)
    keys = ["a", "a", "b", None, None]
    made = [queue(jobnik, 6, key, rng.choice(["LOW", "HIGH"])) for key in keys]
    jobs = [job for job, _ in made]
    gate = {j: (f"k:{k}" if k else f"j:{j}") for j, k in zip(jobs, keys, strict=True)}
    queued = {task: job for job, tasks in made for task in tasks}
    running: dict[Any, UUID] = {}
    paused: set[UUID] = set()
    ended: set[UUID] = set()  # failed jobs: their queued tasks (retries too) cannot be dequeued
    limit: int | None = None
    for _ in range(150):
        step = rng.choice(["claim", "claim", "report", "report", "limit", "unlimit", "pause"])
        if step == "claim":
            asked = rng.randint(1, 4)
            room = 0
            for g in set(gate.values()):
                waiting = sum(
                    1 for j in queued.values() if gate[j] == g and j not in paused | ended
                )
                busy = sum(1 for j in running.values() if gate[j] == g)
                room += waiting if limit is None else max(0, min(waiting, limit - busy))
            got = jobnik.dequeue_batch("render", asked)
            assert len(got) == min(asked, room)
            for t in got:
                running[t.id] = queued.pop(t.id)
        elif step == "report" and running:
            task_id = rng.choice(list(running))  # (in claim order: the same walk each run)
            status = rng.choice([TaskStatus.COMPLETED, TaskStatus.FAILED])
            job = running.pop(task_id)
            now = jobnik.report_task(task_id, status).status
            if now == TaskStatus.RETRIED:
                queued[task_id] = job
            elif now == TaskStatus.FAILED:  # for good: its stage and job fail, its queue closes
                ended.add(job)
        elif step == "limit":
            limit = rng.randint(1, 3)
            limits.set_key_limit("render", limit, by=OPS)
        elif step == "unlimit" and limit is not None:
            limits.remove_key_limit("render", by=OPS)
            limit = None
        elif step == "pause":
            job = rng.choice(jobs)
            live_job = job not in ended and job in {*queued.values(), *running.values()}
            if job in paused:
                paused.discard(job)
                if live_job:  # (else it ended meanwhile)
                    jobnik.set_job_status(job, JobStatus.PENDING)
            elif live_job:
                jobnik.set_job_status(job, JobStatus.PAUSED)
                paused.add(job)
    live = snapshot(store)
    rebuild(store)
    assert snapshot(store) == live
    assert verify(store) == []


def test_rebuilt_gates_equal_their_live_twins_and_verify_is_clean(
    store: SqlStore, jobnik: Jobnik, limits: LimitCommands
) -> None:
    first, _ = queue(jobnik, 3, "k")
    queue(jobnik, 3, "k")
    third, _ = queue(jobnik, 2)
    limits.set_key_limit("render", 2, by=OPS, reason="licence for 2 per tenant")
    jobnik.dequeue("render")
    jobnik.set_job_status(first, JobStatus.PAUSED)
    live = snapshot(store)
    # k: one in progress, one admitted (the paused job's two held); the other job: both admitted
    assert sum(1 for r in live["queue_v1"] if r["held"]) == 4
    assert {r["gate"] for r in live["queue_v1"]} == {"k:k", f"j:{third}"}

    rebuild(store)

    assert snapshot(store) == live
    assert verify(store) == []
    limits.remove_key_limit("render", by=OPS)
    assert not any(r["held"] or r["gate"] for r in snapshot(store)["queue_v1"])
