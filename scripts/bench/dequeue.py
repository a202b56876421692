"""Dequeue cost against queue depth: does `Jobnik.dequeue` stay cheap when the queue is huge?

What it measures (per backend, PostgreSQL and/or SQLite):

  Scenario A, a fresh database: 100 queued tasks (one job, one stage of one type).
  Scenario B, another fresh database: DEPTH queued tasks across TYPES stage types (one job per
  type, one stage each, DEPTH/TYPES tasks per stage) and DELAYED more waiting for a not-before
  time that does not come during the run (as many as DEPTH unless --delayed says otherwise:
  retries in backoff and delayed work must not slow the claim), created through `Jobnik.create_job`,
  `Jobnik.add_stage` and `Jobnik.add_tasks` in batches of 1,000: real events in the library's
  event table and real read-model rows, no raw inserts. Creation throughput is printed as it goes.

  Then, with both databases open, the script times `Jobnik.dequeue(type)` alone: each one is a
  whole write transaction (event-table lock, claim through queue_v1's partial index queue_v1_next,
  task/stage/job rows loaded, events appended, read models updated, commit). No report follows a
  dequeue: the claimed tasks stay IN_PROGRESS. A's and B's dequeues alternate (A, B, B, A, ...)
  so that noise from other processes on the machine hits both alike. In B they rotate over
  --sample-types types spread across the type range. Before timing, every sampled stage gets one
  untimed dequeue (the first one also starts the stage and the job: more events) and a few more
  as warm-up.

  For context the script also times the bare claim query (the exact SQL `SqlSession.claim`
  runs, `SELECT task_id FROM queue_v1 WHERE stage_type = ... AND stage_open AND job_open
  ORDER BY priority_rank, seq LIMIT 1 [FOR UPDATE SKIP LOCKED]`) in its own transaction,
  rolled back, on one held connection, at both depths; and prints the claim's query plan at
  depth B. It exits non-zero when that plan scans queue_v1 (a Seq Scan on PostgreSQL, a SCAN
  on SQLite) or does not use queue_v1_next: the claim must be index-backed.

  After loading (and after the plan check, so the plan is the one autovacuum left), each
  PostgreSQL database gets VACUUM (ANALYZE) and a CHECKPOINT, and each SQLite file a WAL
  checkpoint, so the load's background work does not land in B's measurements only.

How to read it: lines starting with '#' are progress and context; every other line is one figure:

  name                                   value(B)   baseline(A)   ratio(B/A)

Times are milliseconds (median and p90 over the samples). Absolute values depend on the machine
and on what else runs on it; the ratios, measured in the same run, are the point. The jobnik
claim is "a dequeue at 1,000,000 tasks across 1,000 types costs about what it costs with 100":
the dequeue-median ratio should be <= 1.5 (the line says whether it is; it does not change the
exit status, as noise on a busy machine can push it over).

Usage:
  python -m jobnik.scripts.bench.dequeue [--backend postgres|sqlite|both] [--depth 1000000]
      [--delayed 1000000] [--types 1000] [--samples 50] [--quick]
      [--pg-url postgresql://postgres@127.0.0.1:5432]

--quick is depth 100,000 over 100 types (still 1,000 tasks per type). PostgreSQL databases are
created as jobnik_bench_<pid>_a/_b and dropped at the end; SQLite files live in a temp directory.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from jobnik.domain.application import Jobnik
from jobnik.projections.store.postgres import PostgresStore
from jobnik.scripts.bench.claim_plan import bare_claim, claim_plan, plan_problems
from jobnik.scripts.bench.dequeue_scenarios import (
    Scenario,
    populate,
    say,
    scenario_store,
    settle,
    spread,
)

DEPTH_A = 100
WARMUP = 4  # untimed dequeues per sampled stage after its first (stage-starting) one
TARGET = 1.5


# -- timing ------------------------------------------------------------------------------------


def timed_dequeue(app: Jobnik, stage_type: str) -> float:
    t0 = time.perf_counter()
    app.dequeue(stage_type)
    return time.perf_counter() - t0


def interleave(
    samples: int, a: Callable[[int], float], b: Callable[[int], float]
) -> tuple[list[float], list[float]]:
    """A and B alternately, A first on even rounds and B first on odd ones (A B B A A B ...)."""
    ta: list[float] = []
    tb: list[float] = []
    for i in range(samples):
        if i % 2 == 0:
            ta.append(a(i))
            tb.append(b(i))
        else:
            tb.append(b(i))
            ta.append(a(i))
    return ta, tb


def p90(xs: list[float]) -> float:
    return statistics.quantiles(xs, n=10, method="inclusive")[-1]


def figure(name: str, value: float, baseline: float | None, note: str = "") -> None:
    if baseline is None:
        say(f"{name:<44} {value:>12,.3f} {'-':>12} {'-':>8}  {note}".rstrip())
    else:
        ratio = value / baseline if baseline else float("inf")
        say(f"{name:<44} {value:>12.3f} {baseline:>12.3f} {ratio:>8.2f}  {note}".rstrip())


# -- one backend -------------------------------------------------------------------------------


@dataclass
class DepthResult:
    """One backend's figures, in seconds: dequeue and bare claim at depth A and at depth B."""

    backend: str
    depth: int
    types: int
    delayed: int
    create_s: float
    dequeue_a: list[float]
    dequeue_b: list[float]
    claim_a: list[float]
    claim_b: list[float]
    problems: list[str] = field(default_factory=list)  # the claim's plan is not index-backed

    @property
    def ratio(self) -> float:
        """Dequeue median at depth B over depth A: the figure that should stay <= TARGET."""
        return statistics.median(self.dequeue_b) / statistics.median(self.dequeue_a)


