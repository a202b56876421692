from __future__ import annotations

import random
import threading
from typing import Any
from uuid import uuid4

from jobnik.domain.application import Jobnik, NewJob, NewStage, NewTask
from jobnik.domain.errors import (
    DelegationRefused,
    Forbidden,
    StaleAttempt,
    TaskNotFound,
)
from jobnik.domain.principals import Principal, Role, token_principal
from jobnik.domain.statuses import JobStatus, StageStatus, TaskStatus
from jobnik.domain.work import Report
from jobnik.projections.rebuild.bluegreen import rebuild
from jobnik.projections.store.base import SqlStore
from tests.integration.test_rebuild import snapshot

C, F, D = TaskStatus.COMPLETED, TaskStatus.FAILED, TaskStatus.DELEGATED


def stage_of(jobnik: Jobnik, stage_type: str, n: int, max_attempts: int = 3) -> Any:
    job = jobnik.create_job(NewJob(name=f"batch {stage_type}", data={}))
    stage = jobnik.add_stage(job.id, NewStage(type=stage_type, data={}))
    tasks = [NewTask(data={"i": i}, max_attempts=max_attempts) for i in range(n)]
    jobnik.add_tasks(stage.id, tasks)
    return stage


def events_of(store: SqlStore, task_id: Any) -> list[str]:
    return [
        type(store.mapper.to_domain_event(e)).__name__
        for e in store.recorder.select_events(task_id)
    ]


def test_a_batched_dequeue_opens_one_attempt_and_one_event_per_task(
    store: SqlStore, jobnik: Jobnik
) -> None:
    stage = stage_of(jobnik, "tiles", 5)

    first = jobnik.dequeue_batch("tiles", 3, lease_seconds=60)
    rest = jobnik.dequeue_batch("tiles", 10)
    none = jobnik.dequeue_batch("tiles", 10)

    assert (len(first), len(rest), none) == (3, 2, [])
    assert len({t.id for t in [*first, *rest]}) == 5
    assert all(t.status == TaskStatus.IN_PROGRESS and t.attempt == 1 for t in [*first, *rest])
    assert all((t.lease_expires_at - t.start_time).total_seconds() == 60 for t in first)
    assert [t.data["i"] for t in [*first, *rest]] == [0, 1, 2, 3, 4]  # queue order
    assert all(events_of(store, t.id).count("TaskDequeued") == 1 for t in [*first, *rest])
    summary = jobnik_summary(store, stage.id)
    assert (summary["pending"], summary["in_progress"]) == (0, 5)
    assert str(stage_status(store, stage.id)) == StageStatus.IN_PROGRESS


def test_a_batch_over_several_stages_starts_each_and_counts_on_each(
    store: SqlStore, jobnik: Jobnik
) -> None:
    stages = [stage_of(jobnik, "mixed", n) for n in (2, 3)]  # two jobs, one stage type

    claimed = jobnik.dequeue_batch("mixed", 4)

    assert [t.stage_id for t in claimed] == [stages[0].id] * 2 + [stages[1].id] * 2
    for stage, in_progress, pending in ((stages[0], 2, 0), (stages[1], 2, 1)):
        summary = jobnik_summary(store, stage.id)
        assert (summary["in_progress"], summary["pending"]) == (in_progress, pending)
        assert str(stage_status(store, stage.id)) == StageStatus.IN_PROGRESS
        with store.session(write=False) as s:
            assert str(s.job(stage.job_id).status) == JobStatus.IN_PROGRESS
    outcomes = jobnik.report_batch([Report(t.id, 1, C) for t in claimed])

    assert [o.error for o in outcomes] == [None] * 4
    assert str(stage_status(store, stages[0].id)) == StageStatus.COMPLETED
    assert jobnik_summary(store, stages[1].id)["completed"] == 2


def jobnik_summary(store: SqlStore, stage_id: Any) -> dict[str, Any]:
    with store.session(write=False) as s:
        return vars(s.summary(stage_id))


def stage_status(store: SqlStore, stage_id: Any) -> str:
    with store.session(write=False) as s:
        return str(s.stage(stage_id).status)


