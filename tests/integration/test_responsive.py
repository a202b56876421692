"""A server process stays responsive while hostile bodies arrive: each is refused at once, and
no parse or validation holds the event loop long enough to keep a liveness probe waiting."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from .conftest import Server

PROBE_BOUND = 0.1  # seconds a liveness probe may take while the bodies arrive
# Probes allowed over the bound: a busy machine can pause the server process once or twice, but
# a body parsed on the event loop would hold back a probe at each of the 40 bodies sent.
SLOW_PROBES = 2
SENDERS = 4
ROUNDS = 2

Body = tuple[str, str, bytes, dict[str, str], str]  # method, path, body, headers, code


def hostile_bodies(stage_id: str) -> list[Body]:
    """Bodies under the 1 MiB limit that cost most to validate item by item: two hundred
    thousand empty objects as a batched report (with and without an Idempotency-Key) and as new
    tasks, and objects of tens of thousands of unknown keys."""
    empty = b"[" + b",".join([b"{}"] * 200_000) + b"]"
    unknown = ",".join(f'"k{i}":0' for i in range(20))
    tasks = "[" + ",".join('{"data":{},' + unknown + "}" for _ in range(1000)) + "]"
    job = '{"name":"hostile","data":{},' + ",".join(f'"k{i}":0' for i in range(20_000)) + "}"
    return [
        ("PUT", "/v1/tasks/status", empty, {}, "BATCH_TOO_LARGE"),
        ("PUT", "/v1/tasks/status", empty, {"Idempotency-Key": "k"}, "BATCH_TOO_LARGE"),
        ("POST", f"/v1/stages/{stage_id}/tasks", empty, {}, "TOO_MANY_TASKS"),
        ("POST", f"/v1/stages/{stage_id}/tasks", tasks.encode(), {}, "VALIDATION_ERROR"),
        ("POST", "/v1/jobs", job.encode(), {}, "VALIDATION_ERROR"),
    ]


def send(http: httpx.Client, body: Body) -> tuple[int, str]:
    method, path, content, headers, _ = body
    r = http.request(
        method, path, content=content, headers={"content-type": "application/json", **headers}
    )
    return r.status_code, r.json()["code"]


def probe_while(server: Server, work: Callable[[], Any]) -> tuple[list[float], Any]:
    """The latencies of liveness probes sent one after another while `work` runs, and what
    `work` returned."""
    latencies: list[float] = []
    done = threading.Event()

    def probe() -> None:
        with httpx.Client(base_url=server.url, timeout=30) as http:
            while not done.is_set():
                start = time.perf_counter()
                assert http.get("/liveness").status_code == 200
                latencies.append(time.perf_counter() - start)
                time.sleep(0.005)

    prober = threading.Thread(target=probe)
    prober.start()
    try:
        result = work()
    finally:
        done.set()
        prober.join()
    return latencies, result


def test_liveness_answers_within_100_ms_while_hostile_bodies_arrive(
    database_url: str, spawn_server: Callable[..., Server]
) -> None:
    server = spawn_server(database_url)
    with httpx.Client(base_url=server.url, timeout=60) as http:
        job = http.post("/v1/jobs", json={"name": "hostile", "data": {}}).json()
        stage = http.post(f"/v1/jobs/{job['id']}/stage", json={"type": "t", "data": {}}).json()
        bodies = hostile_bodies(stage["id"])
        warm = [send(http, b) for b in bodies]  # (each code path run once before timing)

        def flood() -> list[tuple[int, str]]:
            def sender(_: int) -> list[tuple[int, str]]:
                with httpx.Client(base_url=server.url, timeout=60) as own:
                    return [send(own, b) for _ in range(ROUNDS) for b in bodies]

            with ThreadPoolExecutor(SENDERS) as pool:
                return [a for answers in pool.map(sender, range(SENDERS)) for a in answers]

        latencies, answers = probe_while(server, flood)

    expected = [(400, b[4]) for b in bodies]
    assert warm == expected
    assert answers == expected * ROUNDS * SENDERS
    assert len(latencies) > 5
    slow = [t for t in latencies if t >= PROBE_BOUND]
    assert len(slow) <= SLOW_PROBES, sorted(latencies)[-5:]
