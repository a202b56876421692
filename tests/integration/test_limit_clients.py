"""Concurrency limits through live servers: 8 SDK workers over HTTP (on PostgreSQL, against two
server processes) never hold more tasks of a limited type than its limit, nor of a key than its
per-key limit; the SDK's Producer and `jobnik limits` set, list and remove them."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from typer.testing import CliRunner

from jobnik.scripts.cli import app
from jobnik.workers import ApiError, Consumer, Producer

from .threads import in_threads


def test_the_sdk_and_the_command_line_set_list_and_remove_a_limit(
    database_url: str, spawn_server: Callable[..., Any]
) -> None:
    server = spawn_server(database_url)
    producer = Producer(server.url)
    made = producer.set_limit("render farm", 3, reason="three licences")
    assert (made.stage_type, made.max_in_progress, made.room) == ("render farm", 3, 3)
    assert producer.limit("render farm").reason == "three licences"

    cli = CliRunner()
    url = ["--api-url", server.url]
    changed = cli.invoke(app, ["limits", "set", "encode", "2", "--reason", "cpu", *url])
    assert changed.exit_code == 0, changed.output
    listed = cli.invoke(app, ["limits", "list", *url])
    assert listed.exit_code == 0, listed.output
    assert "encode  0/2  by api  (cpu)" in listed.output
    assert "render farm  0/3" in listed.output
    rated = cli.invoke(app, ["limits", "rate", "encode", "5", "--per", "1m", *url])
    assert rated.exit_code == 0, rated.output
    assert "encode  0/2  5 per 60 s (5 left)" in rated.output
    assert producer.limit("encode").rate_tokens == 5
    unrated = cli.invoke(app, ["limits", "unrate", "encode", *url])
    assert unrated.exit_code == 0, unrated.output
    assert producer.limit("encode").rate_starts is None
    fair = cli.invoke(app, ["limits", "order", "encode", "fair", "--reason", "share", *url])
    assert fair.exit_code == 0, fair.output
    assert "encode  order fair" in fair.output
    assert producer.set_order("encode", "fifo").order == "fifo"
    assert producer.limit("encode").order == "fifo"
    keyed = producer.create_job("tenant work", {}, fairness_key="tenant-a", concurrency_key="t")
    assert (keyed.fairness_key, keyed.concurrency_key) == ("tenant-a", "t")
    per_key = cli.invoke(app, ["limits", "keys", "encode", "2", "--reason", "per tenant", *url])
    assert per_key.exit_code == 0, per_key.output
    assert "encode  0/2  2 per key  (0 held by key)" in per_key.output
    assert producer.set_key_limit("encode", 4).max_in_progress_per_key == 4
    key_rated = cli.invoke(app, ["limits", "rate", "encode", "3", "--per", "1h", "--per-key", *url])
    assert key_rated.exit_code == 0, key_rated.output
    assert "4 per key  3 per 3600 s per key  (0 held by key)" in key_rated.output
    assert producer.set_key_rate("encode", 2, 60).key_rate_starts == 2
    assert producer.limit("encode").key_rate_interval_seconds == 60
    key_unrated = cli.invoke(app, ["limits", "unrate", "encode", "--per-key", *url])
    assert key_unrated.exit_code == 0, key_unrated.output
    assert "encode: no per-key rate limit" in key_unrated.output
    assert producer.limit("encode").key_rate_starts is None
    unkeyed = cli.invoke(app, ["limits", "unkeys", "encode", *url])
    assert unkeyed.exit_code == 0, unkeyed.output
    assert producer.limit("encode").max_in_progress_per_key is None
    bad = cli.invoke(app, ["limits", "set", "encode", "0", *url])
    assert bad.exit_code == 1
    assert "INVALID_LIMIT" in bad.output

    removed = cli.invoke(app, ["limits", "remove", "encode", "--reason", "done", *url])
    assert removed.exit_code == 0, removed.output
    producer.remove_limit("render farm")
    assert producer.limits() == []
    with pytest.raises(ApiError) as refused:
        producer.limit("render farm")
    assert refused.value.code == "LIMIT_NOT_FOUND"


def test_the_sdk_reaches_a_stage_type_holding_a_slash_and_no_other(
    database_url: str, spawn_server: Callable[..., Any]
) -> None:
    producer = Producer(spawn_server(database_url).url)
    producer.set_rate("x", 2, 60)
    assert producer.set_limit("x/rate", 3).stage_type == "x/rate"

    producer.remove_limit("x/rate")

    assert producer.limit("x").rate_starts == 2
    with pytest.raises(ApiError) as gone:
        producer.limit("x/rate")
    assert gone.value.code == "LIMIT_NOT_FOUND"


def test_eight_http_workers_never_exceed_the_limit_two_server_processes_on_postgres(
    database_url: str, spawn_server: Callable[..., Any]
) -> None:
    processes = 1 if database_url.startswith("sqlite") else 2  # (SQLite: one server)
    server = spawn_server(database_url, workers=processes)
    producer = Producer(server.url)
    job = producer.create_job("farm", {})
    stage = producer.create_stage(job.id, "render", {})
    total, limit = 40, 3
    producer.create_tasks(stage.id, [{"i": i} for i in range(total)])
    producer.set_limit("render", limit)
    sampled: list[int] = []
    finished = threading.Event()

    def watch() -> None:  # the server's own count, meanwhile
        while not finished.is_set():
            sampled.append(producer.limit("render").in_progress)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        most = drain(server.url, total, lambda task: "render")
    finally:
        finished.set()
        watcher.join()
    assert sampled
    assert max(sampled) <= limit
    assert 1 <= most <= limit
    assert producer.limit("render").in_progress == 0


def test_eight_http_workers_never_exceed_a_keys_limit_two_server_processes_on_postgres(
    database_url: str, spawn_server: Callable[..., Any]
) -> None:
    processes = 1 if database_url.startswith("sqlite") else 2  # (SQLite: one server)
    server = spawn_server(database_url, workers=processes)
    producer = Producer(server.url)
    limit, per_job = 2, 8
    producer.set_key_limit("render", limit)
    key_of: dict[str, str] = {}  # stage id -> key
    for i, key in enumerate(["tenant", "tenant", None]):
        job = producer.create_job(f"farm {i}", {}, concurrency_key=key)
        stage = producer.create_stage(job.id, "render", {})
        producer.create_tasks(stage.id, [{"i": n} for n in range(per_job)])
        key_of[stage.id] = key or job.id
    most = drain(server.url, 3 * per_job, lambda task: key_of[task.stage_id])

    assert 1 <= most <= limit
    assert producer.limit("render").held_by_key == 0


def test_eight_http_workers_start_exactly_each_keys_tokens_two_server_processes_on_postgres(
    database_url: str, spawn_server: Callable[..., Any]
) -> None:
    processes = 1 if database_url.startswith("sqlite") else 2  # (SQLite: one server)
    server = spawn_server(database_url, workers=processes)
    producer = Producer(server.url)
    producer.set_key_rate("render", 3, 3600)
    key_of: dict[str, str] = {}  # stage id -> key
    for i, key in enumerate(["tenant", "tenant", None]):
        job = producer.create_job(f"farm {i}", {}, concurrency_key=key)
        stage = producer.create_stage(job.id, "render", {})
        producer.create_tasks(stage.id, [{"i": n} for n in range(6)])
        key_of[stage.id] = key or job.id
    started: list[str] = []
    lock = threading.Lock()

    def work(_: int) -> None:
        consumer = Consumer(server.url)
        for _ in range(6):  # more asks than there are tokens
            task = consumer.dequeue("render")
            if task is not None:
                with lock:
                    started.append(key_of[task.stage_id])
                consumer.complete(task)

    assert in_threads(work) == []
    loner = list(key_of.values())[-1]
    assert sorted(started) == sorted(["tenant"] * 3 + [loner] * 3)
    assert producer.limit("render").held_by_key == 18 - 6


def drain(url: str, total: int, key: Callable[[Any], str]) -> int:
    """Eight HTTP workers dequeue "render" tasks, each completed after a moment, until `total`
    are done; the most tasks of one `key` the workers held at once."""
    lock = threading.Lock()
    holding: dict[str, int] = {}
    state = {"most": 0, "done": 0}

    def work(_: int) -> None:
        consumer = Consumer(url)
        while True:
            with lock:
                if state["done"] >= total:
                    return
            task = consumer.dequeue("render")
            if task is None:
                continue
            k = key(task)
            with lock:
                holding[k] = holding.get(k, 0) + 1
                state["most"] = max(state["most"], holding[k])
            time.sleep(0.002)
            with lock:
                holding[k] -= 1
            consumer.complete(task)
            with lock:
                state["done"] += 1

    assert in_threads(work) == []
    assert state["done"] == total
    return state["most"]
