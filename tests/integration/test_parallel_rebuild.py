"""Rebuilds whose per-job projections are replayed by several processes
(projections/rebuild/parallel.py).

On PostgreSQL the parts really run in their own processes; SQLite has one writer, so there the
same calls replay in one process, and the rows must be the same either way."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta

import pytest

from jobnik.domain.application import Jobnik, NewJob, NewStage, NewTask
from jobnik.domain.errors import DatabaseError
from jobnik.domain.statuses import TaskStatus
from jobnik.projections.catchup import tracking
from jobnik.projections.catchup.activity import Activity
from jobnik.projections.catchup.registry import CATCH_UP
from jobnik.projections.rebuild import parallel, passes
from jobnik.projections.rebuild.bluegreen import rebuild
from jobnik.projections.rebuild.verify import verify
from jobnik.projections.store import routes
from jobnik.projections.store.base import SqlStore
from jobnik.projections.store.postgres import PostgresStore
from tests.integration.test_catchup import drain, rows
from tests.integration.test_rebuild import (
    access_workload,
    busy_workload,
    random_workload,
    snapshot,
)

ACTIVITY = Activity()
T0 = datetime(2026, 3, 1, 8, 0, tzinfo=UTC)


@pytest.fixture
def everything_in_parallel(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Parallel replay for any log, however short; records the events each run's parts applied."""
    monkeypatch.setattr(parallel, "MIN_EVENTS", 0)
    monkeypatch.setattr(passes, "PAGE", 7)  # many pages per part
    applied: list[int] = []
    run = parallel.run_parts

    def recorded(*args: object, **kwargs: object) -> int | None:
        n = run(*args, **kwargs)  # type: ignore[arg-type]
        applied.append(-1 if n is None else n)
        return n

    monkeypatch.setattr(parallel, "run_parts", recorded)
    return applied


def delegating_workload(jobnik: Jobnik) -> None:
    """A parent task delegating to child jobs (rows of two jobs tied by the parent's task)."""
    parent = jobnik.create_job(NewJob(name="parent", data={}))
    stage = jobnik.add_stage(parent.id, NewStage(type="split", data={}))
    jobnik.add_tasks(stage.id, [NewTask(data={}, max_attempts=2)])
    task = jobnik.dequeue("split")
    for i in range(2):
        child = jobnik.create_job(NewJob(name="child", data={"i": i}, parent_task_id=task.id))
        child_stage = jobnik.add_stage(child.id, NewStage(type="leaf", data={}))
        jobnik.add_tasks(child_stage.id, [NewTask(data={"i": i}, max_attempts=1)])
    jobnik.report_task(task.id, TaskStatus.DELEGATED, attempt=task.attempt)
    for _ in range(2):
        leaf = jobnik.dequeue("leaf")
        jobnik.report_task(leaf.id, TaskStatus.COMPLETED, attempt=leaf.attempt)


@pytest.mark.parametrize("seed", [3, 4])
def test_a_rebuild_in_parts_writes_exactly_the_live_rows(
    store: SqlStore, jobnik: Jobnik, everything_in_parallel: list[int], seed: int
) -> None:
    busy_workload(jobnik, random.Random(seed), 400)
    delegating_workload(jobnik)
    access_workload(jobnik)  # token events: routed as jobs of their own
    live = snapshot(store)
    head = int(store.recorder.max_notification_id() or 0)

    replayed = rebuild(store, processes=3)

    assert snapshot(store) == live
    assert replayed >= head
    assert verify(store, processes=2) == []
    if isinstance(store, PostgresStore):  # every event of the log went to exactly one part
        assert everything_in_parallel == [head, head]
    else:
        assert everything_in_parallel == []  # SQLite: one process, never the parts
    with store.cursor(write=False) as cur:
        assert tracking.get(cur, "inline") is not None


def test_the_catch_up_projections_replayed_in_parts_equal_their_runners_rows(
    store: SqlStore, jobnik: Jobnik, everything_in_parallel: list[int]
) -> None:
    """operations' totals per stage type and per event type, added up by each part over its
    pass, equal the runner's, applied batch by batch."""
    busy_workload(jobnik, random.Random(7), 300)
    delegating_workload(jobnik)
    drain(store, 50)
    applied = {p.name: rows(store, p) for p in CATCH_UP}
    head = int(store.recorder.max_notification_id() or 0)

    rebuild(store, processes=3)

    assert {p.name: rows(store, p) for p in CATCH_UP} == applied
    assert len(applied["operations"]["operations_v1_types"]) > 3
    assert all(r["dequeues"] for r in applied["operations"]["operations_v1_types"])
    if isinstance(store, PostgresStore):
        assert everything_in_parallel == [head]


