from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, TypeVar
from uuid import UUID

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobnik.domain.application import Jobnik, NewJob, NewStage, NewTask
from jobnik.domain.errors import (
    AddTasksNotAllowed,
    IllegalJobTransition,
    IllegalStageTransition,
    IllegalTaskTransition,
    JobInFiniteState,
    JobnikError,
    JobNotFound,
    JobNotInFiniteState,
    StageInFiniteState,
    StageNotFound,
    StaleAttempt,
    TaskNotFound,
)
from jobnik.domain.statuses import (
    JOB_DEQUEUEABLE,
    JOB_FINAL,
    JOB_TRANSITIONS,
    STAGE_DEQUEUEABLE,
    STAGE_FINAL,
    TASK_FINAL,
    TASK_QUEUED,
    JobStatus,
    Priority,
    StageStatus,
    TaskStatus,
)
from jobnik.domain.tasks import Task
from jobnik.projections.inline.tables import JOBS, QUEUE, STAGES, SUMMARIES, TASKS

from ..builders import Clock, at, replay
from ..memory import MemoryStore

K = TypeVar("K")
TYPES = ("tiles", "vector")
LEASE = 5 * 60  # five clock ticks: leases expire within a run


@dataclass
class World:
    """The real application service over the in-memory store, and the ids it handed out."""

    store: MemoryStore = field(default_factory=MemoryStore)
    jobs: list[UUID] = field(default_factory=list)
    stages: list[UUID] = field(default_factory=list)
    tasks: list[UUID] = field(default_factory=list)
    finals: dict[UUID, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.clock = Clock()
        self.jobnik = Jobnik(self.store, self.clock, lease_seconds=LEASE)  # type: ignore[arg-type]

    def row(self, table: str, key: UUID) -> dict[str, Any] | None:
        return self.store.tables.maybe(table, id=key)

    def pick(self, ids: Sequence[K], index: int) -> K:
        return ids[index % len(ids)]


def build(world: World, plan: list[tuple[Priority, list[tuple[str, bool, list[int]]]]]) -> None:
    for priority, stages in plan:
        job = world.jobnik.create_job(NewJob(name="job", data={}, priority=priority))
        world.jobs.append(job.id)
        for stage_type, waiting, attempts in stages:
            add_stage(world, job.id, stage_type, waiting)
            add_tasks(world, world.stages[-1], attempts)


def add_stage(world: World, job_id: UUID, stage_type: str, waiting: bool) -> None:
    new = NewStage(type=stage_type, data={}, start_as_waiting=waiting)
    world.stages.append(world.jobnik.add_stage(job_id, new).id)


def add_tasks(world: World, stage_id: UUID, attempts: list[int]) -> None:
    tasks = world.jobnik.add_tasks(stage_id, [NewTask(data={}, max_attempts=n) for n in attempts])
    world.tasks += [t.id for t in tasks]


# -- commands: each checks the outcome the rules expect from the rows it starts from ----------


def dequeue(world: World, stage_type: str) -> None:
    expected = world.store.tables.dequeueable(stage_type)
    if not expected:
        with pytest.raises(TaskNotFound):
            world.jobnik.dequeue(stage_type)
        return
    task = world.jobnik.dequeue(stage_type)
    assert task.id == expected[0]
    assert task.status == TaskStatus.IN_PROGRESS


def report(world: World, index: int, status: TaskStatus) -> None:
    task_id = world.pick(world.tasks, index)
    row = world.row(TASKS, task_id)
    if row is None:
        with pytest.raises(TaskNotFound):
            world.jobnik.report_task(task_id, status)
    elif row["status"] != TaskStatus.IN_PROGRESS:
        with pytest.raises(IllegalTaskTransition):
            world.jobnik.report_task(task_id, status)
    else:  # a report from the worker that holds the task is a fact: never refused
        world.jobnik.report_task(task_id, status)


def worker_call(world: World, index: int, stale: bool, call: str, **args: Any) -> None:
    """heartbeat / give_back / a fenced report, from the current attempt or a stale one."""
    task_id = world.pick(world.tasks, index)
    row = world.row(TASKS, task_id)
    if row is None:
        return
    attempt = row["attempt"] - 1 if stale else row["attempt"]
    command = getattr(world.jobnik, call)
    if row["status"] != TaskStatus.IN_PROGRESS or stale:
        before = len(world.store.log)
        with pytest.raises(StaleAttempt):
            command(task_id, attempt=attempt, **args)
        [refused] = world.store.log[before:]  # recorded, and nothing else moved
        assert isinstance(refused, Task.TaskAttemptRefused)
        assert (refused.attempt, refused.current_attempt) == (attempt, row["attempt"])
        return
    aborted = world.row(JOBS, row["job_id"])["status"] == JobStatus.ABORTED  # type: ignore[index]
    result = command(task_id, attempt=attempt, **args)
    if call == "heartbeat":
        assert result.cancelled is aborted
        assert result.task.lease_expires_at == at(world.clock.minute) + timedelta(seconds=LEASE)
    elif call == "give_back":
        assert result.status == (TaskStatus.ABORTED if aborted else TaskStatus.PENDING)
        assert result.attempts == row["attempts"]


def sweep(world: World) -> None:
    now = at(world.clock.minute + 1)
    expired = {
        r["id"]
        for r in world.store.tables.rows[TASKS]
        if r["status"] == TaskStatus.IN_PROGRESS and r["lease_expires_at"] < now
    }

    assert world.jobnik.sweep() == len(expired)

    for key in expired:
        task = world.row(TASKS, key)
        assert task is not None
        assert task["status"] in (TaskStatus.RETRIED, TaskStatus.FAILED, TaskStatus.ABORTED)
        cause = getattr(world.store.events_of(key)[-1], "cause", "timeout")
        assert cause == "timeout"


def job_status(world: World, index: int, target: JobStatus) -> None:
    job_id = world.pick(world.jobs, index)
    row = world.row(JOBS, job_id)
    if row is None:
        with pytest.raises(JobNotFound):
            world.jobnik.set_job_status(job_id, target)
    elif target not in JOB_TRANSITIONS[JobStatus(row["status"])]:
        with pytest.raises(IllegalJobTransition):
            world.jobnik.set_job_status(job_id, target)
    else:
        world.jobnik.set_job_status(job_id, target)


def release(world: World, index: int) -> None:
    stage_id = world.pick(world.stages, index)
    row = world.row(STAGES, stage_id)
    if row is None:
        with pytest.raises(StageNotFound):
            world.jobnik.release_stage(stage_id)
        return
    previous = world.store.tables.maybe(
        STAGES, job_id=row["job_id"], stage_order=row["stage_order"] - 1
    )
    if row["status"] == StageStatus.PENDING:
        world.jobnik.release_stage(stage_id)
    elif previous is not None and previous["status"] != StageStatus.COMPLETED:
        with pytest.raises(IllegalStageTransition, match="Previous stage is not COMPLETED"):
            world.jobnik.release_stage(stage_id)
    elif row["status"] in (StageStatus.CREATED, StageStatus.WAITING):
        world.jobnik.release_stage(stage_id)
    else:
        with pytest.raises(IllegalStageTransition, match="Illegal status transition"):
            world.jobnik.release_stage(stage_id)


def append_stage(world: World, index: int, stage_type: str, waiting: bool) -> None:
    job_id = world.pick(world.jobs, index)
    row = world.row(JOBS, job_id)
    if row is None:
        with pytest.raises(JobNotFound):
            add_stage(world, job_id, stage_type, waiting)
    elif row["status"] in JOB_FINAL:
        with pytest.raises(JobInFiniteState):
            add_stage(world, job_id, stage_type, waiting)
    else:
        add_stage(world, job_id, stage_type, waiting)


def append_tasks(world: World, index: int, attempts: list[int]) -> None:
    stage_id = world.pick(world.stages, index)
    row = world.row(STAGES, stage_id)
    refusal: type[JobnikError] | None = None
    if row is None:
        refusal = StageNotFound
    elif row["status"] in STAGE_FINAL:
        refusal = StageInFiniteState
    elif row["status"] == StageStatus.IN_PROGRESS:
        refusal = AddTasksNotAllowed
    if refusal is None:
        add_tasks(world, stage_id, attempts)
    else:
        with pytest.raises(refusal):
            add_tasks(world, stage_id, attempts)


def change_priority(world: World, index: int, priority: Priority) -> None:
    job_id = world.pick(world.jobs, index)
    if world.row(JOBS, job_id) is None:
        with pytest.raises(JobNotFound):
            world.jobnik.change_priority(job_id, priority)
    else:
        world.jobnik.change_priority(job_id, priority)


def delete(world: World, index: int) -> None:
    job_id = world.pick(world.jobs, index)
    row = world.row(JOBS, job_id)
    if row is None:
        with pytest.raises(JobNotFound):
            world.jobnik.delete_job(job_id)
    elif row["status"] not in JOB_FINAL:
        with pytest.raises(JobNotInFiniteState):
            world.jobnik.delete_job(job_id)
    else:
        world.jobnik.delete_job(job_id)


INDEX = st.integers(0, 50)
ATTEMPTS = st.lists(st.integers(1, 3), min_size=1, max_size=3)
WAITING = st.sampled_from([False, False, False, True])
PLAN = st.lists(
    st.tuples(
        st.sampled_from(list(Priority)),
        st.lists(st.tuples(st.sampled_from(TYPES), WAITING, ATTEMPTS), min_size=1, max_size=3),
    ),
    min_size=1,
    max_size=2,
)


def queued_types(world: World) -> list[str]:
    queued = set(world.store.tables.dequeueable())
    return sorted(
        {r["stage_type"] for r in world.store.tables.rows[QUEUE] if r["task_id"] in queued}
    )


def running(world: World) -> list[UUID]:
    return [r["id"] for r in world.store.tables.rows[TASKS] if r["status"] == "IN_PROGRESS"]


def held(world: World) -> list[UUID]:
    statuses = (StageStatus.CREATED, StageStatus.WAITING)
    return [r["id"] for r in world.store.tables.rows[STAGES] if r["status"] in statuses]


def step(world: World, kind: str, index: int, flag: bool) -> None:
    """One API command; most aim at something the command can act on, a few at anything."""
    if kind == "dequeue" and queued_types(world):
        dequeue(world, world.pick(queued_types(world), index))
    elif kind == "dequeue_any":
        dequeue(world, TYPES[index % len(TYPES)])
    elif kind in ("complete", "fail") and running(world):
        status = TaskStatus.COMPLETED if kind == "complete" else TaskStatus.FAILED
        report(world, world.tasks.index(world.pick(running(world), index)), status)
    elif kind == "report_any" and world.tasks:
        report(world, index, TaskStatus.COMPLETED if flag else TaskStatus.FAILED)
    elif kind in ("heartbeat", "give_back", "fenced_report") and running(world):
        task_index = world.tasks.index(world.pick(running(world), index))
        stale = index % 4 == 0
        if kind == "heartbeat":
            worker_call(world, task_index, stale, "heartbeat")
        elif kind == "give_back":
            worker_call(world, task_index, stale, "give_back", reason="shutting down")
        else:
            status = TaskStatus.COMPLETED if flag else TaskStatus.FAILED
            worker_call(world, task_index, stale, "report_task", status=status)
    elif kind == "fatal" and running(world):
        task_id = world.pick(running(world), index)
        world.jobnik.report_task(task_id, TaskStatus.FAILED, fatal=True)
    elif kind == "log" and world.tasks:
        task_id = world.pick(world.tasks, index)
        if world.row(TASKS, task_id) is not None:
            world.jobnik.append_log(task_id, ["line"] * (1 + flag))
    elif kind == "sweep":
        sweep(world)
    elif kind in ("pause", "resume", "abort"):
        target = {"pause": JobStatus.PAUSED, "resume": JobStatus.PENDING}.get(
            kind, JobStatus.ABORTED
        )
        job_status(world, index, target)
    elif kind == "release_held" and held(world):
        release(world, world.stages.index(world.pick(held(world), index)))
    elif kind == "release_any" and world.stages:
        release(world, index)
    elif kind == "append_stage":
        append_stage(world, index, TYPES[index % len(TYPES)], flag and index % 3 == 0)
    elif kind == "append_tasks" and world.stages:
        append_tasks(world, index, [1 + index % 3] * (1 + flag))
    elif kind == "priority":
        change_priority(world, index, list(Priority)[index % len(Priority)])
    elif kind == "delete":
        delete(world, index)


KINDS = (
    ["dequeue"] * 8 + ["complete"] * 6 + ["fail"] * 4 + ["pause"] * 2 + ["resume"] * 2
    + ["release_held"] * 2 + ["append_stage"] * 2 + ["append_tasks"] * 2
    + ["heartbeat", "give_back", "fenced_report", "fatal", "log", "sweep", "sweep"]
    + ["abort", "release_any", "priority", "delete", "report_any", "dequeue_any"]
)  # fmt: skip
STEPS = st.lists(st.tuples(st.sampled_from(KINDS), INDEX, st.booleans()), min_size=25, max_size=60)


# -- what must hold after every command ---------------------------------------------------------


def check(world: World) -> None:
    tables = world.store.tables
    rows = {t: {r["id"]: r for r in tables.rows[t]} for t in (JOBS, STAGES, TASKS)}

    history: dict[UUID, list[Any]] = {}
    for event in world.store.log:
        history.setdefault(event.originator_id, []).append(event)
    for table, by_id in rows.items():  # every row is its aggregate's latest snapshot
        for key in by_id:
            assert world.store.restored(table, key) == replay(history[key]), table

    for key, final in list(world.finals.items()):  # a final status never changes
        row = rows[JOBS].get(key) or rows[STAGES].get(key) or rows[TASKS].get(key)
        assert row is None or row["status"] == final
    for table, done in ((JOBS, JOB_FINAL), (STAGES, STAGE_FINAL), (TASKS, TASK_FINAL)):
        world.finals.update({k: r["status"] for k, r in rows[table].items() if r["status"] in done})

    tasks_of: dict[UUID, list[dict[str, Any]]] = {s: [] for s in rows[STAGES]}
    for task in rows[TASKS].values():
        tasks_of[task["stage_id"]].append(task)
        assert 0 <= task["attempts"] <= task["max_attempts"]
        assert task["attempts"] <= task["attempt"]  # every failure closed a dequeued attempt
        leased = task["lease_expires_at"] is not None
        assert leased == (task["status"] == TaskStatus.IN_PROGRESS)

    for stage_id, stage in rows[STAGES].items():  # summaries count the stage's tasks
        summary = tables.one(SUMMARIES, stage_id=stage_id)
        counts = Counter(t["status"].lower() for t in tasks_of[stage_id])
        assert {k: summary[k] for k in counts} == counts
        assert summary["total"] == len(tasks_of[stage_id]) == sum(counts.values())
        all_completed = bool(tasks_of[stage_id]) and set(counts) == {"completed"}
        if stage["status"] in (StageStatus.IN_PROGRESS, StageStatus.COMPLETED):
            assert all_completed == (stage["status"] == StageStatus.COMPLETED)  # R5
        if "failed" in counts:  # R7
            assert stage["status"] == StageStatus.FAILED
        if stage["status"] == StageStatus.FAILED:  # R8
            assert rows[JOBS][stage["job_id"]]["status"] == JobStatus.FAILED

    for job_id, job in rows[JOBS].items():
        stages = sorted(
            (s for s in rows[STAGES].values() if s["job_id"] == job_id),
            key=lambda s: s["stage_order"],
        )
        statuses = [s["status"] for s in stages]
        assert [s["stage_order"] for s in stages] == list(range(1, len(stages) + 1))
        assert job["stage_count"] == len(stages)
        assert job["completed_stages"] == statuses.count(StageStatus.COMPLETED)
        # percentage moves only when a stage completes, so a stage added later lowers nothing
        assert (job["percentage"] == 100) == (job["status"] == JobStatus.COMPLETED)
        all_done = bool(stages) and set(statuses) == {StageStatus.COMPLETED}
        assert all_done == (job["status"] == JobStatus.COMPLETED), statuses  # never wedged
        if job["status"] == JobStatus.PENDING:
            assert not job["started"]  # a started job resumes IN_PROGRESS
        assert sum(s in STAGE_DEQUEUEABLE for s in statuses) <= 1  # stages run one at a time
        if StageStatus.IN_PROGRESS in statuses:
            assert job["status"] in (JobStatus.IN_PROGRESS, JobStatus.PAUSED)
        if job["status"] == JobStatus.ABORTED:  # abort cascades
            assert set(statuses) <= STAGE_FINAL
            assert not any(
                t["status"] in TASK_QUEUED for t in rows[TASKS].values() if t["job_id"] == job_id
            )

    eligible = {
        key
        for key, task in rows[TASKS].items()
        if task["status"] in TASK_QUEUED
        and rows[STAGES][task["stage_id"]]["status"] in STAGE_DEQUEUEABLE
        and rows[JOBS][task["job_id"]]["status"] in JOB_DEQUEUEABLE
    }
    assert set(tables.dequeueable()) == eligible
    for entry in tables.rows[QUEUE]:
        assert entry["priority_rank"] == rows[JOBS][entry["job_id"]]["priority_rank"]


@settings(max_examples=150, deadline=None, database=None)
@given(plan=PLAN, steps=STEPS)
def test_any_sequence_of_api_commands_keeps_the_read_models_and_the_rules(
    plan: list[Any], steps: list[tuple[str, int, bool]]
) -> None:
    world = World()
    build(world, plan)
    check(world)

    for kind, index, flag in steps:
        step(world, kind, index, flag)
        check(world)
