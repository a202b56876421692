"""Whatever a user sends is written as a parameter, never as SQL text: strings with quotes,
backslashes and any unicode, integers past 64 bits, nested JSON read back equal through every
write path (creation, dequeue, reports alone and batched, user metadata, log lines, reasons)."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobnik.api.main import app_from_env
from jobnik.domain.application import Jobnik, NewJob, NewStage, NewTask
from jobnik.domain.principals import Actor
from jobnik.domain.statuses import JobStatus, TaskStatus
from jobnik.domain.work import Report
from jobnik.projections.store.base import SqlStore

TEXT = st.text(alphabet=st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00"))
HOSTILE = st.sampled_from(["x'); DROP TABLE tasks_v1; --", "back\\slash\\'", "$$ $1 %(v)s %s"])
STRINGS = HOSTILE | TEXT
JSON = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**80), max_value=2**80) | STRINGS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(STRINGS, inner, max_size=4),
    max_leaves=20,
)
WIRE_JSON = st.recursive(  # (the gate refuses integers past 64 bits)
    st.none() | st.booleans() | st.integers(min_value=-(2**63), max_value=2**63 - 1) | STRINGS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(STRINGS, inner, max_size=4),
    max_leaves=20,
)
SLOW = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@SLOW
@given(
    name=STRINGS.filter(bool),
    data=st.dictionaries(STRINGS, JSON, max_size=5),
    result=st.dictionaries(STRINGS, JSON, max_size=3),
    lines=st.lists(STRINGS, min_size=1, max_size=3),
    reason=STRINGS,
)
def test_what_each_write_path_writes_reads_back_equal(
    store: SqlStore,
    name: str,
    data: dict[str, Any],
    result: dict[str, Any],
    lines: list[str],
    reason: str,
) -> None:
    app = Jobnik(store)
    job = app.create_job(NewJob(name=name, data=data, user_metadata={"nested": data}))
    stage = app.add_stage(job.id, NewStage(type=name, data=data))
    one, two, three, _ = app.add_tasks(stage.id, [NewTask(data=data) for _ in range(4)])
    task = app.dequeue(name, by=Actor.WORKER)  # (one task stays queued: the job goes on)
    app.append_log(task.id, lines, task.attempt)
    app.report_task(task.id, TaskStatus.COMPLETED, attempt=task.attempt, result=result)
    batch = app.dequeue_batch(name, 2)
    app.report_batch([Report(t.id, t.attempt, TaskStatus.COMPLETED, result=result) for t in batch])
    app.replace_task_user_metadata(one.id, data)
    app.set_job_status(job.id, JobStatus.ABORTED, reason=reason)

    with store.session(write=False) as s:
        loaded_job, loaded_stage = s.job(job.id), s.stage(stage.id)
        tasks = [s.task(t.id) for t in (one, two, three)]
    logged = [e for e in store.log_app.events.get(task.id) if hasattr(e, "lines")]
    aborted = list(store.log_app.events.get(job.id))[-1]

    assert (loaded_job.name, loaded_job.data, loaded_job.user_metadata) == (
        name,
        data,
        {"nested": data},
    )
    assert (loaded_stage.type, loaded_stage.data) == (name, data)
    assert [t.data for t in tasks] == [data] * 3
    assert [t.result for t in tasks] == [result] * 3
    assert tasks[0].user_metadata == data
    assert [list(e.lines) for e in logged] == [lines]
    assert getattr(aborted, "reason", None) == reason


@pytest.fixture(scope="module")
def http(pg_database_url: str) -> Any:
    app = app_from_env({"JOBNIK_DATABASE_URL": pg_database_url})
    with TestClient(app) as client:
        yield client


@SLOW
@given(
    data=st.dictionaries(STRINGS, WIRE_JSON, max_size=4),
    result=st.dictionaries(STRINGS, WIRE_JSON, max_size=4),
)
def test_values_sent_over_http_read_back_equal(
    http: TestClient, data: dict[str, Any], result: dict[str, Any]
) -> None:
    job = http.post("/v1/jobs", json={"name": "values", "data": data}).json()
    stage = http.post(f"/v1/jobs/{job['id']}/stage", json={"type": "values", "data": data}).json()
    http.post(f"/v1/stages/{stage['id']}/tasks", json=[{"data": data}])
    task = http.patch("/v1/stages/values/tasks/dequeue").json()
    done = http.put(
        f"/v1/tasks/{task['id']}/status",
        json={"status": "COMPLETED", "attempt": task["attempt"], "result": result},
    )

    assert done.status_code == 200, done.text
    assert http.get(f"/v1/jobs/{job['id']}").json()["data"] == data
    assert http.get(f"/v1/tasks/{task['id']}").json()["data"] == data
    assert http.get(f"/v1/tasks/{task['id']}").json()["result"] == result


def test_a_nul_is_refused_at_the_gate_and_nothing_is_written(http: TestClient) -> None:
    before = http.get("/v1/jobs", params={"page_size": 1}).json()["total"]

    answer = http.post("/v1/jobs", json={"name": "nul", "data": {"k": "a\x00b"}})

    assert answer.status_code == 400
    assert answer.json()["code"]
    assert http.get("/v1/jobs", params={"page_size": 1}).json()["total"] == before