def test_activity_replayed_in_parts_keeps_the_runners_day_of_minutes(
    store: SqlStore, jobnik: Jobnik, everything_in_parallel: list[int]
) -> None:
    """Each part keeps the minutes within a day of its own jobs' newest one; the rows are still
    the runner's, within a day of the log's newest minute."""
    clock = iter(T0 + timedelta(minutes=7 * i) for i in range(10_000))
    jobnik.clock = lambda: next(clock)  # about three days of minutes
    random_workload(jobnik, random.Random(11), 700)
    drain(store, 50)
    applied = rows(store, ACTIVITY)
    head = int(store.recorder.max_notification_id() or 0)

    rebuild(store, processes=3)

    assert rows(store, ACTIVITY) == applied
    assert verify(store, names=[ACTIVITY.name], processes=2) == []
    newest = max(r["epoch_minute"] for r in applied["activity_v1_minutes"])
    assert min(r["epoch_minute"] for r in applied["activity_v1_minutes"]) >= newest - 24 * 60
    assert min(r["epoch_minute"] for r in applied["activity_v1_minutes"]) < newest - 23 * 60
    if isinstance(store, PostgresStore):
        assert everything_in_parallel == [head, head]


def test_a_part_that_fails_fails_the_rebuild_and_changes_no_live_row(
    store: SqlStore, jobnik: Jobnik, monkeypatch: pytest.MonkeyPatch
) -> None:
    busy_workload(jobnik, random.Random(5), 150)
    live = snapshot(store)
    monkeypatch.setattr(parallel, "MIN_EVENTS", 0)
    monkeypatch.setattr(passes, "feed_part", _failing_part)

    if not isinstance(store, PostgresStore):
        rebuild(store, processes=2)  # SQLite never starts parts
    else:
        with pytest.raises(DatabaseError, match=r"(?s)rebuild part 1 failed:.*part 1 breaks"):
            rebuild(store, processes=2)

    assert snapshot(store) == live
    assert leftovers(store) == []
    assert rebuild(store, processes=1) > 0
    assert snapshot(store) == live


def leftovers(store: SqlStore) -> list[str]:
    """Shadow and route tables still in the database."""
    if not isinstance(store, PostgresStore):
        sql = "SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE '%%__next'"
    else:
        sql = (
            "SELECT table_name AS name FROM information_schema.tables "
            "WHERE table_schema = 'public' AND (table_name LIKE '%%\\_\\_next' "
            f"OR table_name IN ('{routes.ROUTES}', '{routes._JOBS}'))"
        )
    with store.cursor(write=False) as cur:
        return [r["name"] for r in cur.all(sql)]


def _failing_part(
    store: SqlStore,
    names: Sequence[str],
    route: tuple[int, int],
    after: int,
    head: int,
    applied: Callable[[int], None],
) -> None:
    """Part 1 breaks at once; the others write their rows as usual (this runs in a part's own
    process, where `_feed_part` is the real one: only the test's process patched it)."""
    if route[0] == 1:
        raise RuntimeError("part 1 breaks")
    passes.feed_part(store, names, route, after, head, applied)


@pytest.mark.parametrize("why", ["unreadable", "incomplete"])
def test_a_log_that_cannot_be_routed_is_replayed_in_one_process(
    store: SqlStore,
    jobnik: Jobnik,
    everything_in_parallel: list[int],
    monkeypatch: pytest.MonkeyPatch,
    why: str,
) -> None:
    busy_workload(jobnik, random.Random(6), 100)
    live = snapshot(store)
    if why == "unreadable":  # the routes statement finds no job in the creation events
        read = routes._job_hex
        monkeypatch.setattr(routes, "_job_hex", lambda job, events: read("no_such", events))
    else:  # stages' events have no route
        monkeypatch.setattr(routes, "KIND", {c: k for c, k in routes.KIND.items() if k != "stage"})

    rebuild(store, processes=2)

    assert snapshot(store) == live
    assert leftovers(store) == []
    assert everything_in_parallel == ([-1] if isinstance(store, PostgresStore) else [])


def test_by_default_a_rebuild_uses_each_cpu() -> None:
    assert 1 <= parallel.processes(None) <= parallel.MAX_PROCESSES


def test_a_configured_number_of_processes_is_used_as_it_is() -> None:
    assert parallel.processes(3) == 3


def test_routes_give_the_parts_equal_work_and_keep_each_job_whole(pg_store: SqlStore) -> None:
    """Jobs dealt largest first in a snake: stages and tasks of sizes 14, 13, 12, 11, 4, 4 (a job,
    a stage and its tasks) make two parts of 29, where a split by job id might give any sums."""
    pg, jobnik = pg_store, Jobnik(pg_store)
    jobs = {}
    for i, tasks in enumerate([12, 11, 10, 9, 2, 2]):
        job = jobnik.create_job(NewJob(name=f"j{i}", data={}))
        stage = jobnik.add_stage(job.id, NewStage(type="t", data={}))
        added = jobnik.add_tasks(stage.id, [NewTask(data={}) for _ in range(tasks)])
        jobs[job.id] = {job.id, stage.id, *(t.id for t in added)}
    head = int(pg.recorder.max_notification_id() or 0)

    with pg.routes(2, head) as complete, pg.cursor(write=False) as cur:
        part = {r["originator_id"]: r["part"] for r in cur.all(f"SELECT * FROM {routes.ROUTES}")}

    assert complete
    assert part.keys() == set().union(*jobs.values())
    assert all(len({part[a] for a in aggregates}) == 1 for aggregates in jobs.values())
    assert sorted(list(part.values()).count(p) for p in (0, 1)) == [29, 29]
    assert leftovers(pg) == []
