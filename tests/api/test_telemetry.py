"""GET /metrics, the request log line and the spans of requests and commands, in process."""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from prometheus_client.parser import text_string_to_metric_families
from pythonjsonlogger.json import JsonFormatter

from jobnik.api.main import app_from_env, create_app
from jobnik.api.telemetry import Telemetry
from jobnik.api.telemetry.logs import JSON_FIELDS
from jobnik.api.telemetry.metrics import ServerMetrics
from jobnik.domain.application import Jobnik
from jobnik.projections.queries.views import Views
from jobnik.projections.store.base import SqlStore

from .conftest import OTHER_TRACE, TRACE, Api, Secured

DURATION = "http_request_duration_seconds"


Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(client: TestClient) -> Samples:
    answer = client.get("/metrics")
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/plain")
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(answer.text)
        for s in family.samples
    }


def requests_counted(samples: Samples, **labels: str) -> float:
    return samples.get((DURATION + "_count", tuple(sorted(labels.items()))), 0.0)


# -- metrics ------------------------------------------------------------------------------------


def test_requests_are_counted_by_route_template_method_and_status(client: TestClient) -> None:
    missing = str(uuid.uuid4())
    before = scrape(client)

    client.get(f"/v1/jobs/{missing}")
    client.get(f"/v1/jobs/{missing}")
    client.post("/v1/jobs", json={"name": "nightly", "data": {}})
    client.get("/no/such/route")
    after = scrape(client)

    def delta(**labels: str) -> float:
        return requests_counted(after, **labels) - requests_counted(before, **labels)

    assert delta(method="GET", path="/v1/jobs/{jobId}", status_code="404") == 2
    assert delta(method="POST", path="/v1/jobs", status_code="201") == 1
    assert delta(method="GET", path="unmatched", status_code="404") == 1
    assert delta(method="GET", path="/metrics", status_code="200") == 1  # the first scrape
    assert not any(missing in str(key) or "/no/such" in str(key) for key in after)


def test_the_latency_histogram_has_buckets_and_a_sum(client: TestClient) -> None:
    client.get("/liveness")

    samples = scrape(client)

    labels = (("method", "GET"), ("path", "/liveness"), ("status_code", "200"))
    count = samples[(DURATION + "_count", labels)]
    assert samples[(DURATION + "_bucket", (("le", "+Inf"), *labels))] == count
    assert samples[(DURATION + "_sum", labels)] > 0


def test_a_scrape_sees_itself_in_flight_and_the_process_metrics(client: TestClient) -> None:
    samples = scrape(client)

    assert samples[("http_requests_in_flight", ())] == 1
    assert samples[("process_cpu_seconds_total", ())] > 0
    assert samples[("process_resident_memory_bytes", ())] > 0


def test_openmetrics_is_served_when_asked_for(client: TestClient) -> None:
    answer = client.get("/metrics", headers={"Accept": "application/openmetrics-text"})

    assert answer.headers["content-type"].startswith("application/openmetrics-text")
    assert answer.text.endswith("# EOF\n")


def test_metrics_switched_off_serve_no_metrics_and_record_nothing(database_url: str) -> None:
    app = app_from_env({"JOBNIK_DATABASE_URL": database_url, "JOBNIK_METRICS": "false"})
    recorded = ServerMetrics().registry  # this process's own samples, read directly
    labels = {"method": "GET", "path": "/liveness", "status_code": "200"}
    before = recorded.get_sample_value(DURATION + "_count", labels) or 0.0

    with TestClient(app) as client:
        answer = client.get("/metrics")
        client.get("/liveness")

    assert answer.status_code == 404
    assert (recorded.get_sample_value(DURATION + "_count", labels) or 0.0) == before


# -- the request log line -------------------------------------------------------------------------


def access_lines(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "jobnik.access"]


