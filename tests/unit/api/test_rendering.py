"""The worker routes render their answers from rows (`OutModel.rendered`): the bytes must be the
models' own, for any task and any outcome."""

from __future__ import annotations

from datetime import UTC, datetime
from uuid import uuid4

from hypothesis import given, settings
from hypothesis import strategies as st

from jobnik.api.batch_schemas import ReportAnswer, tasks_response
from jobnik.api.schemas import TaskOut
from jobnik.domain.batches import Outcome
from jobnik.domain.errors import IllegalTransition, JobnikError, StaleAttempt, TaskNotFound
from jobnik.domain.principals import Actor
from jobnik.domain.statuses import TaskStatus
from jobnik.domain.tasks import Task

from ..builders import TRACE

# JSON values as a payload may hold them, integers beyond 64 bits included (orjson refuses
# those: the models render them).
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=2**63 - 2, max_value=2**64 + 2)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=8,
)
PAYLOADS = st.dictionaries(st.text(), VALUES, max_size=4)
TIMES = st.datetimes(
    min_value=datetime(1970, 1, 2), max_value=datetime(9000, 1, 1), timezones=st.just(UTC)
)


@st.composite
def tasks(draw: st.DrawFn) -> Task:
    created = draw(TIMES)
    task = Task.create(
        stage_id=uuid4(),
        job_id=uuid4(),
        stage_type="tiles",
        data=draw(PAYLOADS),
        user_metadata=draw(PAYLOADS),
        max_attempts=draw(st.integers(1, 5)),
        traceparent=TRACE,
        tracestate=draw(st.none() | st.just("vendor=1")),
        now=created,
    )
    step = draw(st.sampled_from(["pending", "dequeued", "completed", "failed"]))
    if step != "pending":
        task.dequeue(created, Actor.WORKER, lease_seconds=draw(st.integers(1, 10**6)))
    if step == "completed":
        task.complete(created, Actor.WORKER, result=draw(st.none() | PAYLOADS))
    elif step == "failed":
        task.fail(created, Actor.WORKER, "broke")
    return task


def _models_json(models: list[TaskOut] | list[ReportAnswer]) -> bytes:
    return f"[{','.join(m.model_dump_json(by_alias=True) for m in models)}]".encode()


@settings(max_examples=150, deadline=None)
@given(st.lists(tasks(), max_size=4))
def test_tasks_render_as_their_models_do(found: list[Task]) -> None:
    assert tasks_response(found).body == _models_json([TaskOut.of(t) for t in found])
    for task in found:
        assert TaskOut.response_of(task).body == TaskOut.of(task).response().body


ERRORS: list[JobnikError] = [
    StaleAttempt("attempt 1 is not the current attempt (2)"),
    IllegalTransition("COMPLETED -> COMPLETED"),
    TaskNotFound("Task not found: ünïcode \u2028 </script>"),
]


@given(st.lists(tasks(), max_size=4), st.lists(st.sampled_from(ERRORS), max_size=3))
def test_report_answers_render_as_their_models_do(
    found: list[Task], errors: list[JobnikError]
) -> None:
    outcomes = [Outcome(t.id, task=t) for t in found] + [Outcome(uuid4(), error=e) for e in errors]
    rows = [ReportAnswer.row(o) for o in outcomes]
    answers = [ReportAnswer.of(o) for o in outcomes]
    assert ReportAnswer.rendered(rows).body == _models_json(answers)
    assert [a.ok for a in answers] == [True] * len(found) + [False] * len(errors)
    assert {a.status for a in answers[: len(found)]} <= set(TaskStatus)