def measure(
    backend: str, args: argparse.Namespace, tmp: Path, *, settled: bool = True
) -> DepthResult:
    """Both scenarios on one backend (no figures printed; progress lines only).

    `settled=False` skips VACUUM/CHECKPOINT after loading (tiny loads in tests)."""
    say(
        f"# {backend}: scenario A = {DEPTH_A} tasks (1 type); scenario B = {args.depth:,} tasks "
        f"over {args.types:,} types and {args.delayed:,} delayed; {args.samples} timed dequeues "
        "each (dequeue only, no report)"
    )
    with (
        scenario_store(backend, "a", args.pg_url, tmp) as store_a,
        scenario_store(backend, "b", args.pg_url, tmp) as store_b,
    ):
        a = Scenario("a", store_a, Jobnik(store_a))
        b = Scenario("b", store_b, Jobnik(store_b))
        populate(a, DEPTH_A, 1, backend)
        populate(b, args.depth, args.types, backend, args.delayed)
        a.sampled = a.types
        b.sampled = spread(b.types, args.sample_types)
        result = DepthResult(
            backend, args.depth, args.types, args.delayed, b.create_s, [], [], [], []
        )

        say(f"# {backend} claim plan at depth B ({args.depth:,} queued, type {b.sampled[0]}):")
        lines = claim_plan(store_b, b.sampled[0])
        for line in lines:
            say(f"#   {line}")
        result.problems = plan_problems(store_b, lines)

        t0 = time.perf_counter()
        if settled:
            settle(store_a)
            settle(store_b)
        how = (
            "VACUUM (ANALYZE), CHECKPOINT"
            if isinstance(store_b, PostgresStore)
            else "WAL checkpoint"
        )
        say(f"# {backend}: settled ({how}) in {time.perf_counter() - t0:.1f} s")
        after = claim_plan(store_b, b.sampled[0])
        result.problems += [f"{p} (after ANALYZE)" for p in plan_problems(store_b, after)]
        if result.problems:
            if after != lines:
                say(f"# {backend} claim plan at depth B after VACUUM (ANALYZE):")
                for line in after:
                    say(f"#   {line}")
            return result

        # Warm-up: start every sampled stage (and its job), then a few ordinary dequeues.
        for sc in (a, b):
            for t in sc.sampled:
                for _ in range(1 + WARMUP):
                    sc.app.dequeue(t)

        def dq(sc: Scenario) -> Callable[[int], float]:
            return lambda i: timed_dequeue(sc.app, sc.sampled[i % len(sc.sampled)])

        result.dequeue_a, result.dequeue_b = interleave(args.samples, dq(a), dq(b))
        with bare_claim(store_a) as claim_a, bare_claim(store_b) as claim_b:
            n = max(args.samples, 200)
            result.claim_a, result.claim_b = interleave(
                n,
                lambda i: claim_a(a.sampled[i % len(a.sampled)]),
                lambda i: claim_b(b.sampled[i % len(b.sampled)]),
            )
    return result


