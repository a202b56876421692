"""The activity projection on both backends: its minute rows are kept for a day before the newest
event, whatever the batches and in a rebuild too, and its queued counts are the queues'."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from typing import Any

from jobnik.domain.application import Jobnik, NewJob, NewStage, NewTask
from jobnik.domain.statuses import TaskStatus
from jobnik.projections.catchup import tracking
from jobnik.projections.catchup.activity import WINDOW_MINUTES, Activity
from jobnik.projections.catchup.runner import catch_up
from jobnik.projections.queries.operations import OperationsViews
from jobnik.projections.rebuild.bluegreen import rebuild
from jobnik.projections.rebuild.verify import verify
from jobnik.projections.store.base import SqlStore

from .test_rebuild import random_workload

ACTIVITY = Activity()
T0 = datetime(2026, 3, 1, 8, 0, tzinfo=UTC)
Rows = dict[str, list[dict[str, Any]]]


def rows(store: SqlStore) -> Rows:
    with store.cursor(write=False) as cur:
        return {
            t: cur.all(f"SELECT * FROM {t} ORDER BY {', '.join(ACTIVITY.keys[t])}")
            for t in ACTIVITY.tables
        }


def drain(store: SqlStore, limit: int) -> Rows:
    """The projection replayed from the start of the log, `limit` events a batch."""
    with store.cursor(write=True) as cur:
        for t in ACTIVITY.tables:
            cur.execute(f"DELETE FROM {t}")
        tracking.advance(cur, [ACTIVITY.name], 0)
    while catch_up(store, ACTIVITY, limit):
        pass
    return rows(store)


def work(jobnik: Jobnik, stage_type: str, tasks: int, done: int) -> None:
    job = jobnik.create_job(NewJob(name="charted", data={}))
    stage = jobnik.add_stage(job.id, NewStage(type=stage_type, data={}))
    jobnik.add_tasks(stage.id, [NewTask(data={"i": i}) for i in range(tasks)])
    for _ in range(done):
        task = jobnik.dequeue(stage_type)
        jobnik.report_task(task.id, TaskStatus.COMPLETED, attempt=task.attempt)


def minute(t: datetime) -> int:
    return int(t.timestamp() // 60)


def test_minute_rows_are_kept_a_day_before_the_newest_event_however_the_log_is_batched(
    store: SqlStore, jobnik: Jobnik
) -> None:
    jobnik.clock = lambda: T0
    work(jobnik, "early", tasks=3, done=2)
    jobnik.clock = lambda: T0 + timedelta(hours=20)
    work(jobnik, "later", tasks=2, done=1)
    jobnik.clock = lambda: T0 + timedelta(hours=30)
    work(jobnik, "latest", tasks=2, done=2)
    jobnik.clock = lambda: T0 + timedelta(hours=1)  # a late write, its clock behind the others'
    work(jobnik, "late", tasks=1, done=1)

    one_by_one = drain(store, 1)
    in_sevens = drain(store, 7)
    at_once = drain(store, 10_000)

    assert one_by_one == in_sevens == at_once
    kept = {(r["stage_type"], r["epoch_minute"]) for r in at_once["activity_v1_minutes"]}
    assert kept == {
        ("later", minute(T0 + timedelta(hours=20))),
        ("latest", minute(T0 + timedelta(hours=30))),
    }
    assert min(m for _, m in kept) >= minute(T0 + timedelta(hours=30)) - WINDOW_MINUTES
    assert {r["completed"] for r in at_once["activity_v1_job_minutes"]} == {1, 2}
    queued = {r["stage_type"]: r["queued"] for r in at_once["activity_v1_types"]}
    assert queued == {"early": 1, "later": 1, "latest": 0, "late": 0}  # not windowed


def test_a_rebuild_and_a_verify_find_the_rows_the_runner_wrote(
    store: SqlStore, jobnik: Jobnik
) -> None:
    clock = iter(T0 + timedelta(minutes=7 * i) for i in range(10_000))
    jobnik.clock = lambda: next(clock)  # 700 steps: about three days of minutes
    random_workload(jobnik, random.Random(11), 700)
    live = drain(store, 50)

    rebuild(store, names=[ACTIVITY.name])

    assert rows(store) == live
    assert verify(store, names=[ACTIVITY.name]) == []
    assert len(live["activity_v1_minutes"]) > 10


def test_each_types_queued_count_is_the_one_the_queues_show(
    store: SqlStore, jobnik: Jobnik
) -> None:
    random_workload(jobnik, random.Random(12), 600)  # failures, aborts, deletes, reruns
    for deleted in (True, False):  # a failed job's queued leftovers count until it is deleted
        job = jobnik.create_job(NewJob(name="leftovers", data={}))
        stage = jobnik.add_stage(job.id, NewStage(type="leftover", data={}))
        jobnik.add_tasks(stage.id, [NewTask(data={}, max_attempts=1) for _ in range(3)])
        failed = jobnik.dequeue("leftover")
        jobnik.report_task(failed.id, TaskStatus.FAILED, attempt=failed.attempt)
        if deleted:
            jobnik.delete_job(job.id)

    drained = drain(store, 100)

    queues = OperationsViews(store).queues(datetime.now(UTC), every_type=True)
    assert {r["stage_type"]: r["queued"] for r in drained["activity_v1_types"]} == {
        q.stage_type: q.queued for q in queues
    }
    assert sum(q.queued for q in queues) > 0
    assert next(q.queued for q in queues if q.stage_type == "leftover") == 2