def test_each_request_logs_one_line_with_its_id_route_status_and_ids(
    api: Api, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="jobnik.access")
    stage_type = api.new_type()
    job = api.create_job()
    stage = api.add_stage(job["id"], stage_type)
    api.add_tasks(stage["id"], 2)
    caplog.clear()

    answer = api.http.patch(f"/v1/stages/{stage_type}/tasks/dequeue")

    (line,) = access_lines(caplog)
    task = answer.json()
    fields = {k: getattr(line, k, None) for k in ("request_id", "method", "route", "status")}
    assert fields == {
        "request_id": answer.headers["X-Request-Id"],
        "method": "PATCH",
        "route": "/v1/stages/{stageType}/tasks/dequeue",
        "status": 200,
    }
    ids = {k: getattr(line, k, None) for k in ("job_id", "stage_id", "task_id", "stage_type")}
    assert ids == {
        "job_id": job["id"],
        "stage_id": stage["id"],
        "task_id": task["id"],
        "stage_type": stage_type,
    }
    assert line.duration_ms > 0  # type: ignore[attr-defined]


def test_a_creating_request_logs_the_ids_it_created(
    api: Api, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="jobnik.access")

    job = api.create_job()
    stage = api.add_stage(job["id"])
    api.add_tasks(stage["id"], 3)

    lines = access_lines(caplog)
    assert [line.route for line in lines] == [  # type: ignore[attr-defined]
        "/v1/jobs",
        "/v1/jobs/{jobId}/stage",
        "/v1/stages/{stageId}/tasks",
    ]
    assert lines[0].job_id == job["id"]  # type: ignore[attr-defined]
    assert lines[1].stage_id == stage["id"]  # type: ignore[attr-defined]
    assert (lines[2].job_id, lines[2].task_count) == (job["id"], "3")  # type: ignore[attr-defined]


def test_log_lines_hold_no_secrets_and_no_bodies(
    client: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="jobnik.access")
    secret, payload = "s3cret-token-value", "hunter2-payload"

    client.post(
        "/v1/jobs?token=q-secret-value",
        json={"name": "nightly", "data": {"password": payload}},
        headers={"Authorization": f"Bearer {secret}", "Cookie": f"session={secret}"},
    )
    client.post(
        "/v1/jobs",
        json={"name": "nightly", "data": {"password": payload}},
        headers={"Authorization": f"Bearer {secret}"},
    )

    (refused, created) = access_lines(caplog)
    formatter = JsonFormatter(JSON_FIELDS)
    written = formatter.format(refused) + formatter.format(created)
    assert (refused.status, created.status) == (400, 201)  # type: ignore[attr-defined]
    for leak in (secret, payload, "q-secret-value", "password"):
        assert leak not in written
    assert json.loads(formatter.format(created))["route"] == "/v1/jobs"


def test_with_access_control_a_line_names_the_token_and_a_scrape_needs_one(
    secured: Secured, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="jobnik.access")
    bearer = secured.bearers["reader"]

    listed = secured.call(bearer, "GET", "/v1/jobs")
    anonymous = secured.anonymous("GET", "/metrics")
    scraped = secured.call(bearer, "GET", "/metrics")

    lines = access_lines(caplog)
    written = "".join(JsonFormatter(JSON_FIELDS).format(line) for line in lines)
    assert (listed.status_code, anonymous.status_code, scraped.status_code) == (200, 401, 200)
    assert lines[0].principal == "the-reader"  # type: ignore[attr-defined]
    assert bearer.split(".", 1)[1] not in written


def test_scrapes_are_not_logged(client: TestClient, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="jobnik.access")

    client.get("/metrics")
    client.get("/liveness")

    assert [line.route for line in access_lines(caplog)] == ["/liveness"]  # type: ignore[attr-defined]


# -- spans --------------------------------------------------------------------------------------


