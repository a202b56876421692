from __future__ import annotations

from collections import Counter
from typing import Any

from jobnik.domain.principals import Actor
from jobnik.domain.statuses import JobStatus
from jobnik.projections.catchup import activity
from jobnik.projections.catchup.activity import WINDOW_MINUTES, StageRow, State, epoch_minute

from ..builders import NOW, at, new_job, new_stage, new_task

M0 = int(NOW.timestamp() // 60)


def positioned(*events: Any) -> list[tuple[int, Any]]:
    return list(enumerate(events, start=1))


def counts(state: State, minute: int) -> Counter[str]:
    return Counter({k: n for k, n in state.minutes[("tiles", M0 + minute)].items() if n})


def test_each_minute_counts_what_its_tasks_did_and_how_the_queue_changed() -> None:
    job = new_job()
    stage = new_stage(job_id=job.id)
    done, retried, dropped, held = (
        new_task(stage_id=stage.id, job_id=job.id) for _ in range(4)
    )  # all created in minute 0
    done.dequeue(at(1), Actor.WORKER)
    done.complete(at(1), Actor.WORKER)
    retried.dequeue(at(2), Actor.WORKER)
    retried.fail(at(2), Actor.WORKER)  # RETRIED: back in the queue
    dropped.abort(at(3), Actor.SYSTEM, "job aborted")  # from the queue
    held.dequeue(at(3), Actor.WORKER)
    held.abort(at(3), Actor.SYSTEM, "job aborted")  # held by a worker: not in the queue
    tasks = [done, retried, dropped, held]

    state = activity.fold(
        positioned(*stage.collect_events(), *[e for t in tasks for e in t.collect_events()]),
        {},
    )

    assert counts(state, 0) == Counter(enqueued=4, queued_change=4)
    assert counts(state, 1) == Counter(dequeued=1, completed=1, queued_change=-1)
    assert counts(state, 2) == Counter(dequeued=1, retried=1, enqueued=1)
    assert counts(state, 3) == Counter(dequeued=1, queued_change=-2)
    assert state.queued == Counter(tiles=1)  # `retried`, queued again
    assert state.stages[stage.id] == StageRow(job.id, "tiles", 1)
    assert state.job_minutes == Counter({(job.id, M0 + 1): 1})
    assert state.newest == M0 + 3


def test_a_deleted_jobs_queued_tasks_leave_its_types_count_in_the_minute_it_goes() -> None:
    job = new_job()
    stage = new_stage(job_id=job.id)
    stored = {stage.id: StageRow(job.id, "tiles", 3)}  # three left queued when it failed
    job.request_status(JobStatus.ABORTED, at(1))
    job.delete(at(9), Actor.API)
    deleted = job.collect_events()[-1]

    state = activity.fold(positioned(deleted), stored)

    assert state.queued == Counter(tiles=-3)
    assert counts(state, 9) == Counter(queued_change=-3)
    assert state.deleted == {stage.id}
    assert state.stages == {}


def test_a_batch_folds_to_the_sum_of_its_events_folded_one_by_one() -> None:
    stage = new_stage()
    tasks = [new_task(stage_id=stage.id) for _ in range(3)]
    for i, t in enumerate(tasks):
        t.dequeue(at(i), Actor.WORKER)
        t.fail(at(i + 1), Actor.WORKER)
    events = positioned(*stage.collect_events(), *[e for t in tasks for e in t.collect_events()])

    whole = activity.fold(events, {})
    parts: dict[tuple[str, int], Counter[str]] = {}
    rows = {stage.id: StageRow(stage.job_id, "tiles", 0)}
    for item in events[1:]:
        for key, n in activity.fold([item], rows).minutes.items():
            parts.setdefault(key, Counter()).update(n)

    assert whole.minutes == parts
    assert whole.stages == rows


def test_the_horizon_follows_the_newest_minute_any_event_fell_in_not_the_clock() -> None:
    state = State({})
    state.touch("tiles", M0 + 5)

    assert activity.horizon(None, State({})) is None
    assert activity.horizon(None, state) == M0 + 5 - WINDOW_MINUTES
    assert activity.horizon(M0 + 90, state) == M0 + 90 - WINDOW_MINUTES
    assert epoch_minute(new_job(now=at(2)).collect_events()[0]) == M0 + 2