def test_each_item_of_a_mixed_report_is_answered_on_its_own(
    store: SqlStore, jobnik: Jobnik
) -> None:
    stage = stage_of(jobnik, "mixed", 5, max_attempts=2)
    ok, stale, failing, delegating, last = jobnik.dequeue_batch("mixed", 5)
    missing = uuid4()

    outcomes = jobnik.report_batch(
        [
            Report(ok.id, ok.attempt, C, result={"n": 1}),
            Report(stale.id, stale.attempt + 1, C),
            Report(failing.id, failing.attempt, F, reason="boom"),
            Report(delegating.id, delegating.attempt, D),
            Report(missing, 1, C),
            Report(ok.id, ok.attempt, C),  # the same report again: the attempt has ended
        ]
    )

    assert [o.task_id for o in outcomes] == [
        ok.id,
        stale.id,
        failing.id,
        delegating.id,
        missing,
        ok.id,
    ]
    assert [type(o.error) for o in outcomes] == [
        type(None),
        StaleAttempt,
        type(None),
        DelegationRefused,
        TaskNotFound,
        StaleAttempt,
    ]
    assert [o.task.status for o in outcomes if o.task and not o.error] == [C, TaskStatus.RETRIED]
    assert [o.task.result for o in outcomes if o.task and not o.error] == [{"n": 1}, None]
    assert events_of(store, stale.id)[-1] == "TaskAttemptRefused"
    assert events_of(store, delegating.id)[-1] == "TaskDequeued"  # refused: nothing recorded
    assert events_of(store, ok.id)[-2:] == ["TaskCompleted", "TaskAttemptRefused"]
    summary = jobnik_summary(store, stage.id)
    assert (summary["completed"], summary["retried"], summary["in_progress"]) == (1, 1, 3)

    again = jobnik.report_batch([Report(t.id, t.attempt, C) for t in (stale, delegating, last)])
    retried = jobnik.dequeue_batch("mixed", 2)
    done = jobnik.report_batch([Report(t.id, t.attempt, C) for t in retried])

    assert [o.error for o in [*again, *done]] == [None] * 4
    assert [t.id for t in retried] == [failing.id]
    assert stage_status(store, stage.id) == StageStatus.COMPLETED
    with store.session(write=False) as s:
        assert s.job(stage.job_id).status == JobStatus.COMPLETED


def test_a_worker_token_reports_only_its_own_attempts_of_its_stage_types(
    store: SqlStore, jobnik: Jobnik
) -> None:
    admin = Principal("cli:ops", Role.ADMIN)
    jobnik.issue_token("tiler", Role.WORKER, stage_types=["t-a"], by=admin)
    jobnik.issue_token("other", Role.WORKER, stage_types=["t-a"], by=admin)
    tiler = token_principal("tiler", "worker", ["t-a"])
    other = token_principal("other", "worker", ["t-a"])
    stage_of(jobnik, "t-a", 2)
    b = stage_of(jobnik, "t-b", 1)
    mine, theirs = jobnik.dequeue_batch("t-a", 1, by=tiler)[0], jobnik.dequeue("t-a", by=other)
    foreign = jobnik.dequeue("t-b")

    outcomes = jobnik.report_batch(
        [
            Report(theirs.id, theirs.attempt, C),
            Report(foreign.id, foreign.attempt, C),
            Report(mine.id, mine.attempt, C),
        ],
        by=tiler,
    )

    assert [type(o.error) for o in outcomes] == [Forbidden, Forbidden, type(None)]
    assert events_of(store, theirs.id)[-1] == "TaskAttemptRefused"
    assert events_of(store, foreign.id)[-1] == "TaskDequeued"
    assert stage_status(store, b.id) == StageStatus.IN_PROGRESS


def test_concurrent_batched_dequeues_hand_out_every_task_once(
    store: SqlStore, jobnik: Jobnik
) -> None:
    stage_of(jobnik, "many", 60)
    seen: list[Any] = []
    lock = threading.Lock()

    def work() -> None:
        while batch := jobnik.dequeue_batch("many", 7):
            outcomes = jobnik.report_batch([Report(t.id, t.attempt, C) for t in batch])
            assert [o.error for o in outcomes] == [None] * len(batch)
            with lock:
                seen.extend(t.id for t in batch)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert len(seen) == len(set(seen)) == 60


def test_read_models_rebuilt_after_batched_work_equal_the_live_ones(
    store: SqlStore, jobnik: Jobnik
) -> None:
    rng = random.Random(5)
    for n in range(3):
        stage_of(jobnik, f"rb-{n % 2}", rng.randint(3, 12), max_attempts=2)
    for _ in range(30):
        batch = jobnik.dequeue_batch(f"rb-{rng.randint(0, 1)}", rng.randint(1, 5))
        reports = [
            Report(
                t.id,
                t.attempt + (1 if rng.random() < 0.1 else 0),
                rng.choice([C, C, F]),
                result={"r": rng.random()},
            )
            for t in batch
        ]
        jobnik.report_batch(rng.sample(reports, len(reports)))
    live = snapshot(store)

    rebuild(store)

    assert snapshot(store) == live
    assert any(t["status"] == "COMPLETED" for t in live["tasks_v1"])


def test_a_fatal_item_fails_its_job_and_the_batch_goes_on(store: SqlStore, jobnik: Jobnik) -> None:
    stage = stage_of(jobnik, "fatal", 4)
    ok, fatal, late = jobnik.dequeue_batch("fatal", 3)

    outcomes = jobnik.report_batch(
        [
            Report(ok.id, ok.attempt, C),
            Report(fatal.id, fatal.attempt, F, reason="broken", fatal=True),
            Report(late.id, late.attempt, C),
        ]
    )

    assert [o.error for o in outcomes] == [None, None, None]
    assert [o.task.status for o in outcomes if o.task] == [C, TaskStatus.FAILED, C]
    assert stage_status(store, stage.id) == StageStatus.FAILED
    with store.session(write=False) as s:
        assert s.job(stage.job_id).status == JobStatus.FAILED
    assert jobnik.dequeue_batch("fatal", 5) == []  # the job's last task left the queue