def run(
    backend: str,
    *,
    quick: bool = False,
    depth: int | None = None,
    types: int | None = None,
    delayed: int | None = None,
    samples: int = 50,
    sample_types: int = 10,
    pg_url: str = "postgresql://postgres@127.0.0.1:5432",
    settle: bool = True,
) -> DepthResult:
    """The measurement as a function (for scripts/bench/volume.py); the arguments are main()'s."""
    argv = ["--backend", backend, "--samples", str(samples), "--pg-url", pg_url]
    argv += ["--sample-types", str(sample_types), *(["--quick"] if quick else [])]
    argv += [
        *(["--depth", str(depth)] if depth else []),
        *(["--types", str(types)] if types else []),
        *(["--delayed", str(delayed)] if delayed is not None else []),
    ]
    args = parse(argv)
    with tempfile.TemporaryDirectory(prefix="jobnik-bench-") as tmp:
        return measure(backend, args, Path(tmp), settled=settle)


def run_backend(backend: str, args: argparse.Namespace, tmp: Path) -> bool:
    """Both scenarios on one backend; False when the claim's plan is not index-backed."""
    wall = time.perf_counter()
    r = measure(backend, args, tmp)
    if r.problems:
        print(f"FAIL {backend}: claim query is not index-backed: {r.problems}", file=sys.stderr)
        return False
    da, db, ca, cb = r.dequeue_a, r.dequeue_b, r.claim_a, r.claim_b
    ms = 1000.0
    ratio = r.ratio
    verdict = f"target <= {TARGET}: {'met' if ratio <= TARGET else 'MISSED'}"
    say(f"# {'figure':<42} {'value (B)':>12} {'baseline (A)':>12} {'B/A':>8}")
    figure(
        f"{backend} create tasks/s (B, via add_tasks)",
        (r.depth + r.delayed) / r.create_s,
        None,
        f"{r.depth + r.delayed:,} tasks in {r.create_s:.1f} s",
    )
    figure(
        f"{backend} dequeue median ms",
        statistics.median(db) * ms,
        statistics.median(da) * ms,
        verdict,
    )
    figure(f"{backend} dequeue p90 ms", p90(db) * ms, p90(da) * ms)
    figure(
        f"{backend} claim SQL median ms",
        statistics.median(cb) * ms,
        statistics.median(ca) * ms,
        f"{len(cb)} runs each",
    )
    figure(f"{backend} claim SQL p90 ms", p90(cb) * ms, p90(ca) * ms)
    say(f"# {backend} wall time {time.perf_counter() - wall:.1f} s")
    return True


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Dequeue cost at depth 100 vs a deep queue (see the module docstring)."
    )
    parser.add_argument("--backend", choices=("postgres", "sqlite", "both"), default="postgres")
    parser.add_argument("--depth", type=int, default=None, help="tasks in B (1,000,000)")
    parser.add_argument("--types", type=int, default=None, help="stage types in B (1,000)")
    parser.add_argument(
        "--delayed", type=int, default=None, help="delayed tasks in B besides (as many as --depth)"
    )
    parser.add_argument("--samples", type=int, default=50, help="timed dequeues per scenario")
    parser.add_argument("--sample-types", type=int, default=10, help="B's types dequeued from")
    parser.add_argument("--quick", action="store_true", help="depth 100,000 over 100 types")
    parser.add_argument(
        "--pg-url",
        default="postgresql://postgres@127.0.0.1:5432",
        help="a PostgreSQL server where the bench may create and drop databases",
    )
    args = parser.parse_args(argv)
    args.depth = args.depth or (100_000 if args.quick else 1_000_000)
    args.types = args.types or (100 if args.quick else 1_000)
    args.delayed = args.depth if args.delayed is None else args.delayed
    if args.types < 1 or args.depth < args.types or args.delayed < 0:
        parser.error("need --types >= 1, --depth >= --types and --delayed >= 0")
    if not 2 <= args.samples <= DEPTH_A - 1 - WARMUP:
        parser.error(f"--samples must be 2..{DEPTH_A - 1 - WARMUP} (scenario A holds {DEPTH_A})")
    per_type = args.depth // args.types
    k = min(args.sample_types, args.types)
    if per_type < 1 + WARMUP + -(-args.samples // k):
        parser.error("B has too few tasks per type for these samples; raise --sample-types")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    backends = ("postgres", "sqlite") if args.backend == "both" else (args.backend,)
    ok = True
    with tempfile.TemporaryDirectory(prefix="jobnik-bench-") as tmp:
        for backend in backends:
            ok = run_backend(backend, args, Path(tmp)) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
