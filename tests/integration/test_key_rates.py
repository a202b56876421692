"""Per-key rate limits on both backends: no key starts more tasks than its bucket holds, even with
8 claimers at once; a key whose bucket refills is let through by the next claim that finds less
than it asks; a full bucket goes; a rebuild gives the same queue and verify is clean.

Time is moved by moving a bucket's clock back (its `refilled_at` and `wake_at`), as if that
much time had passed, so no test waits for a refill."""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Any

import pytest

from jobnik.domain.application import Jobnik
from jobnik.domain.errors import InvalidLimit, TaskNotFound
from jobnik.domain.limit_commands import LimitCommands
from jobnik.domain.statuses import TaskStatus
from jobnik.projections.rebuild.bluegreen import rebuild
from jobnik.projections.rebuild.verify import verify
from jobnik.projections.store.base import SqlStore

from .test_key_limits import OPS, queue
from .test_rebuild import snapshot
from .threads import in_threads

HOUR = 3600


def buckets(store: SqlStore) -> dict[str, Any]:
    """The render type's key buckets by gate: their `wake_at`."""
    with store.cursor(write=False) as cur:
        rows = cur.all(
            "SELECT gate, wake_at FROM jobnik_buckets WHERE stage_type = 'render' AND gate <> ''"
        )
    return {r["gate"]: r["wake_at"] for r in rows}


def age(store: SqlStore, gate: str, seconds: float) -> None:
    """As if `seconds` passed for `gate`'s bucket."""
    with store.cursor(write=True) as cur:
        cur.execute(
            store.dialect.params(
                "UPDATE jobnik_buckets SET refilled_at = refilled_at - %(s)s, "
                "wake_at = wake_at - %(s)s WHERE stage_type = 'render' AND gate = %(g)s"
            ),
            {"s": seconds, "g": gate},
        )


def claim(jobnik: Jobnik) -> Any:
    """The task a dequeue of render claims, or None (404)."""
    try:
        return jobnik.dequeue("render")
    except TaskNotFound:
        return None


def gate_of_task(store: SqlStore) -> dict[Any, str]:
    with store.cursor(write=False) as cur:
        rows = cur.all("SELECT t.id, j.gate FROM tasks_v1 t JOIN jobs_v1 j ON j.id = t.job_id")
    return {str(r["id"]): r["gate"] for r in rows}


@pytest.mark.parametrize("batch", [1, 3])
def test_eight_concurrent_claimers_start_exactly_each_keys_tokens(
    store: SqlStore, jobnik: Jobnik, limits: LimitCommands, batch: int
) -> None:
    """A rate of 3 per hour per key, three keys (two jobs share one) with more queued: 8
    threads claim until nothing comes; each key started exactly 3, not one more or fewer."""
    limits.set_key_rate("render", 3, HOUR, by=OPS, reason="tenant quota")
    queue(jobnik, 5, "shared")
    queue(jobnik, 5, "shared")
    queue(jobnik, 5, "b")
    loner, _ = queue(jobnik, 5)
    started: list[Any] = []
    lock = threading.Lock()

    def claimer(_: int) -> None:
        empty = 0
        while empty < 5:
            tasks = jobnik.dequeue_batch("render", batch)
            if not tasks:
                empty += 1
                time.sleep(0.002)
                continue
            with lock:
                started.extend(str(t.id) for t in tasks)
            for task in tasks:
                jobnik.report_task(task.id, TaskStatus.COMPLETED)

    assert in_threads(claimer) == []
    gates = gate_of_task(store)
    assert len(started) == len(set(started))
    assert Counter(gates[t] for t in started) == {"k:shared": 3, "k:b": 3, f"j:{loner}": 3}
    with store.cursor(write=False) as cur:
        held = cur.all("SELECT count(*) AS n FROM queue_v1 WHERE held")[0]["n"]
    assert held == 20 - 9


def test_a_refilled_key_is_let_through_by_the_next_claim_that_finds_too_few(
    store: SqlStore, jobnik: Jobnik, limits: LimitCommands
) -> None:
    limits.set_key_rate("render", 1, HOUR, by=OPS)
    _, a_tasks = queue(jobnik, 3, "a")
    _, b_tasks = queue(jobnik, 1, "b")
    first = jobnik.dequeue_batch("render", 5)
    assert [t.id for t in first] == [a_tasks[0], b_tasks[0]]  # one token each
    assert claim(jobnik) is None
    wake = buckets(store)["k:a"]
    assert wake is not None  # in about an hour

    age(store, "k:a", HOUR / 2)  # half a token: nothing yet
    assert claim(jobnik) is None
    age(store, "k:a", HOUR / 2)
    task = claim(jobnik)
    assert task is not None
    assert task.id == a_tasks[1]
    assert claim(jobnik) is None

    age(store, "k:a", 10 * HOUR)  # a bucket refilled past full keeps one token
    assert [t.id for t in jobnik.dequeue_batch("render", 5)] == [a_tasks[2]]
    age(store, "k:a", 10 * HOUR)
    age(store, "k:b", 10 * HOUR)
    assert claim(jobnik) is None  # nothing queued: the full buckets go
    assert buckets(store) == {}


def test_a_key_rate_and_a_key_limit_hold_together(
    store: SqlStore, jobnik: Jobnik, limits: LimitCommands
) -> None:
    limits.set_key_limit("render", 1, by=OPS)
    limits.set_key_rate("render", 2, HOUR, by=OPS)
    queue(jobnik, 4, "a")
    for _ in range(2):
        [task] = jobnik.dequeue_batch("render", 4)  # one in progress at a time
        assert claim(jobnik) is None
        jobnik.report_task(task.id, TaskStatus.COMPLETED)
    assert claim(jobnik) is None  # room for one, but no token
    limits.remove_key_rate("render", by=OPS)
    assert claim(jobnik) is not None
    limits.set_key_rate("render", 2, HOUR, by=OPS)  # the key's bucket is as it was: empty
    limits.remove_key_limit("render", by=OPS)
    assert claim(jobnik) is None


def test_rebuilt_key_rates_equal_their_live_twins_and_verify_is_clean(
    store: SqlStore, jobnik: Jobnik, limits: LimitCommands
) -> None:
    limits.set_key_rate("render", 2, HOUR, by=OPS, reason="quota")
    queue(jobnik, 3, "k")
    queue(jobnik, 3, "k")
    queue(jobnik, 2)
    jobnik.dequeue_batch("render", 3)
    live = snapshot(store)
    assert sum(1 for r in live["queue_v1"] if r["held"]) == 4
    assert [r["key_rate_starts"] for r in live["stage_type_limits_v1"]] == [2]

    rebuild(store)

    assert snapshot(store) == live
    assert verify(store) == []
    limits.remove_key_rate("render", by=OPS, reason="over")
    assert not any(r["held"] or r["gate"] for r in snapshot(store)["queue_v1"])


@pytest.mark.parametrize(("starts", "interval"), [(0, HOUR), (1001, HOUR), (1, 0), (-1, 5)])
def test_a_bad_key_rate_is_refused_and_writes_nothing(
    store: SqlStore, jobnik: Jobnik, limits: LimitCommands, starts: int, interval: int
) -> None:
    with pytest.raises(InvalidLimit):
        limits.set_key_rate("render", starts, interval, by=OPS)
    assert snapshot(store)["stage_type_limits_v1"] == []
