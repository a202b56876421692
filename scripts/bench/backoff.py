"""The backoff figure of `jobnik bench`: the engine lifecycle when every task fails once and is
retried, with a retry policy on its stage against without one.

Each task's first attempt fails and its retry completes: two dequeues and two reports per task,
K threads of one process. Without a policy a retry is queued again at once, as Jobnik does;
with one (a wait of a millisecond) it is queued as a delayed row that the claim's second probe
(the due rows, earliest first) finds once its time has come. The figure is the policy's
tasks/s beside the no-policy run's, alternated over ROUNDS rounds in one database: what the
delayed rows' way through the queue costs, the wait itself aside.
"""

from __future__ import annotations

import time

from jobnik.domain.application import Jobnik, NewJob, NewStage, NewTask
from jobnik.domain.delays import RetryPolicy
from jobnik.domain.errors import TaskNotFound
from jobnik.domain.statuses import TaskStatus
from jobnik.scripts.bench import floor as bench_floor
from jobnik.scripts.bench.context import Ctx, check
from jobnik.scripts.bench.engine import BATCH, RETRYABLE, Drain, engine

K = 4  # worker threads
ROUNDS = 2  # each variant's runs, alternated: off, on, off, on
WAIT = RetryPolicy(initial_seconds=0.001, coefficient=1.0, max_seconds=0.001)
GOAL = 0.8  # the lifecycle with backoff, as a share of the one without


def retried_stage(app: Jobnik, stage_type: str, n: int, policy: RetryPolicy | None) -> None:
    """One job, one stage of `stage_type` (with `policy`) holding `n` PENDING tasks."""
    job = app.create_job(NewJob(name=f"bench {stage_type}", data={}))
    stage = app.add_stage(job.id, NewStage(type=stage_type, data={}, retry_policy=policy))
    for first in range(0, n, BATCH):
        app.add_tasks(
            stage.id, [NewTask(data={"i": first + i}) for i in range(min(BATCH, n - first))]
        )


def fail_once(app: Jobnik, stage_type: str, n: int) -> Drain:
    """K threads: each task's first attempt reported FAILED, its second COMPLETED, until all
    `n` have completed (a thread that finds nothing due while some wait looks again)."""
    out = Drain()

    def one(_: int) -> None:
        while True:
            with out.lock:
                if out.tasks == n:
                    return
            try:
                task = app.dequeue(stage_type)
            except TaskNotFound:
                time.sleep(0.0005)  # a retry still waits for its time
                continue
            except RETRYABLE:
                with out.lock:
                    out.retries += 1
                continue
            status = TaskStatus.FAILED if task.attempt == 1 else TaskStatus.COMPLETED
            app.report_task(task.id, status, attempt=task.attempt, reason="bench")
            if status is TaskStatus.COMPLETED:
                with out.lock:
                    out.tasks += 1

    cpu = time.process_time()
    out.seconds = bench_floor.parallel(K, one)
    out.cpu = time.process_time() - cpu
    return out


def fig_backoff(ctx: Ctx) -> None:
    n = max(ctx.sizes.lifecycle_tasks // 4, 4)
    rates: dict[bool, list[float]] = {False: [], True: []}
    with ctx.database("backoff") as url, engine(url) as store:
        app = Jobnik(store)
        for r in range(ROUNDS):
            for on in (False, True):
                stage_type = f"backoff-{'on' if on else 'off'}-{r}"
                retried_stage(app, stage_type, n, WAIT if on else None)
                got = fail_once(app, stage_type, n)
                check(got.tasks == n, f"completed {got.tasks} of {n}")
                rates[on].append(got.rate)
    ctx.share(
        "engine lifecycle, every task retried once, with backoff",
        rates,
        "the same without a retry policy (retried at once)",
        f"{n:,} tasks, {K} threads, best of {ROUNDS} alternated runs each",
        GOAL,
    )
