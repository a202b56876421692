from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import uuid4

import pytest
from eventsourcing.application import Application

from jobnik.domain.base import Entity
from jobnik.domain.principals import Actor, Principal
from jobnik.domain.statuses import TIMEOUT, JobStatus, Priority, StageStatus, TaskStatus

from ..builders import NOW, at, new_job, new_stage, new_task, replay, stage_in


@dataclass(frozen=True)
class Step:
    command: Callable[[Any, datetime], object]
    actor: Principal
    reasons: tuple[str | None, ...] = (None,)  # the reason of each event the command emits


@dataclass(frozen=True)
class Logged:
    event: Any
    now: datetime
    actor: str
    reason: str | None


@dataclass
class Run:
    aggregate: Entity
    log: list[Logged]
    states: list[tuple[int, dict[str, Any]]]  # (events so far, state) after each command

    @property
    def events(self) -> list[Any]:
        return [entry.event for entry in self.log]


def drive(aggregate: Entity, steps: list[Step]) -> Run:
    [created] = aggregate.collect_events()
    run = Run(
        aggregate, [Logged(created, NOW, "api", None)], [(1, copy.deepcopy(aggregate.state()))]
    )
    for minute, step in enumerate(steps, start=1):
        step.command(aggregate, at(minute))
        events = aggregate.collect_events()
        assert len(events) == len(step.reasons), step
        run.log += [
            Logged(e, at(minute), step.actor.name, r)
            for e, r in zip(events, step.reasons, strict=True)
        ]
        run.states.append((len(run.log), copy.deepcopy(aggregate.state())))
    return run


S1, S2, FAILING_TASK = uuid4(), uuid4(), uuid4()
API, WORKER, SYSTEM = Actor.API, Actor.WORKER, Actor.SYSTEM


def job_paused_resumed_completed_and_deleted() -> Run:
    return drive(
        new_job(),
        [
            Step(lambda j, now: j.append_stage(S1, now, API), API),
            Step(lambda j, now: j.append_stage(S2, now, API), API),
            Step(lambda j, now: j.start(now, SYSTEM), SYSTEM),
            Step(lambda j, now: j.request_status(JobStatus.PAUSED, now, "maintenance"), API,
                 ("maintenance",)),
            Step(lambda j, now: j.request_status(JobStatus.PENDING, now), API),
            Step(lambda j, now: j.change_priority(Priority.HIGH, now), API),
            Step(lambda j, now: j.replace_user_metadata({"seen": True}, now, WORKER), WORKER),
            Step(lambda j, now: j.stage_completed(S1, now, SYSTEM), SYSTEM),
            Step(lambda j, now: j.stage_completed(S2, now, SYSTEM), SYSTEM,
                 (None, "all stages completed")),
            Step(lambda j, now: j.delete(now), API),
        ],
    )  # fmt: skip


def job_aborted_while_pending() -> Run:
    return drive(
        new_job(Priority.VERY_LOW),
        [
            Step(lambda j, now: j.append_stage(S1, now, API), API),
            Step(lambda j, now: j.request_status(JobStatus.ABORTED, now, "not needed"), API,
                 ("not needed",)),
        ],
    )  # fmt: skip


def job_failed_by_a_stage() -> Run:
    return drive(
        new_job(),
        [
            Step(lambda j, now: j.append_stage(S1, now, API), API),
            Step(lambda j, now: j.start(now, SYSTEM), SYSTEM),
            Step(lambda j, now: j.stage_failed(S1, now, SYSTEM), SYSTEM, ("a stage failed",)),
        ],
    )


def stage_waiting_released_then_failed() -> Run:
    previous = stage_in(StageStatus.COMPLETED)
    return drive(
        new_stage(order=2, start_as_waiting=True),
        [
            Step(lambda s, now: s.replace_user_metadata({"gate": "ok"}, now, API), API),
            Step(lambda s, now: s.release(previous, now, API), API, ("released by user",)),
            Step(lambda s, now: s.start(now, SYSTEM), SYSTEM),
            Step(lambda s, now: s.fail(FAILING_TASK, now, SYSTEM), SYSTEM, ("a task failed",)),
        ],
    )


def stage_created_released_then_completed() -> Run:
    return drive(
        new_stage(order=2),
        [
            Step(lambda s, now: s.release_after_previous(now, SYSTEM), SYSTEM,
                 ("previous stage completed",)),
            Step(lambda s, now: s.start(now, SYSTEM), SYSTEM),
            Step(lambda s, now: s.complete(now, SYSTEM), SYSTEM, ("all tasks completed",)),
        ],
    )  # fmt: skip


def stage_aborted() -> Run:
    return drive(
        new_stage(),
        [
            Step(lambda s, now: s.start(now, SYSTEM), SYSTEM),
            Step(lambda s, now: s.abort(now, SYSTEM, "job aborted"), SYSTEM, ("job aborted",)),
        ],
    )


def task_retried_then_completed() -> Run:
    return drive(
        new_task(max_attempts=3),
        [
            Step(lambda t, now: t.dequeue(now, WORKER), WORKER),
            Step(lambda t, now: t.report(TaskStatus.FAILED, now, WORKER, "disk full"), WORKER,
                 ("disk full",)),
            Step(lambda t, now: t.dequeue(now, WORKER), WORKER),
            Step(lambda t, now: t.replace_user_metadata({"retry": 1}, now, API), API),
            Step(lambda t, now: t.report(TaskStatus.COMPLETED, now, WORKER), WORKER),
        ],
    )  # fmt: skip


