"""`Worker(batch_size=N)` against a real server process, on both backends: batched claims and
reports, each task's outcome as the one-at-a-time worker would report it."""

from __future__ import annotations

import threading
import time
from typing import Any

from jobnik.workers import (
    Backoff,
    Consumer,
    Producer,
    Report,
    Task,
    TaskContext,
    Worker,
)

from .conftest import SpawnServer


def handle(task: Task, ctx: TaskContext) -> Any:
    n = task.data["n"]
    if n % 5 == 0 and task.attempt == 1:
        raise RuntimeError(f"{n}: a multiple of five fails its first attempt")
    return n * n if n % 2 else {"square": n * n}


def test_a_batching_worker_reports_every_outcome_as_a_single_report_would(
    database_url: str, spawn_server: SpawnServer
) -> None:
    server = spawn_server(database_url)
    producer = Producer(server.url)
    job = producer.create_job("batched", {})
    stage = producer.create_stage(job.id, "squares", {})
    producer.create_tasks(stage.id, [{"n": n} for n in range(1, 24)], max_attempts=2)
    worker = Worker(
        "squares",
        handle,
        base_url=server.url,
        concurrency=2,
        batch_size=4,
        backoff=Backoff(maximum=0.2),
    )
    thread = threading.Thread(target=worker.run, kwargs={"install_signal_handlers": False})
    thread.start()
    try:
        deadline = time.monotonic() + 60
        while producer.job(job.id).status != "COMPLETED":
            assert time.monotonic() < deadline, "the job did not complete"
            time.sleep(0.1)
    finally:
        worker.stop()
        thread.join(30)

    tasks = {t["data"]["n"]: t for t in producer.client.get(f"/v1/stages/{stage.id}/tasks")}
    assert {t["status"] for t in tasks.values()} == {"COMPLETED"}
    assert all(
        t["result"] == ({"value": n * n} if n % 2 else {"square": n * n}) for n, t in tasks.items()
    )
    assert {n for n, t in tasks.items() if t["attempt"] == 2} == {5, 10, 15, 20}
    assert (worker.stats.done, worker.stats.failed, worker.stats.refused) == (23, 4, 0)


def test_a_batched_report_answers_a_stale_item_without_failing_the_others(
    database_url: str, spawn_server: SpawnServer
) -> None:
    server = spawn_server(database_url)
    producer, consumer = Producer(server.url), Consumer(server.url)
    stage = producer.create_stage(producer.create_job("stale", {}).id, "sdk-batch", {})
    producer.create_tasks(stage.id, [{"n": n} for n in range(3)])

    a, b, c = consumer.dequeue_batch("sdk-batch", 5, lease_seconds=60)
    stale = Task(**{**a.__dict__, "attempt": 9})
    answers = consumer.report_batch(
        [
            Report(stale, "COMPLETED"),
            Report(b, "COMPLETED", result={"ok": 1}),
            Report(c, "FAILED", reason="no"),
        ]
    )

    assert [(r.ok, r.http_status, r.code) for r in answers] == [
        (False, 409, "STALE_ATTEMPT"),
        (True, 200, None),
        (True, 200, None),
    ]
    assert [r.status for r in answers[1:]] == ["COMPLETED", "RETRIED"]
    assert consumer.dequeue_batch("sdk-batch", 5)[0].id == c.id
    assert consumer.dequeue_batch("sdk-batch", 5) == []
