"""Fair queue order on both backends: the SQL gives the turns the in-memory rows give (jobs of
one priority take turns, a retry goes to its job's next turn, a stage released later starts at
the head), a batched claim takes them in the same order, and a rebuild from the log gives the
same queue, turns included."""

from __future__ import annotations

from uuid import UUID

from jobnik.domain.application import Jobnik, NewJob, NewStage, NewTask
from jobnik.domain.limit_commands import LimitCommands
from jobnik.domain.statuses import TaskStatus
from jobnik.projections.rebuild.bluegreen import rebuild
from jobnik.projections.rebuild.verify import verify
from jobnik.projections.store.base import SqlStore

from .test_delays import snapshot


def stage_of(app: Jobnik, stage_type: str, n: int, name: str = "job") -> UUID:
    job = app.create_job(NewJob(name=name, data={}))
    stage = app.add_stage(job.id, NewStage(type=stage_type, data={}))
    app.add_tasks(stage.id, [NewTask(data={"i": i}) for i in range(n)])
    return stage.id


def test_fair_turns_live_and_in_a_rebuild(store: SqlStore) -> None:
    app = Jobnik(store)
    LimitCommands(store, app.clock).set_order("fair-t", "fair", reason="share")
    big = stage_of(app, "fair-t", 5)
    names = {big: "big"}
    assert [names[app.dequeue("fair-t").stage_id] for _ in range(2)] == ["big", "big"]
    small = stage_of(app, "fair-t", 2)
    names[small] = "small"
    two = app.create_job(NewJob(name="two", data={}))
    prepare = app.add_stage(two.id, NewStage(type="fair-p", data={}))
    app.add_tasks(prepare.id, [NewTask(data={})])
    later = app.add_stage(two.id, NewStage(type="fair-t", data={}))
    app.add_tasks(later.id, [NewTask(data={}) for _ in range(2)])
    names[later.id] = "later"

    failed = app.dequeue("fair-t")  # big's third
    app.report_task(failed.id, TaskStatus.FAILED, reason="once")  # retried: big's next turn
    app.report_task(app.dequeue("fair-p").id, TaskStatus.COMPLETED)  # releases `later`

    live = snapshot(store)
    rebuild(store)
    assert snapshot(store) == live
    assert verify(store) == []

    claimed = app.dequeue_batch("fair-t", 8)
    assert [names[t.stage_id] for t in claimed] == [
        "small",  # turn 2 (big's third left at 2)
        "later",  # at the head's turn (2) when it was queued, after small's first
        "big",  # turn 3
        "small",
        "later",
        "big",  # turn 4
        "big",  # the retry, at big's next turn (5)
    ]


def test_a_stage_released_later_moves_to_the_head_live_and_in_a_rebuild(store: SqlStore) -> None:
    app = Jobnik(store)
    LimitCommands(store, app.clock).set_order("fair-m", "fair", reason="share")
    two = app.create_job(NewJob(name="two", data={}))
    prepare = app.add_stage(two.id, NewStage(type="fair-q", data={}))
    app.add_tasks(prepare.id, [NewTask(data={})])
    later = app.add_stage(two.id, NewStage(type="fair-m", data={}))
    app.add_tasks(later.id, [NewTask(data={}) for _ in range(2)])  # turns 0, 1, closed
    busy = stage_of(app, "fair-m", 5)  # turns 0 to 4
    assert [app.dequeue("fair-m").stage_id for _ in range(3)] == [busy] * 3
    app.report_task(app.dequeue("fair-q").id, TaskStatus.COMPLETED)  # moves later's to 3, 4

    live = snapshot(store)
    rebuild(store)
    assert snapshot(store) == live
    assert verify(store) == []

    claimed = [t.stage_id for t in app.dequeue_batch("fair-m", 4)]
    assert claimed == [later.id, busy, later.id, busy]  # (later's were queued first)


def test_fairness_keys_live_and_in_a_rebuild(store: SqlStore) -> None:
    app = Jobnik(store)
    LimitCommands(store, app.clock).set_order("fair-k", "fair", reason="tenants")
    names = {}
    for tenant, n in (("a", 3), ("a", 3), ("b", 3)):
        job = app.create_job(NewJob(name="keyed", data={}, fairness_key=f"tenant-{tenant}"))
        stage = app.add_stage(job.id, NewStage(type="fair-k", data={}))
        app.add_tasks(stage.id, [NewTask(data={}) for _ in range(n)])
        names[stage.id] = tenant

    live = snapshot(store)
    rebuild(store)
    assert snapshot(store) == live
    assert verify(store) == []
    claimed = [names[t.stage_id] for t in app.dequeue_batch("fair-k", 9)]
    assert claimed == ["a", "b"] * 3 + ["a"] * 3


def test_fairness_weights_live_and_in_a_rebuild(store: SqlStore) -> None:
    """A key of weight 2 takes two places a turn, its tasks queued in one command or one by
    one (the second command fills the first's last turn)."""
    app = Jobnik(store)
    LimitCommands(store, app.clock).set_order("fair-w", "fair", reason="tenants")
    heavy = app.create_job(NewJob(name="heavy", data={}, fairness_key="h", fairness_weight=2))
    stage = app.add_stage(heavy.id, NewStage(type="fair-w", data={}))
    app.add_tasks(stage.id, [NewTask(data={})])
    app.add_tasks(stage.id, [NewTask(data={}) for _ in range(3)])
    names = {stage.id: "h"}
    light = app.create_job(NewJob(name="light", data={}))
    other = app.add_stage(light.id, NewStage(type="fair-w", data={}))
    app.add_tasks(other.id, [NewTask(data={}) for _ in range(2)])
    names[other.id] = "l"

    live = snapshot(store)
    rebuild(store)
    assert snapshot(store) == live
    assert verify(store) == []
    claimed = [names[t.stage_id] for t in app.dequeue_batch("fair-w", 6)]
    assert claimed == ["h", "h", "l", "h", "h", "l"]
