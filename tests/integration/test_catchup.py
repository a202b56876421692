"""Catch-up projections: equal to a replay from scratch, resumable, every event applied once."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from jobnik.domain.application import Jobnik, NewJob, NewStage, NewTask
from jobnik.domain.statuses import TaskStatus
from jobnik.projections.catchup import operations, tracking
from jobnik.projections.catchup.projection import CatchUpProjection
from jobnik.projections.catchup.registry import CATCH_UP
from jobnik.projections.catchup.runner import CatchUpRunner, catch_up
from jobnik.projections.queries.audit import Audit
from jobnik.projections.rebuild import passes
from jobnik.projections.rebuild.bluegreen import rebuild
from jobnik.projections.rebuild.verify import verify
from jobnik.projections.store.backends import open_store
from jobnik.projections.store.base import SqlStore
from jobnik.projections.store.config import library_env

from .test_rebuild import random_workload

NAMES = [p.name for p in CATCH_UP]
OPERATIONS = next(p for p in CATCH_UP if p.name == "operations")


def head(store: SqlStore) -> int:
    return int(store.recorder.max_notification_id() or 0)


def rows(store: SqlStore, projection: CatchUpProjection) -> dict[str, list[dict[str, Any]]]:
    with store.cursor(write=False) as cur:
        return {
            t: cur.all(f"SELECT * FROM {t} ORDER BY {', '.join(projection.keys[t])}")
            for t in projection.tables
        }


def drain(store: SqlStore, limit: int) -> None:
    for projection in CATCH_UP:
        while catch_up(store, projection, limit):
            pass


def wait_caught_up(store: SqlStore) -> None:
    deadline = time.monotonic() + 10
    while any(tracking.position_of(store, n) < head(store) for n in NAMES):
        assert time.monotonic() < deadline, "the runner did not catch up"
        time.sleep(0.01)


def many_tasks(jobnik: Jobnik, n: int) -> None:
    """One job of `n` tasks, every one dequeued and completed: about 3n events."""
    job = jobnik.create_job(NewJob(name="bulk", data={}))
    stage = jobnik.add_stage(job.id, NewStage(type="bulk", data={}))
    jobnik.add_tasks(stage.id, [NewTask(data={"i": i}) for i in range(n)])
    for _ in range(n):
        task = jobnik.dequeue("bulk")
        jobnik.report_task(task.id, TaskStatus.COMPLETED, attempt=task.attempt)


@pytest.mark.parametrize("seed", [3, 4])
def test_catch_up_projections_equal_a_replay_from_scratch(
    store: SqlStore, jobnik: Jobnik, seed: int
) -> None:
    random_workload(jobnik, random.Random(seed), 500)

    drain(store, 13)

    assert verify(store, names=NAMES) == []
    assert all(tracking.position_of(store, n) == head(store) for n in NAMES)


def test_batch_boundaries_do_not_change_the_rows(store: SqlStore, jobnik: Jobnik) -> None:
    random_workload(jobnik, random.Random(5), 300)
    drain(store, 1)
    one_by_one = {p.name: rows(store, p) for p in CATCH_UP}
    with store.cursor(write=True) as cur:
        for p in CATCH_UP:
            for t in p.tables:
                cur.execute(f"DELETE FROM {t}")
            tracking.advance(cur, p.name, 0)

    drain(store, 10_000)

    assert {p.name: rows(store, p) for p in CATCH_UP} == one_by_one


def test_a_rebuild_finds_the_type_of_a_stage_it_no_longer_remembers_in_its_row(
    store: SqlStore, jobnik: Jobnik, monkeypatch: pytest.MonkeyPatch
) -> None:
    """operations' replay remembers no stage type: task events find their stage's type in the
    stage's row, and the totals stay the runner's."""
    random_workload(jobnik, random.Random(8), 300)
    drain(store, 1_000)
    applied = rows(store, OPERATIONS)
    monkeypatch.setattr(operations, "KNOWN_STAGES", 0)
    monkeypatch.setattr(passes, "PAGE", 11)

    rebuild(store, names=["operations"])

    assert rows(store, OPERATIONS) == applied
    assert sum(r["dequeues"] for r in applied["operations_v1_types"]) > 0


def test_a_batch_that_fails_half_way_leaves_neither_rows_nor_position(
    store: SqlStore, jobnik: Jobnik, monkeypatch: pytest.MonkeyPatch
) -> None:
    random_workload(jobnik, random.Random(6), 300)
    run_stats = next(p for p in CATCH_UP if p.name == "run_stats")
    applied = type(run_stats).apply
    calls = 0

    def crash_on_the_third_batch(self: Any, cur: Any, batch: Any, sql: Any) -> None:
        nonlocal calls
        calls += 1
        applied(self, cur, batch, sql)  # rows written, then the process "dies" before commit
        if calls == 3:
            raise RuntimeError("crash")

    def run() -> None:
        while catch_up(store, run_stats, 20):
            pass

    monkeypatch.setattr(type(run_stats), "apply", crash_on_the_third_batch)
    with pytest.raises(RuntimeError, match="crash"):
        run()
    stopped_at = tracking.position_of(store, "run_stats")
    monkeypatch.setattr(type(run_stats), "apply", applied)

    run()

    assert 0 < stopped_at < head(store)
    assert verify(store, names=["run_stats"]) == []


def test_a_runner_killed_mid_way_resumes_and_applies_every_event_exactly_once(
    database_url: str, store: SqlStore, jobnik: Jobnik
) -> None:
    many_tasks(jobnik, 300)
    # A runner in its own process, slowed down (a pause inside every transaction), SIGKILLed
    # while it is part-way through the log.
    code = textwrap.dedent(
        """
        import sys, time
        from jobnik.projections.store.config import library_env
        from jobnik.projections.store.backends import open_store
        from jobnik.projections.catchup.registry import CATCH_UP
        from jobnik.projections.catchup.runner import catch_up
        store = open_store(library_env({"JOBNIK_DATABASE_URL": sys.argv[1]}))
        for p in CATCH_UP:
            apply = p.apply
            def slow(cur, batch, sql, apply=apply):
                apply(cur, batch, sql)
                time.sleep(0.05)
            p.apply = slow
        while True:
            for p in CATCH_UP:
                catch_up(store, p, 25)
        """
    )
    child = subprocess.Popen([sys.executable, "-c", code, database_url])
    try:
        deadline = time.monotonic() + 60
        while tracking.position_of(store, "run_stats") < head(store) // 3:
            assert child.poll() is None, "the runner process died on its own"
            assert time.monotonic() < deadline
            time.sleep(0.02)
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
    stopped_at = {n: tracking.position_of(store, n) for n in NAMES}

    runner = CatchUpRunner(store, CATCH_UP, store.leader_lock("catchup"), interval=0.01)
    while runner.run_once():
        pass
    runner.stop()

    assert stopped_at["run_stats"] < head(store)
    assert verify(store, names=NAMES) == []  # a twice-applied batch would double the counts


def test_two_runners_at_once_still_apply_each_event_once(
    env: dict[str, str], store: SqlStore, jobnik: Jobnik
) -> None:
    random_workload(jobnik, random.Random(8), 300)
    other = open_store(library_env(env))
    try:
        with ThreadPoolExecutor(2) as pool:
            done = [pool.submit(drain, s, 9) for s in (store, other)]
            for future in done:
                future.result()  # re-raises what the thread raised
    finally:
        other.close()

    assert verify(store, names=NAMES) == []


def test_the_runner_thread_follows_writes_as_they_happen(store: SqlStore, jobnik: Jobnik) -> None:
    runner = CatchUpRunner(store, CATCH_UP, store.leader_lock("catchup"), interval=5)
    runner.start()
    try:
        many_tasks(jobnik, 20)
        wait_caught_up(store)
    finally:
        runner.stop()

    assert verify(store, names=NAMES) == []


def _counted_run(
    runner: CatchUpRunner, jobnik: Jobnik, store: SqlStore, tasks: int
) -> tuple[int, float]:
    """Run `runner` while `tasks` tasks are made (two commits each), until it reaches the head:
    (how many rounds it ran, seconds the writes took)."""
    rounds = 0
    run_once = runner.run_once

    def counted() -> int:
        nonlocal rounds
        rounds += 1
        return run_once()

    runner.run_once = counted  # type: ignore[method-assign]
    runner.start()
    try:
        started = time.monotonic()
        many_tasks(jobnik, tasks)
        wait_caught_up(store)
        elapsed = time.monotonic() - started  # (the rounds counted run until caught up)
    finally:
        runner.stop()
    return rounds, elapsed


def test_a_burst_of_commits_shares_rounds_and_is_applied(store: SqlStore, jobnik: Jobnik) -> None:
    """Every commit wakes the runner, but rounds start at most every `min_gap` seconds: under a
    burst, one round applies many commits' events (a round costs its statements whatever it
    carries), and the runner still reaches the head."""
    runner = CatchUpRunner(store, CATCH_UP, store.leader_lock("catchup"), interval=5, min_gap=0.2)
    rounds, elapsed = _counted_run(runner, jobnik, store, 30)  # about 60 commits, each waking it

    assert rounds <= elapsed / 0.2 + 3, f"{rounds} rounds in {elapsed:.2f} s: not debounced"
    assert rounds < 60
    assert verify(store, names=NAMES) == []


def test_under_steady_commits_rounds_space_out_to_the_max_gap(
    store: SqlStore, jobnik: Jobnik
) -> None:
    """While commits keep arriving within the gap, it doubles from `min_gap` up to `max_gap`:
    a steady load is caught up in rounds `max_gap` apart, not `min_gap` apart, and the runner
    still reaches the head."""
    runner = CatchUpRunner(
        store, CATCH_UP, store.leader_lock("catchup"), interval=5, min_gap=0.01, max_gap=0.2
    )
    rounds, elapsed = _counted_run(runner, jobnik, store, 40)  # about 80 commits

    # min_gap alone would allow elapsed / 0.01 rounds; doubling reaches 0.2 after 5 of them (a
    # commit that comes late, on a loaded machine, starts the doubling again now and then)
    assert rounds <= elapsed / 0.05 + 5, f"{rounds} rounds in {elapsed:.2f} s: gap not widened"
    assert verify(store, names=NAMES) == []


def test_only_the_leader_runs_the_catch_up_projections(store: SqlStore, jobnik: Jobnik) -> None:
    many_tasks(jobnik, 5)
    leader = CatchUpRunner(store, CATCH_UP, store.leader_lock("catchup"))
    follower = CatchUpRunner(store, CATCH_UP, store.leader_lock("catchup"))
    try:
        led = leader.run_once()
        followed = follower.run_once()
    finally:
        leader.stop()
        follower.stop()

    assert led > 0
    assert followed == 0


def test_projections_at_one_position_share_a_read_of_the_log(
    store: SqlStore, jobnik: Jobnik
) -> None:
    many_tasks(jobnik, 30)
    reads = _counted_reads(store)
    runner = CatchUpRunner(store, CATCH_UP, store.leader_lock("catchup"), batch=10_000)
    moved = runner.run_once()
    runner.stop()

    assert reads == [0]  # one read for all of them
    assert {n: tracking.position_of(store, n) for n in NAMES} == dict.fromkeys(NAMES, head(store))
    assert moved == len(NAMES) * head(store)
    assert verify(store, names=NAMES) == []


def test_a_projection_ahead_of_the_others_is_never_moved_back(
    store: SqlStore, jobnik: Jobnik
) -> None:
    many_tasks(jobnik, 30)
    ahead = next(p for p in CATCH_UP if p.name == "run_stats")
    catch_up(store, ahead, 40)  # more than a page (10) ahead of the others, still at 0
    before = {n: tracking.position_of(store, n) for n in NAMES}
    reads = _counted_reads(store)
    runner = CatchUpRunner(store, CATCH_UP, store.leader_lock("catchup"), batch=10)
    moved = runner.run_once()
    first = after = {n: tracking.position_of(store, n) for n in NAMES}
    while runner.run_once():
        now = {n: tracking.position_of(store, n) for n in NAMES}
        assert all(now[n] >= after[n] for n in NAMES)
        after = now
    runner.stop()

    assert sorted(reads[:2]) == [0, before[ahead.name]]  # each position read on its own
    assert all(first[n] > before[n] for n in NAMES)  # every one moved on, none back
    assert moved == sum(first[n] - before[n] for n in NAMES)
    assert after == dict.fromkeys(NAMES, head(store))
    assert verify(store, names=NAMES) == []  # nothing applied twice


def _counted_reads(store: SqlStore) -> list[int]:
    """The start positions of the log reads the store makes from now on."""
    reads: list[int] = []
    select = store.events_after

    def counted(cur: Any, after: int, *args: Any, **kwargs: Any) -> Any:
        reads.append(after)
        return select(cur, after, *args, **kwargs)

    store.events_after = counted  # type: ignore[method-assign]
    return reads


def test_an_event_holding_a_value_the_library_cannot_decode_stops_no_reader(
    store: SqlStore, jobnik: Jobnik
) -> None:
    # A log written before the API refused such objects: the command layer does not check.
    odd = {"_type_": "not-registered", "_data_": 1}
    job = jobnik.create_job(NewJob(name="old log", data={"odd": odd}))
    stage = jobnik.add_stage(job.id, NewStage(type="old-log", data={}))
    jobnik.add_tasks(stage.id, [NewTask(data={})])

    runner = CatchUpRunner(store, CATCH_UP, store.leader_lock("catchup"), interval=0.01)
    while runner.run_once():
        pass
    runner.stop()

    assert {n: tracking.position_of(store, n) for n in NAMES} == dict.fromkeys(NAMES, head(store))
    [created, *_] = Audit(store).job_history(job.id).items
    assert created.payload["data"] == {"odd": odd}
    assert verify(store, names=NAMES) == []
