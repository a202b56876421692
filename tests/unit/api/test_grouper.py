"""The group commit's turn-taking (api/grouping.py), without a database: who leads, who waits,
what a group holds, and what a failed group leaves its callers to do."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable

import pytest

from jobnik.api.grouping import Call, Grouper
from jobnik.domain.batches import Claiming
from jobnik.domain.principals import Actor


def call(name: str) -> Call:
    return Call(claiming=Claiming(name, Actor.WORKER))


def name_of(c: Call) -> str:
    assert c.claiming is not None
    return c.claiming.stage_type


def wait_for(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 10
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.001)


class Held:
    """A `run` whose first group waits until `release` is set; records every group."""

    def __init__(self, fail: bool = False) -> None:
        self.groups: list[list[str]] = []
        self.started = threading.Event()
        self.release = threading.Event()
        self.fail = fail

    def __call__(self, calls: list[Call]) -> None:
        self.groups.append([name_of(c) for c in calls])
        if len(self.groups) == 1:
            self.started.set()
            assert self.release.wait(10)
        if self.fail and len(self.groups) == 2:
            raise RuntimeError("the shared transaction failed")
        for c in calls:
            c.answer = f"answer of {name_of(c)}"  # type: ignore[assignment]


def submit_all(grouper: Grouper, calls: list[Call]) -> list[threading.Thread]:
    threads = [threading.Thread(target=grouper.submit, args=(c,)) for c in calls]
    for t in threads:
        t.start()
    return threads


def held(limit: int, later: str) -> list[list[str]]:
    """Call "a"; while its group runs, the calls named in `later` arrive; then let all run.
    The groups, in the order they ran."""
    run = Held()
    grouper = Grouper(run, limit=limit)
    first = submit_all(grouper, [call("a")])
    assert run.started.wait(10)
    rest = submit_all(grouper, [call(n) for n in later])
    wait_for(lambda: grouper.waiting == len(later))
    run.release.set()
    for t in [*first, *rest]:
        t.join(10)
    assert grouper.waiting == 0
    return run.groups


def test_calls_that_arrive_while_a_group_runs_wait_and_run_together_next() -> None:
    groups = held(10, "bcd")

    assert [groups[0], sorted(groups[1])] == [["a"], ["b", "c", "d"]]
    assert len(groups) == 2


def test_a_group_takes_at_most_its_limit_and_the_rest_follow() -> None:
    groups = held(2, "bcde")

    assert [len(g) for g in groups] == [1, 2, 2]
    assert sorted(n for g in groups for n in g) == list("abcde")


def test_the_callers_of_a_failed_group_are_told_to_run_alone() -> None:
    run = Held(fail=True)
    grouper = Grouper(run, limit=10)
    first = submit_all(grouper, [call("a")])
    assert run.started.wait(10)
    calls = [call(n) for n in "bc"]
    errors: list[BaseException] = []

    def submit(c: Call) -> None:
        try:
            grouper.submit(c)
        except RuntimeError as exc:  # the leader sees the failure; every caller is `alone`
            errors.append(exc)

    rest = [threading.Thread(target=submit, args=(c,)) for c in calls]
    for t in rest:
        t.start()
    wait_for(lambda: grouper.waiting == 2)
    run.release.set()
    for t in [*first, *rest]:
        t.join(10)

    assert [c.alone for c in calls] == [True, True]
    assert [c.answer for c in calls] == [None, None]
    assert len(errors) == 1  # raised in the thread that led the failed group
    after = call("z")
    grouper.submit(after)  # the grouper is free again: the next call leads at once
    assert after.answer == "answer of z"


class Interrupted(threading.Event):
    """An Event whose wait is interrupted (a KeyboardInterrupt in the main thread)."""

    def wait(self, timeout: float | None = None) -> bool:
        raise KeyboardInterrupt


def test_a_caller_interrupted_while_it_waits_leaves_the_grouper_to_the_others() -> None:
    run = Held()
    grouper = Grouper(run, limit=1)  # one call per group: the interrupted one would lead next
    first = submit_all(grouper, [call("a")])
    assert run.started.wait(10)
    gone = call("gone")
    gone.done = Interrupted()
    with pytest.raises(KeyboardInterrupt):
        grouper.submit(gone)
    later = call("b")
    rest = submit_all(grouper, [later])
    wait_for(lambda: grouper.waiting >= 1)
    run.release.set()
    for t in [*first, *rest]:
        t.join(10)

    assert later.answer == "answer of b"  # not left waiting for a leader that is gone
    assert "gone" not in [n for g in run.groups for n in g]
    assert grouper.waiting == 0


def test_a_caller_interrupted_after_it_was_handed_the_lead_hands_it_on() -> None:
    run = Held()
    grouper = Grouper(run, limit=1)
    first = submit_all(grouper, [call("a")])
    assert run.started.wait(10)
    handed = threading.Event()

    class LeadThenInterrupt(threading.Event):
        def wait(self, timeout: float | None = None) -> bool:
            super().wait(10)  # handed the lead...
            handed.set()
            raise KeyboardInterrupt  # ...and interrupted before it could use it

    gone = call("gone")
    gone.done = LeadThenInterrupt()
    interrupted: list[BaseException] = []

    def submit_gone() -> None:
        try:
            grouper.submit(gone)
        except KeyboardInterrupt as exc:
            interrupted.append(exc)

    t_gone = threading.Thread(target=submit_gone)
    t_gone.start()
    wait_for(lambda: grouper.waiting == 1)
    later = call("b")
    rest = submit_all(grouper, [later])
    wait_for(lambda: grouper.waiting == 2)
    run.release.set()
    for t in [*first, t_gone, *rest]:
        t.join(10)

    assert handed.is_set()
    assert len(interrupted) == 1
    assert later.answer == "answer of b"
    assert grouper.waiting == 0
    after = call("z")
    grouper.submit(after)  # not busy for ever
    assert after.answer == "answer of z"


def test_many_callers_each_get_an_answer_or_run_alone_and_none_is_left_waiting() -> None:
    lock = threading.Lock()
    runs: list[int] = []
    rng = random.Random(3)

    def run(calls: list[Call]) -> None:
        with lock:
            runs.append(len(calls))
            fail = rng.random() < 0.2
        time.sleep(0.0002)  # (a transaction's time: callers arrive meanwhile)
        if fail:
            raise RuntimeError("the group failed")
        for c in calls:
            c.answer = name_of(c)  # type: ignore[assignment]

    grouper = Grouper(run, limit=4)
    outcomes: list[str] = []

    def caller(n: int) -> None:
        for i in range(200):
            c = call(f"{n}-{i}")
            try:
                grouper.submit(c)
            except RuntimeError:
                assert c.alone
            with lock:
                outcomes.append("alone" if c.alone else str(c.answer == name_of(c)))

    threads = [threading.Thread(target=caller, args=(n,)) for n in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)

    assert not any(t.is_alive() for t in threads)
    assert len(outcomes) == 12 * 200
    assert set(outcomes) <= {"alone", "True"}
    assert sum(runs) == 12 * 200  # each call ran in exactly one group
    assert max(runs) == 4
    assert grouper.waiting == 0
