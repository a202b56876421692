from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from jobnik.domain.archives import ArchiveBatch, ArchiveFile
from jobnik.domain.jobs import Job
from jobnik.domain.principals import Actor
from jobnik.domain.stages import Stage
from jobnik.domain.statuses import FATAL, TIMEOUT, JobStatus
from jobnik.domain.tasks import Task
from jobnik.projections.catchup import last_status, operation_changes, run_stats
from jobnik.projections.rebuild.shadow import Renamer, live_of

from ..builders import at, new_job, new_stage, new_task, per_job_record


def positioned(*events: Any) -> list[tuple[int, Any]]:
    return list(enumerate(events, start=1))


def fold_names(*events: Any) -> last_status.State:
    state = last_status.State({}, {}, Counter())
    for position, event in positioned(*events):
        last_status.step(state, event, position)
    return state


def test_last_status_follows_the_job_created_last() -> None:
    old, new = new_job(), new_job()
    old.request_status(JobStatus.ABORTED, at(5))
    created, aborted = old.collect_events()

    state = fold_names(created, *new.collect_events(), aborted)

    row = state.names["nightly"]
    assert (row.last_job_id, row.last_status, row.last_interaction) == (new.id, "PENDING", at(5))
    assert +state.counts == Counter({("nightly", "PENDING"): 1, ("nightly", "ABORTED"): 1})


def test_jobnik_statuses_map_onto_seed_001s_vocabulary() -> None:
    assert {s: last_status.DEFINITION_STATUS[s] for s in JobStatus} == {
        JobStatus.CREATED: "PENDING",
        JobStatus.PENDING: "PENDING",
        JobStatus.PAUSED: "PENDING",
        JobStatus.IN_PROGRESS: "IN_PROGRESS",
        JobStatus.COMPLETED: "COMPLETED",
        JobStatus.FAILED: "FAILED",
        JobStatus.ABORTED: "FAILED",
    }
    assert set(last_status.DEFINITION_STATUS.values()) <= set(last_status.COUNT_KEYS)


def test_run_stats_count_a_retry_as_a_new_task_and_keep_its_cause() -> None:
    job = new_job()
    stage = new_stage(job_id=job.id)
    task = new_task(max_attempts=3, stage_id=stage.id, job_id=job.id)
    task.dequeue(at(1), Actor.WORKER)
    task.fail(at(2), Actor.WORKER)
    task.dequeue(at(3), Actor.WORKER)
    task.fail(at(4), Actor.SYSTEM, "lease expired", cause=TIMEOUT)
    task.dequeue(at(5), Actor.WORKER)
    task.complete(at(6), Actor.WORKER)

    c = run_stats.fold(
        positioned(*job.collect_events(), *stage.collect_events(), *task.collect_events())
    )

    assert c.stage_adds[stage.id] == Counter(
        created=3, successful=1, retried_after_error=1, retried_after_timeout=1, queued=0
    )
    assert c.stage_sets[stage.id] == {"end_time": at(6)}
    assert set(c.new_jobs) == {job.id}
    assert set(c.new_stages) == {stage.id}


def test_run_stats_fold_event_by_event_adds_up_to_one_batch() -> None:
    stage = new_stage()
    tasks = [new_task(stage_id=stage.id) for _ in range(4)]
    for t in tasks[:3]:
        t.dequeue(at(1), Actor.WORKER)
    tasks[0].complete(at(2), Actor.WORKER)
    tasks[1].fail(at(3), Actor.WORKER)
    tasks[3].abort(at(4), Actor.SYSTEM, "job aborted")
    batch = positioned(*[e for t in tasks for e in t.collect_events()])

    whole = run_stats.fold(batch).stage_adds[stage.id]
    parts: Counter[str] = Counter()
    for item in batch:
        parts.update(run_stats.fold([item]).stage_adds.get(stage.id, Counter()))

    assert whole == parts
    assert +whole == Counter(created=5, successful=1, retried_after_error=1, canceled=1, queued=1)


