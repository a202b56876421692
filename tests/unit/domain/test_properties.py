from __future__ import annotations

from collections import Counter
from contextlib import suppress

from hypothesis import given, settings
from hypothesis import strategies as st

from jobnik.domain.errors import IllegalTaskTransition
from jobnik.domain.principals import Actor
from jobnik.domain.statuses import TASK_FINAL, TASK_TRANSITIONS, TaskStatus
from jobnik.domain.tasks import Task
from jobnik.projections.inline.ops import Add
from jobnik.projections.inline.project import project

from ..builders import at, new_task, replay

PROPERTIES = settings(max_examples=200, deadline=None, database=None)


def reach(source: TaskStatus) -> set[TaskStatus]:
    seen, todo = {source}, [source]
    while todo:
        for target in TASK_TRANSITIONS[todo.pop()]:
            if target not in seen:
                seen.add(target)
                todo.append(target)
    return seen


REACHABLE = reach(TaskStatus.PENDING)
COMMANDS = st.lists(
    st.sampled_from(["dequeue", "complete", "fail", "fail_fatally", "give_back", "abort"]),
    max_size=25,
)


def command(task: Task, name: str, minute: int) -> None:
    now = at(minute)
    if name == "abort":
        task.abort(now, Actor.SYSTEM, "job aborted")
    elif name == "fail_fatally":
        task.report(TaskStatus.FAILED, now, Actor.WORKER, fatal=True)
    elif name == "give_back":
        task.give_back(now, Actor.WORKER, "shutting down")
    else:
        getattr(task, name)(now, Actor.WORKER)


@PROPERTIES
@given(max_attempts=st.integers(1, 4), commands=COMMANDS)
def test_any_command_sequence_keeps_a_task_within_its_machine(
    max_attempts: int, commands: list[str]
) -> None:
    task = new_task(max_attempts)
    events = task.collect_events()

    for minute, name in enumerate(commands, start=1):
        before, state = task.status, task.state()
        try:
            command(task, name, minute)
        except IllegalTaskTransition:
            assert task.collect_events() == []
            assert task.state() == state
        else:
            new = task.collect_events()
            events += new
            assert len(new) <= 1
            assert task.status == before or task.status in TASK_TRANSITIONS[before]

        assert task.status in REACHABLE
        if before in TASK_FINAL:
            assert task.status == before
        assert 0 <= task.attempts <= task.max_attempts
        assert replay(events) == task


@PROPERTIES
@given(max_attempts=st.integers(1, 4), commands=COMMANDS)
def test_a_task_fails_for_good_exactly_when_failures_reach_max_attempts_or_one_is_fatal(
    max_attempts: int, commands: list[str]
) -> None:
    task = new_task(max_attempts)
    for minute, name in enumerate(commands, start=1):
        with suppress(IllegalTaskTransition):
            command(task, name, minute)

    events = task.collect_events()
    kinds = Counter(type(e) for e in events)
    failures = kinds[Task.TaskRetried] + kinds[Task.TaskFailed]
    fatal = any(isinstance(e, Task.TaskFailed) and e.cause == "fatal" for e in events)
    assert task.attempts == failures
    assert kinds[Task.TaskFailed] == (1 if task.status == TaskStatus.FAILED else 0)
    assert (task.status == TaskStatus.FAILED) == (failures == max_attempts or fatal)
    assert task.attempt == kinds[Task.TaskDequeued]


@PROPERTIES
@given(max_attempts=st.integers(1, 4), commands=COMMANDS)
def test_the_summary_a_tasks_events_project_counts_it_once_in_its_status(
    max_attempts: int, commands: list[str]
) -> None:
    task = new_task(max_attempts)
    summary: Counter[str] = Counter()

    for minute, name in enumerate([None, *commands]):
        if name is not None:
            with suppress(IllegalTaskTransition):
                command(task, name, minute)
        for event in task.collect_events():
            for op in project(event, minute):
                if isinstance(op, Add):
                    summary.update(op.deltas)

        expected = Counter({str(task.status).lower(): 1, "total": 1})
        assert {k: v for k, v in summary.items() if v} == expected
