"""A group commit gives what one by one gives: the same calls, run once as one group and once one
after another (dequeues first, then reports, in arrival order), on twin stages, get the same
answers, and leave the same events with the same traces on each task, stage and job."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any
from uuid import uuid4

import pytest

from jobnik.domain.application import Jobnik, NewJob, NewStage, NewTask
from jobnik.domain.principals import Actor
from jobnik.domain.statuses import TaskStatus
from jobnik.projections.store.base import SqlStore
from tests.integration.test_group_commit import Grouped, in_order, traced

C, F = TaskStatus.COMPLETED, TaskStatus.FAILED


def twin(jobnik: Jobnik, prefix: str, seed: int) -> dict[str, Any]:
    """Two jobs of two stages each (3 tasks, 2 attempts; the second job's first stage has a
    failure pattern), some tasks dequeued; what the calls will name."""
    rng = random.Random(seed)
    made: dict[str, Any] = {"tasks": [], "stages": [], "jobs": []}
    for j in range(2):
        job = jobnik.create_job(NewJob(name=f"{prefix}-{j}", data={}))
        made["jobs"].append(job)
        for s in range(2):
            stage = jobnik.add_stage(
                job.id,
                NewStage(
                    type=f"{prefix}-{j}{s}",
                    data={},
                    failure_patterns=("BAD",) if (j, s) == (1, 0) else (),
                ),
            )
            made["stages"].append(stage)
            jobnik.add_tasks(stage.id, [NewTask(data={"i": i}, max_attempts=2) for i in range(3)])
    for j in range(2):
        for _ in range(rng.randint(1, 3)):
            made["tasks"].append(jobnik.dequeue(f"{prefix}-{j}0"))
    return made


def calls_of(
    jobnik: Jobnik, prefix: str, made: dict[str, Any], seed: int
) -> list[tuple[bool, Callable[[], Any]]]:
    """The group's calls, the same for both twins (by position, not by id); whether each is a
    dequeue."""
    rng = random.Random(seed)
    tasks = made["tasks"]
    calls: list[tuple[bool, Callable[[], Any]]] = []
    for n in range(rng.randint(3, 9)):
        roll = rng.random()
        who = traced(f"{n + 1}")
        if roll < 0.3:
            kind = f"{prefix}-{rng.randint(0, 1)}0"
            calls.append((True, lambda kind=kind, who=who: jobnik.dequeue(kind, by=who)))
            continue
        if roll < 0.35:
            calls.append((False, lambda who=who: jobnik.report_task(uuid4(), C, attempt=1, by=who)))
            continue
        task = rng.choice(tasks)
        status = rng.choice([C, C, F])
        attempt = task.attempt + (1 if rng.random() < 0.15 else 0)
        fatal = rng.random() < 0.2
        result = {"out": "BAD" if rng.random() < 0.3 else "fine"}
        if rng.random() < 0.15:  # the SDK's: no attempt, fenced by the version it first read
            calls.append(
                (
                    False,
                    lambda t=task, s=status, r=result: jobnik.report_task(
                        t.id, s, result=r, by=Actor.API
                    ),
                )
            )
            continue
        calls.append(
            (
                False,
                lambda t=task, s=status, a=attempt, f=fatal, r=result, who=who: jobnik.report_task(
                    t.id, s, attempt=a, fatal=f, reason="r", result=r, by=who
                ),
            )
        )
    return calls


def answer(result: Any) -> Any:
    if isinstance(result, Exception):
        return type(result).__name__
    return (str(result.status), result.attempts, result.stage_type[2:])


def history(store: SqlStore, made: dict[str, Any]) -> list[Any]:
    """The events of each job, stage and task (tasks by stage and data), with their traces."""
    out = []
    with store.session(write=False) as s:
        ids = [j.id for j in made["jobs"]] + [st.id for st in made["stages"]]
        for stage in made["stages"]:
            tasks = s.tasks_in(stage.id, [str(v) for v in TaskStatus])
            ids += [t.id for t in sorted(tasks, key=lambda t: t.data["i"])]
    for aggregate in ids:
        out.append(
            [
                (type(e).__name__, getattr(e, "trace_id", None))
                for e in map(store.mapper.to_domain_event, store.recorder.select_events(aggregate))
            ]
        )
    return out


@pytest.mark.parametrize("seed", range(30))
def test_a_group_answers_and_writes_what_one_by_one_would(store: SqlStore, seed: int) -> None:
    grouped, alone = Grouped(Jobnik(store)), Jobnik(store)
    made_g, made_a = twin(grouped, "gx", seed), twin(alone, "ax", seed)
    group = calls_of(grouped, "gx", made_g, seed)
    one_by_one = calls_of(alone, "ax", made_a, seed)
    order = sorted(range(len(group)), key=lambda i: not group[i][0])  # the dequeues first

    lead = [lambda: grouped.dequeue("gx-lead")]  # (none queued: it writes nothing)
    results, _, sizes = in_order(grouped, [*lead, *(c for _, c in group)])
    expected: list[Any] = [None] * len(one_by_one)
    for i in order:
        try:
            expected[i] = one_by_one[i][1]()
        except Exception as exc:  # noqa: BLE001 - compared below
            expected[i] = exc

    assert sizes[1:] == [len(group)]
    assert [answer(r) for r in results[1:]] == [answer(r) for r in expected]
    assert history(store, made_g) == history(store, made_a)