def test_run_stats_read_every_event_they_handle() -> None:
    handled = set(run_stats.EVENTS)

    assert {Job.JobCreated, Stage.StageAdded, Task.TaskCreated, Task.TaskRetried} <= handled
    assert Task.TaskLogged not in handled


def test_shadow_names_cover_tables_and_their_indexes_and_map_back() -> None:
    rename = Renamer(["jobs_v1", "last_status_v1", "last_status_v1_jobs"])

    sql = rename(
        "CREATE INDEX jobs_v1_name ON jobs_v1 (name); "
        "SELECT * FROM last_status_v1_jobs JOIN last_status_v1 USING (name) JOIN run_stats_v1_jobs"
    )

    assert sql == (
        "CREATE INDEX jobs_v1__next_name ON jobs_v1__next (name); "
        "SELECT * FROM last_status_v1_jobs__next JOIN last_status_v1__next USING (name) "
        "JOIN run_stats_v1_jobs"
    )
    assert live_of("jobs_v1__next_name") == "jobs_v1_name"
    assert live_of("queue_v1__next_next") == "queue_v1_next"


def test_operations_count_retries_and_failures_by_cause_and_note_the_latest_times() -> None:
    job = new_job()
    stage = new_stage(job_id=job.id)
    task = new_task(max_attempts=3, stage_id=stage.id, job_id=job.id)
    fatal = new_task(stage_id=stage.id, job_id=job.id)
    task.dequeue(at(1), Actor.WORKER)
    task.fail(at(2), Actor.WORKER)
    task.dequeue(at(3), Actor.WORKER)
    task.fail(at(4), Actor.SYSTEM, "lease expired", cause=TIMEOUT)
    task.dequeue(at(5), Actor.WORKER)
    task.fail(at(6), Actor.SYSTEM, "lease expired", cause=TIMEOUT)  # attempts ran out
    fatal.dequeue(at(7), Actor.WORKER)
    fatal.fail(at(8), Actor.WORKER, cause=FATAL)
    events = [*job.collect_events(), *stage.collect_events()]
    events += [*task.collect_events(), *fatal.collect_events()]

    c = operation_changes.fold(positioned(*events))

    assert +c.counters[stage.id] == Counter(
        dequeues=4, leases_expired=2, retried_error=1, retried_timeout=1, failed_timeout=1
    ) + Counter(failed_fatal=1)
    assert c.dequeued_at == {stage.id: at(7)}
    assert c.leases == {
        task.id: {"task_id": task.id, "stage_id": stage.id, "expiries": 2, "last_expired_at": at(6)}
    }
    assert c.events["TaskDequeued"] == 4
    assert c.new_stages[stage.id]["stage_type"] == stage.type
    assert set(c.job_seen) == {job.id}
    assert set(c.stage_seen) == {stage.id}


def test_operations_read_every_event_and_a_job_closes_with_its_end() -> None:
    job = new_job()
    job.request_status(JobStatus.ABORTED, at(5))

    c = operation_changes.fold(positioned(*job.collect_events()))

    assert {Job.JobCreated, Task.TaskLeaseExtended, Stage.StageAdded} <= set(
        operation_changes.ALL_EVENTS
    )
    assert c.job_open == {job.id: False}
    assert c.new_jobs == {job.id: {"job_id": job.id, "open": True}}
    assert c.job_seen == {job.id: at(5)}


@pytest.mark.parametrize("per_job", [False, True])
def test_operations_take_an_archived_job_out_without_counting_its_record_as_an_event(
    per_job: bool,
) -> None:
    job = new_job()
    job.request_status(JobStatus.ABORTED, at(5))
    file = ArchiveFile(job.id, "nightly", "ab/x.ndjson.gz", "sha256:0", 2, 2, at(5))
    if per_job:
        archived = per_job_record(file, at(9))
    else:
        [archived] = ArchiveBatch.record([file], now=at(9), actor=Actor.SYSTEM).collect_events()

    c = operation_changes.fold(positioned(*job.collect_events(), archived))

    assert c.archived == {job.id}
    assert not {"JobArchived", "JobsArchived"} & set(c.events)
    assert c.job_seen == {job.id: at(5)}