@pytest.fixture
def traced(store: SqlStore) -> Iterator[tuple[Api, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    app = create_app(Jobnik(store), Views(store), telemetry=Telemetry(provider=provider))
    with TestClient(app) as client:
        yield Api(client), exporter


def named(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name == name]


def trace_id_of(traceparent: str) -> int:
    return int(traceparent.split("-")[1], 16)


def test_a_command_span_sits_under_its_request_span_with_the_jobs_attributes(
    traced: tuple[Api, InMemorySpanExporter],
) -> None:
    api, exporter = traced

    answer = api.http.post(
        "/v1/jobs",
        json={"name": "nightly", "data": {}, "priority": "HIGH"},
        headers={"traceparent": TRACE},
    )

    (request,) = named(exporter, "POST /v1/jobs")
    (command,) = named(exporter, "jobnik.create_job")
    assert request.context is not None
    assert command.context is not None
    assert request.context.trace_id == command.context.trace_id == trace_id_of(TRACE)
    assert command.parent is not None
    assert command.parent.span_id == request.context.span_id
    assert request.attributes is not None
    assert request.attributes["http.route"] == "/v1/jobs"
    assert dict(command.attributes or {}) == {
        "jobnik.job.id": answer.json()["id"],
        "jobnik.job.name": "nightly",
        "jobnik.job.priority": "HIGH",
        "jobnik.job.status": "PENDING",
    }


def test_created_tasks_store_the_request_span_as_their_traceparent(
    traced: tuple[Api, InMemorySpanExporter],
) -> None:
    api, exporter = traced
    job = api.create_job()
    stage = api.add_stage(job["id"])

    answer = api.http.post(
        f"/v1/stages/{stage['id']}/tasks", json=[{"data": {}}], headers={"traceparent": TRACE}
    )

    (request,) = named(exporter, "POST /v1/stages/{stageId}/tasks")
    (command,) = named(exporter, "jobnik.add_tasks")
    stored = answer.json()[0]["traceparent"]
    assert request.context is not None
    assert stored == f"00-{request.context.trace_id:032x}-{request.context.span_id:016x}-01"
    assert trace_id_of(stored) == trace_id_of(TRACE)
    assert (command.attributes or {})["jobnik.task.count"] == 1


def test_a_dequeue_span_links_to_the_tasks_trace_and_a_report_names_the_task(
    traced: tuple[Api, InMemorySpanExporter],
) -> None:
    api, exporter = traced
    stage_type = api.new_type()
    stage = api.add_stage(api.create_job()["id"], stage_type)
    (created,) = api.add_tasks(stage["id"], 1, traceparent=TRACE)

    task = api.dequeue(stage_type)
    api.report(task["id"], "COMPLETED")

    (dequeue,) = named(exporter, "jobnik.dequeue")
    (report,) = named(exporter, "jobnik.report_task")
    assert [link.context.trace_id for link in dequeue.links] == [trace_id_of(TRACE)]
    assert (dequeue.attributes or {})["jobnik.task.status"] == "IN_PROGRESS"
    assert dict(report.attributes or {}) == {
        "jobnik.job.id": stage["jobId"],
        "jobnik.stage.id": stage["id"],
        "jobnik.stage.type": stage_type,
        "jobnik.task.id": created["id"],
        "jobnik.task.status": "COMPLETED",
        "jobnik.task.attempts": 0,
    }


def test_a_batched_dequeue_span_links_to_each_tasks_trace(
    traced: tuple[Api, InMemorySpanExporter],
) -> None:
    api, exporter = traced
    stage_type = api.new_type()
    stage = api.add_stage(api.create_job()["id"], stage_type)
    api.add_tasks(stage["id"], 1, traceparent=TRACE)
    api.add_tasks(stage["id"], 1, traceparent=OTHER_TRACE)

    api.http.patch(f"/v1/stages/{stage_type}/tasks/dequeue", params={"count": 5})

    (dequeue,) = named(exporter, "jobnik.dequeue_batch")
    assert [link.context.trace_id for link in dequeue.links] == [
        trace_id_of(TRACE),
        trace_id_of(OTHER_TRACE),
    ]
    assert (dequeue.attributes or {})["jobnik.task.count"] == 2


def test_a_refused_command_span_names_the_refusal_and_the_id_it_was_given(
    traced: tuple[Api, InMemorySpanExporter],
) -> None:
    api, exporter = traced
    missing = str(uuid.uuid4())

    answer = api.http.put(f"/v1/tasks/{missing}/status", json={"status": "COMPLETED"})

    (command,) = named(exporter, "jobnik.report_task")
    assert answer.status_code == 404
    assert (command.attributes or {})["jobnik.task.id"] == missing
    assert (command.attributes or {})["error.type"] == "TASK_NOT_FOUND"
    assert [e.name for e in command.events] == ["exception"]
    assert command.status.status_code is StatusCode.UNSET  # a 4xx answer, no server fault


def test_every_event_names_the_trace_of_the_request_that_caused_it(api: Api) -> None:
    stage_type = api.new_type()
    job = api.create_job()
    stage = api.add_stage(job["id"], stage_type)
    api.add_tasks(stage["id"])
    task = api.dequeue(stage_type)

    api.http.put(
        f"/v1/tasks/{task['id']}/status",
        json={"status": "COMPLETED"},
        headers={"traceparent": TRACE},
    )

    items = api.http.get(f"/v1/jobs/{job['id']}/history").json()["items"]
    traces = {e["type"]: e.get("traceId") for e in items}
    caller = TRACE.split("-")[1]
    assert traces["JobCreated"] is None  # a request without trace context
    assert traces["TaskDequeued"] is None
    assert traces["TaskCompleted"] == caller
    assert traces["StageCompleted"] == caller  # the cascade it caused
    assert traces["JobCompleted"] == caller
    assert {e["actor"] for e in items if e["type"] == "JobCompleted"} == {"system"}


def test_a_traced_server_records_its_request_spans_trace_on_the_events(
    traced: tuple[Api, InMemorySpanExporter],
) -> None:
    api, exporter = traced

    job = api.create_job()

    (request,) = named(exporter, "POST /v1/jobs")
    assert request.context is not None
    (created,) = api.http.get(f"/v1/jobs/{job['id']}/history").json()["items"]
    assert created["traceId"] == f"{request.context.trace_id:032x}"


def history_trace_ids(api: Api, job_id: str) -> dict[str, str | None]:
    r = api.http.get(f"/v1/jobs/{job_id}/history")
    assert r.status_code == 200, r.text
    return {item["type"]: item["traceId"] for item in r.json()["items"]}


def test_every_event_records_the_trace_of_the_request_that_caused_it(
    traced: tuple[Api, InMemorySpanExporter],
) -> None:
    api, exporter = traced
    job = api.http.post(
        "/v1/jobs", json={"name": "nightly", "data": {}}, headers={"traceparent": TRACE}
    ).json()
    api.add_stage(job["id"])  # a request without a traceparent: a trace of its own

    (created,) = named(exporter, "POST /v1/jobs")
    (added,) = named(exporter, "POST /v1/jobs/{jobId}/stage")
    assert created.context is not None
    assert added.context is not None
    assert history_trace_ids(api, job["id"]) == {
        "JobCreated": f"{created.context.trace_id:032x}",
        "StageAppended": f"{added.context.trace_id:032x}",
        "StageAdded": f"{added.context.trace_id:032x}",
    }
    assert f"{created.context.trace_id:032x}" == TRACE.split("-")[1]


def test_without_tracing_events_record_the_callers_trace_or_none(api: Api) -> None:
    with_trace = api.http.post(
        "/v1/jobs", json={"name": "nightly", "data": {}}, headers={"traceparent": TRACE}
    ).json()
    zeros = "00-" + "0" * 32 + "-" + "0" * 16 + "-00"
    untraced = api.http.post(
        "/v1/jobs", json={"name": "nightly", "data": {}}, headers={"traceparent": zeros}
    ).json()
    plain = api.create_job()

    assert history_trace_ids(api, with_trace["id"]) == {"JobCreated": TRACE.split("-")[1]}
    assert history_trace_ids(api, untraced["id"]) == {"JobCreated": None}
    assert history_trace_ids(api, plain["id"]) == {"JobCreated": None}