def task_failed_for_good() -> Run:
    return drive(
        new_task(max_attempts=2),
        [
            Step(lambda t, now: t.dequeue(now, WORKER), WORKER),
            Step(lambda t, now: t.fail(now, SYSTEM, "lease expired"), SYSTEM, ("lease expired",)),
            Step(lambda t, now: t.dequeue(now, WORKER), WORKER),
            Step(lambda t, now: t.fail(now, WORKER), WORKER),
        ],
    )


def task_leased_logged_handed_back_then_failed_fatally() -> Run:
    return drive(
        new_task(max_attempts=3),
        [
            Step(lambda t, now: t.dequeue(now, WORKER, lease_seconds=60), WORKER),
            Step(lambda t, now: t.extend_lease(now, WORKER), WORKER),
            Step(lambda t, now: t.append_log(["tile 1/3", "tile 2/3"], now, WORKER), WORKER),
            Step(lambda t, now: t.refuse(0, "heartbeat", now, WORKER), WORKER,
                 ("attempt is no longer current",)),
            Step(lambda t, now: t.give_back(now, WORKER, "shutting down"), WORKER,
                 ("shutting down",)),
            Step(lambda t, now: t.dequeue(now, WORKER), WORKER),
            Step(lambda t, now: t.report(TaskStatus.FAILED, now, WORKER, "corrupt", fatal=True),
                 WORKER, ("corrupt",)),
        ],
    )  # fmt: skip


def task_timed_out_by_the_sweeper() -> Run:
    return drive(
        new_task(max_attempts=2),
        [
            Step(lambda t, now: t.dequeue(now, WORKER, lease_seconds=1), WORKER),
            Step(lambda t, now: t.fail(now, SYSTEM, "lease expired", cause=TIMEOUT), SYSTEM,
                 ("lease expired",)),
            Step(lambda t, now: t.dequeue(now, WORKER, lease_seconds=1), WORKER),
            Step(lambda t, now: t.fail(now, SYSTEM, "lease expired", cause=TIMEOUT), SYSTEM,
                 ("lease expired",)),
        ],
    )  # fmt: skip


def task_aborted_with_a_late_report() -> Run:
    return drive(
        new_task(),
        [
            Step(lambda t, now: t.dequeue(now, WORKER), WORKER),
            Step(lambda t, now: t.abort(now, WORKER, "late report", TaskStatus.COMPLETED), WORKER,
                 ("late report",)),
        ],
    )  # fmt: skip


RUNS = [
    job_paused_resumed_completed_and_deleted,
    job_aborted_while_pending,
    job_failed_by_a_stage,
    stage_waiting_released_then_failed,
    stage_created_released_then_completed,
    stage_aborted,
    task_retried_then_completed,
    task_failed_for_good,
    task_aborted_with_a_late_report,
    task_leased_logged_handed_back_then_failed_fatally,
    task_timed_out_by_the_sweeper,
]


@pytest.fixture(params=RUNS, ids=lambda f: f.__name__)
def run(request: pytest.FixtureRequest) -> Run:
    return request.param()  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def library() -> Iterator[Application[Any]]:
    app: Application[Any] = Application(env={"PERSISTENCE_MODULE": "eventsourcing.popo"})
    yield app
    app.close()


def test_replaying_the_events_rebuilds_the_aggregate(run: Run) -> None:
    original = run.aggregate

    replayed = replay(run.events)

    assert replayed.state() == original.state()
    assert (replayed.id, replayed.version) == (original.id, original.version)
    assert (replayed.created_on, replayed.modified_on) == (
        original.created_on,
        original.modified_on,
    )
    assert replayed == original


def test_replaying_up_to_any_command_gives_the_state_after_that_command(run: Run) -> None:
    for count, state in run.states:
        replayed = replay(run.events[:count])

        assert replayed.state() == state
        assert replayed.version == count
        assert replayed.modified_on == run.log[count - 1].now


def test_a_restored_snapshot_equals_the_replayed_aggregate(run: Run) -> None:
    replayed = replay(run.events)

    restored = type(replayed).restore(
        replayed.id, replayed.version, replayed.created_on, replayed.modified_on, replayed.state()
    )

    assert restored == replayed
    assert restored.collect_events() == []


def test_every_event_records_its_actor_reason_and_the_commands_clock(run: Run) -> None:
    for entry in run.log:
        event = entry.event

        assert (event.actor, event.reason) == (entry.actor, entry.reason)
        assert event.timestamp == entry.now
        assert event.originator_id == run.aggregate.id


def test_the_aggregate_is_created_at_the_commands_clock(run: Run) -> None:
    assert run.aggregate.created_on == NOW
    assert run.aggregate.modified_on == run.log[-1].now


def test_events_survive_the_library_mappers_round_trip(run: Run, library: Application[Any]) -> None:
    round_tripped = [
        library.mapper.to_domain_event(library.mapper.to_stored_event(e)) for e in run.events
    ]

    assert round_tripped == run.events
    assert [type(e) for e in round_tripped] == [type(e) for e in run.events]
    assert replay(round_tripped) == run.aggregate


def test_the_stored_topic_names_the_event_class(run: Run, library: Application[Any]) -> None:
    for event in run.events:
        stored = library.mapper.to_stored_event(event)

        module = type(run.aggregate).__module__
        assert stored.topic == f"{module}:{type(event).__qualname__}"
