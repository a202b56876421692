"""The group commit's committer (api/grouping.py), without a database: what a group holds,
who waits, what a failed group leaves its callers, and that no caller is left waiting."""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from types import SimpleNamespace
from typing import Any

import pytest

from jobnik.api import grouping, positions
from jobnik.api.grouping import Call, GroupCommit
from jobnik.domain.batches import Claiming
from jobnik.domain.principals import Actor, Principal


def call(name: str) -> Call:
    return Call(claiming=Claiming(name, Actor.WORKER))


def wait_for(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 10
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.001)


class Engine:
    """Jobnik's dequeue and run_together as the committer calls them: each transaction's
    stage types recorded; the first waits until `release` is set; `fail(n)` says whether the
    n-th transaction (from 1) fails as a whole."""

    max_batch = 10

    def __init__(self, fail: Callable[[int], bool] = lambda n: False) -> None:
        self.groups: list[list[str]] = []
        self.started, self.release = threading.Event(), threading.Event()
        self.fail = fail
        self.lock = threading.Lock()

    def _ran(self, names: list[str]) -> int:
        with self.lock:
            self.groups.append(names)
            n = len(self.groups)
        if n == 1:
            self.started.set()
            assert self.release.wait(10)
        return n

    def dequeue(self, stage_type: str, lease_seconds: int | None = None, *, by: Principal) -> str:
        self._ran([stage_type])
        positions.note_written(7)  # (as the store's commit hook notes it)
        return f"answer of {stage_type}"

    def run_together(self, dequeues: Sequence[Claiming], reports: Sequence[Any]) -> Any:
        if self.fail(self._ran([d.stage_type for d in dequeues])):
            raise RuntimeError("the shared transaction failed")
        answers = [f"answer of {d.stage_type}" for d in dequeues]
        return SimpleNamespace(dequeued=answers, reported=[], position=9)


def committer(engine: Engine, limit: int | None = None) -> tuple[GroupCommit, list[int]]:
    sizes: list[int] = []
    return GroupCommit(engine, sizes.append, limit), sizes  # type: ignore[arg-type]


def held(commit: GroupCommit, engine: Engine, later: str) -> list[Future[Any]]:
    """Call "a"; while it runs, the calls named in `later` arrive; then let all run. Their
    futures, "a"'s first."""
    first = commit.submit(call("a"))
    assert engine.started.wait(10)
    rest = [commit.submit(call(n)) for n in later]
    assert commit.waiting == len(later)
    engine.release.set()
    futures = [first, *rest]
    for f in futures:
        f.result(10)
    return futures


def test_calls_that_arrive_while_a_group_runs_wait_and_run_together_next() -> None:
    engine = Engine()
    commit, sizes = committer(engine)

    futures = held(commit, engine, "bcd")

    assert engine.groups == [["a"], ["b", "c", "d"]]
    assert sizes == [1, 3]
    assert [f.result() for f in futures] == [
        ("answer of a", 7),  # alone: the position its own commit noted
        ("answer of b", None),  # (the engine's answers are no tasks: no position)
        ("answer of c", None),
        ("answer of d", None),
    ]
    assert commit.waiting == 0


def test_a_group_takes_at_most_its_limit_and_the_rest_follow() -> None:
    engine = Engine()
    commit, sizes = committer(engine, limit=2)

    held(commit, engine, "bcde")

    assert engine.groups == [["a"], ["b", "c"], ["d", "e"]]
    assert sizes == [1, 2, 2]


def test_with_a_limit_of_one_each_call_runs_alone_in_turn() -> None:
    engine = Engine()
    commit, sizes = committer(engine, limit=1)

    held(commit, engine, "bc")

    assert engine.groups == [["a"], ["b"], ["c"]]
    assert sizes == [1, 1, 1]


def test_the_calls_of_a_failed_group_each_run_again_alone() -> None:
    engine = Engine(fail=lambda n: n == 2)
    commit, sizes = committer(engine)

    futures = held(commit, engine, "bc")

    assert engine.groups == [["a"], ["b", "c"], ["b"], ["c"]]
    assert sizes == [1, 1, 1]  # the failed group's transaction is not counted
    assert [f.result()[0] for f in futures] == ["answer of a", "answer of b", "answer of c"]


def test_a_call_cancelled_before_its_turn_is_not_run() -> None:
    engine = Engine()
    commit, _ = committer(engine)
    first = commit.submit(call("a"))
    assert engine.started.wait(10)
    gone, later = call("gone"), call("b")
    commit.submit(gone)
    commit.submit(later)

    assert gone.future.cancel()  # (its request went away)
    engine.release.set()

    assert later.future.result(10) == ("answer of b", 7)
    assert first.result(10)[0] == "answer of a"
    assert "gone" not in [n for g in engine.groups for n in g]


class Unanswering(Engine):
    """An engine whose shared transactions answer none of their dequeues (a fault)."""

    def run_together(self, dequeues: Sequence[Claiming], reports: Sequence[Any]) -> Any:
        self._ran([d.stage_type for d in dequeues])
        return SimpleNamespace(dequeued=[], reported=[], position=1)


def test_a_fault_of_the_committer_answers_its_group_and_the_next_calls_are_served() -> None:
    engine = Unanswering()
    commit, _ = committer(engine)
    first = commit.submit(call("a"))
    assert engine.started.wait(10)
    b, c = commit.submit(call("b")), commit.submit(call("c"))
    engine.release.set()

    assert first.result(10)[0] == "answer of a"
    with pytest.raises(ValueError, match="zip"):  # the group's dequeues were not answered
        b.result(10)
    with pytest.raises(ValueError, match="zip"):
        c.result(10)
    assert commit.submit(call("d")).result(10) == ("answer of d", 7)


def test_an_idle_committer_ends_and_the_next_call_starts_another(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(grouping, "IDLE_SECONDS", 0.01)
    engine = Engine()
    engine.release.set()
    commit, _ = committer(engine)

    assert commit.submit(call("a")).result(10)[0] == "answer of a"
    wait_for(lambda: not commit.serving)
    assert commit.submit(call("b")).result(10)[0] == "answer of b"


def test_a_request_awaits_its_answer_and_notes_its_position() -> None:
    engine = Engine()
    engine.release.set()
    commit, _ = committer(engine)
    box: dict[str, int] = {}

    async def request() -> object:
        positions.REQUEST_POSITIONS.set(box)
        return await commit.dequeue("x")

    assert asyncio.run(request()) == "answer of x"
    assert box == {positions.WRITTEN: 7}


def test_many_callers_each_get_their_own_answer_and_none_is_left_waiting() -> None:
    rng, lock = random.Random(3), threading.Lock()

    def fail(n: int) -> bool:
        with lock:
            return rng.random() < 0.2

    engine = Engine(fail=fail)
    engine.release.set()
    commit, sizes = committer(engine, limit=4)
    answers: list[bool] = []

    def caller(n: int) -> None:
        for i in range(200):
            name = f"{n}-{i}"
            answer = commit.submit(call(name)).result(30)[0]
            with lock:
                answers.append(answer == f"answer of {name}")

    threads = [threading.Thread(target=caller, args=(n,)) for n in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)

    assert not any(t.is_alive() for t in threads)
    assert answers == [True] * (12 * 200)
    assert sum(sizes) == 12 * 200  # each call committed in exactly one transaction
    assert max(len(g) for g in engine.groups) == 4
    assert commit.waiting == 0
