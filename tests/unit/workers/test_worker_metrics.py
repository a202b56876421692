from __future__ import annotations

import io
import json
import threading
import time
import urllib.request
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from jobnik.workers import FatalTaskError, Task, TaskContext, Worker
from jobnik.workers.cli import run_worker

from .fake_api import FakeApi, task_json
from .test_worker_loop import TIMEOUT, make_worker, running, wait_until


def sample(worker: Worker, name: str, **labels: str) -> float:
    value = worker.metrics.registry.get_sample_value(name, {"stage_type": "tiles", **labels})
    assert value is not None, f"no sample {name} {labels}"
    return value


def test_outcomes_are_counted_by_kind_and_the_handler_time_by_outcome() -> None:
    fake = FakeApi()
    fake.add(task_json(1), task_json(2), task_json(3), task_json(4))
    fake.refuse_reports_of.add(task_json(4)["id"])

    def handler(task: Task, context: TaskContext) -> None:
        n = task.data["n"]
        if n == 2:
            raise ValueError("bad tile")
        if n == 3:
            raise FatalTaskError("never again")

    worker = make_worker(fake, handler)

    with running(worker):
        wait_until(lambda: len(fake.reports) == 4)

    assert sample(worker, "jobnik_sdk_worker_tasks_completed_total") == 1
    assert sample(worker, "jobnik_sdk_worker_tasks_failed_total", error_type="handler_error") == 1
    assert sample(worker, "jobnik_sdk_worker_tasks_failed_total", error_type="fatal") == 1
    assert sample(worker, "jobnik_sdk_worker_tasks_failed_total", error_type="api_error") == 1
    handled = {
        outcome: sample(worker, "jobnik_worker_tasks_handled_total", outcome=outcome)
        for outcome in ("completed", "failed", "refused", "delegated", "cancelled")
    }
    assert handled == {"completed": 1, "failed": 2, "refused": 1, "delegated": 0, "cancelled": 0}
    durations = "jobnik_sdk_worker_task_duration_seconds_count"
    assert sample(worker, durations, status="completed") == 2  # (the refused one ran too)
    assert sample(worker, durations, status="failed") == 2
    assert sample(worker, "jobnik_sdk_worker_tasks_active") == 0


def test_tasks_in_flight_are_a_gauge_while_handlers_run() -> None:
    fake = FakeApi()
    fake.add(task_json(1), task_json(2))
    release = threading.Event()
    worker = make_worker(fake, lambda task, context: release.wait(TIMEOUT), concurrency=2)

    with running(worker):
        wait_until(lambda: worker.stats.running == 2)
        in_flight = sample(worker, "jobnik_sdk_worker_tasks_active")
        release.set()
        wait_until(lambda: len(fake.reports) == 2)

    assert in_flight == 2
    assert sample(worker, "jobnik_sdk_worker_tasks_active") == 0


def test_heartbeats_are_counted_sent_and_failed() -> None:
    fake = FakeApi()
    fake.add(task_json(1))
    beaten = threading.Event()

    def handler(task: Task, context: TaskContext) -> None:
        wait_until(lambda: len(fake.heartbeats) >= 2)
        fake.heartbeat_status = 409
        context.wait_cancelled(TIMEOUT)
        beaten.set()

    worker = make_worker(fake, handler, heartbeat_interval=0.05)

    with running(worker):
        wait_until(beaten.is_set)

    sent = sample(worker, "jobnik_worker_heartbeats_sent_total")
    failed = sample(worker, "jobnik_worker_heartbeats_failed_total")
    assert sent >= 2
    assert failed >= 1
    assert sent + failed == len(fake.heartbeats)


def test_dequeues_are_timed_by_answer_and_every_request_by_method_and_status() -> None:
    fake = FakeApi(failing_dequeues=1)
    fake.add(task_json(1))
    worker = make_worker(fake, lambda task, context: None)

    with running(worker):
        wait_until(lambda: len(fake.reports) == 1 and len(fake.dequeues) >= 3)

    dequeues = "jobnik_sdk_consumer_dequeue_duration_seconds_count"
    assert sample(worker, dequeues, status="error") == 1
    assert sample(worker, dequeues, status="success") == 1
    assert sample(worker, dequeues, status="not_found") >= 1
    registry = worker.metrics.registry
    http = "jobnik_sdk_http_request_duration_seconds_count"
    put = {"method": "PUT", "status_code": "200", "retried": "false"}
    failed_patch = {"method": "PATCH", "status_code": "500", "retried": "false"}
    assert registry.get_sample_value(http, put) == 1
    assert registry.get_sample_value(http, failed_patch) == 1


def test_the_last_poll_age_counts_from_the_last_answered_dequeue() -> None:
    fake = FakeApi(failing_dequeues=10**6)  # every dequeue fails: no poll ever succeeds
    worker = make_worker(fake, lambda task, context: None)

    with running(worker):
        wait_until(lambda: len(fake.dequeues) >= 3)
        time.sleep(0.2)
        failing_age = sample(worker, "jobnik_worker_last_poll_age_seconds")
        fake.failing_dequeues = 0
        wait_until(lambda: sample(worker, "jobnik_worker_last_poll_age_seconds") < 0.1)

    assert failing_age >= 0.2


def complete(task: Task, context: TaskContext) -> None:
    return None


def test_the_worker_cli_serves_its_metrics_on_the_metrics_port() -> None:
    fake = FakeApi()
    fake.add(task_json(1))
    out = io.StringIO()
    made: list[Worker] = []

    def make(*args: Any, **kwargs: Any) -> Worker:
        kwargs.pop("base_url")
        made.append(Worker(*args, client=fake.client(), **kwargs))
        return made[0]

    thread = threading.Thread(
        target=run_worker,
        args=(f"{__name__}:complete", "tiles", "http://unused"),
        kwargs={"out": out, "make_worker": make, "metrics_port": 0, "env": {}},
    )
    thread.start()
    try:
        wait_until(lambda: len(fake.reports) == 1 and "metrics_served" in out.getvalue())
        line = next(ln for ln in out.getvalue().splitlines() if "metrics_served" in ln)
        port = json.loads(line)["port"]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
            text = answer.read().decode()
    finally:
        made[0].stop()
        thread.join(TIMEOUT)

    families = {f.name: f for f in text_string_to_metric_families(text)}
    completed = families["jobnik_sdk_worker_tasks_completed"].samples
    assert [(s.labels, s.value) for s in completed if s.name.endswith("_total")] == [
        ({"stage_type": "tiles"}, 1.0)
    ]
    assert "jobnik_worker_last_poll_age_seconds" in families
