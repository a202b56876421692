"""The HTTP lifecycle's worker process (http_lifecycle.py): kept apart so that a spawned worker
imports the SDK only, not the engine."""

from __future__ import annotations

import time
from typing import Any

from jobnik.scripts.bench.processes import released


def http_worker(base: str, stage_type: str, start: Any, results: Any) -> None:
    """One worker process: the SDK's dequeue and complete until the queue is empty.

    Puts {"dequeue": [s, ...], "complete": [s, ...], "end": monotonic time} on `results`."""
    from jobnik.workers.client import JobnikClient
    from jobnik.workers.consumer import Consumer

    consumer = Consumer(JobnikClient(base))
    consumer.client.get("/liveness")  # connected before the clock starts
    begin = released(start)
    dequeue: list[float] = []
    complete: list[float] = []
    while True:
        t0 = time.monotonic()
        task = consumer.dequeue(stage_type)
        t1 = time.monotonic()
        if task is None:
            break
        consumer.complete(task)
        dequeue.append(t1 - t0)
        complete.append(time.monotonic() - t1)
    results.put({"dequeue": dequeue, "complete": complete, "begin": begin, "end": t0})
    consumer.client.close()


def http_batch_worker(base: str, stage_type: str, count: int, start: Any, results: Any) -> None:
    """One worker process: the SDK's batched dequeue (`count` at a time) and one batched report
    of COMPLETED per batch, until the queue is empty. Puts {"tasks": n, "end": time}."""
    from jobnik.workers.client import JobnikClient
    from jobnik.workers.consumer import Consumer
    from jobnik.workers.models import Report

    consumer = Consumer(JobnikClient(base))
    consumer.client.get("/liveness")
    begin = released(start)
    done = 0
    while True:
        t0 = time.monotonic()
        tasks = consumer.dequeue_batch(stage_type, count)
        if not tasks:
            break
        answers = consumer.report_batch([Report(t, "COMPLETED") for t in tasks])
        if not all(a.ok for a in answers):
            raise RuntimeError(f"refused: {[a for a in answers if not a.ok]}")
        done += len(tasks)
    results.put({"tasks": done, "begin": begin, "end": t0})
    consumer.client.close()


def plain_worker(base: str, stage_type: str, threads: int, start: Any, results: Any) -> None:
    """One process of `threads` threads, each on its own keep-alive `http.client` connection,
    looping PATCH dequeue + PUT COMPLETED (with the attempt) until the queue is empty: the
    server alone, without the SDK. Puts {"tasks": n, "cpu": this process's CPU seconds from its
    release, "end": time}."""
    import http.client
    import json
    import threading
    from urllib.parse import quote, urlparse

    where = urlparse(base)
    dequeue = f"/v1/stages/{quote(stage_type, safe='')}/tasks/dequeue"
    headers = {"Content-Type": "application/json"}
    counts: list[int] = []
    ends: list[float] = []
    lock = threading.Lock()

    def loop(conn: http.client.HTTPConnection) -> None:
        done, t0 = 0, time.monotonic()
        while True:
            t0 = time.monotonic()
            conn.request("PATCH", dequeue)
            answer = conn.getresponse()
            body = answer.read()
            if answer.status == 404:
                break
            task = json.loads(body)
            report = json.dumps({"status": "COMPLETED", "attempt": task["attempt"]})
            conn.request("PUT", f"/v1/tasks/{task['id']}/status", report, headers)
            answer = conn.getresponse()
            answer.read()
            if answer.status != 200:
                raise RuntimeError(f"report answered {answer.status}")
            done += 1
        with lock:
            counts.append(done)
            ends.append(t0)

    conns = [http.client.HTTPConnection(where.hostname, where.port) for _ in range(threads)]
    for conn in conns:  # connected before the clock starts
        conn.request("GET", "/liveness")
        conn.getresponse().read()
    begin = released(start)
    cpu = time.process_time()
    workers = [threading.Thread(target=loop, args=(c,)) for c in conns]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    cpu = time.process_time() - cpu
    results.put({"tasks": sum(counts), "cpu": cpu, "begin": begin, "end": max(ends)})
    for conn in conns:
        conn.close()
