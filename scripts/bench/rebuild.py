"""Rebuild and verify every projection over a big log: speed against reading the log, and memory.

What it does:

  1. Writes two logs, SMALL (about 30,000 events) and LARGE (about 300,000), through the engine's
     own commands into SQLite files: jobs of 1,000 tasks (`Jobnik.add_tasks`, one batch of
     1,000), then every task dequeued and completed (`Jobnik.dequeue`, `Jobnik.report_task`),
     one task in 20 failing its first attempt (RETRIED, dequeued again): about 3.1 events per
     task plus 8 per job, the event mix of a big stage. To make this fast the commands run in
     group commit: `GroupCommit` hands every command one shared session and commits it every
     1,000 commands. The commands, their cascades, the events and the inline read-model rows
     are exactly those of one transaction per command; only the transaction boundaries differ,
     and the log does not record those. The catch-up projections are then brought to the head.
  2. For PostgreSQL it copies each SQLite database into a fresh PostgreSQL database (COPY):
     the events with their notification ids, every projection table and the registry. The
     engine costs several network round trips per command on PostgreSQL (about 500 events/s
     here, even in group commit), which would make the LARGE log take ten minutes to write;
     the copy carries the same events in the same order and the same rows, so PostgreSQL's
     verify compares the engine's rows (written through SQLite) with a PostgreSQL replay.
  3. In a fresh child process per figure (so each one's peak memory is its own):
     - raw: read and decode the whole log (`select_notifications` pages + the mapper), no
       projection work: the baseline speed;
     - rebuild: `rebuild(store)`, every projection (inline, last_status, run_stats), blue/green;
       on PostgreSQL a log of 50,000 events or more is replayed by JOBNIK_REBUILD_PROCESSES
       part processes (default one per CPU; projections/rebuild/parallel.py);
     - verify: `verify(store)`, every projection; it must find no difference;
     each at SMALL and at LARGE, reporting events/s and the peak RSS of the child or of its
     largest part process (`ru_maxrss`, RUSAGE_SELF and RUSAGE_CHILDREN); client CPU counts the
     part processes too. With --tracemalloc, also the peak of Python allocations during
     rebuild+verify (slower: tracemalloc hooks every allocation; the child's own only).

How to read it: lines starting with '#' are progress; every other line is one figure:

  name    value    baseline    ratio

rebuild/verify events/s use raw read+decode events/s of the same log as baseline (ratio: the
share of raw speed left after projection work); "client CPU" lines compare the CPU time the child
process used per event (the database server's work is not in it), which a busy machine disturbs
less than wall time; memory figures use SMALL as baseline (ratio
LARGE/SMALL: about 1.0 when the rebuild streams, 10 if it held the log). Exit status 1 when
verify finds a difference or a memory ratio exceeds 1.2.

Usage:
  python -m jobnik.scripts.bench.rebuild [--backend postgres|sqlite|both] [--quick] [--tracemalloc]
      [--pg-url postgresql://postgres@127.0.0.1:5432/postgres]
--quick: SMALL about 3,000 and LARGE about 30,000 events (60-80 s for both backends here).
From Python: `from jobnik.scripts.bench.rebuild import run; figures = run("postgres", quick=True)`
returns the figures (`Figure`: name, value, baseline, ratio, ok) instead of printing them.
PostgreSQL databases are created as jobnik_bench_rebuild_<pid>_<size> and dropped at the end.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jobnik.projections.store.backends import open_store
from jobnik.projections.store.config import library_env
from jobnik.scripts.bench.rebuild_log import count_events, postgres_copy, say, write_log

MAX_RATIO = 1.2
PG_URL = "postgresql://postgres@127.0.0.1:5432/postgres"


# -- measuring, in a child process -------------------------------------------------------------


def child(kind: str, url: str, trace: bool) -> None:
    """Run one measurement and print it as JSON (the parent parses the last line)."""
    if trace:
        import tracemalloc

        tracemalloc.start()
    store = open_store(library_env({"JOBNIK_DATABASE_URL": url}))
    out: dict[str, Any] = {}
    started, cpu = time.perf_counter(), time.process_time() + _children_cpu()
    if kind == "raw":
        from jobnik.projections.rebuild.log import read_log

        out["events"] = sum(1 for _ in read_log(store))
    elif kind == "rebuild":
        from jobnik.projections.rebuild.bluegreen import rebuild

        out["events"] = rebuild(store)
    elif kind == "verify":
        from jobnik.projections.rebuild.verify import verify

        out["differences"] = [d.describe() for d in verify(store)[:20]]
        out["events"] = int(store.recorder.max_notification_id() or 0)
    elif kind == "both":
        from jobnik.projections.rebuild.bluegreen import rebuild
        from jobnik.projections.rebuild.verify import verify

        out["events"] = rebuild(store)
        out["differences"] = [d.describe() for d in verify(store)[:20]]
    out["seconds"] = time.perf_counter() - started
    # this process (all its threads) and a rebuild's part processes, not the server
    out["cpu"] = time.process_time() + _children_cpu() - cpu
    out["maxrss_kb"] = max(  # the largest of this process and the part processes
        resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
        resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss,
    )
    if trace:
        import tracemalloc

        out["traced_peak"] = tracemalloc.get_traced_memory()[1]
    store.close()
    print(json.dumps(out), flush=True)


def _children_cpu() -> float:
    """CPU seconds of this process's children that have ended (a rebuild's part processes)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def measure(kind: str, url: str, trace: bool = False) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--child", kind, "--url", url]
    if trace:
        cmd.append("--tracemalloc")
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{kind} child failed:\n{done.stdout}\n{done.stderr}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


# -- the report ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Figure:
    """One line of the report: what was measured, its value, its baseline and their ratio."""

    name: str
    value: str
    baseline: str
    ratio: float | None
    ok: bool = True  # False: verify found differences, or memory grew past MAX_RATIO

    def line(self) -> str:
        shown = f"{self.ratio:.2f}" if self.ratio is not None else "-"
        return f"{self.name:<52} {self.value:>18} {self.baseline:>30} {shown:>6}"


HEADER = f"{'name':<52} {'value':>18} {'baseline':>30} {'ratio':>6}"


def measure_backend(
    backend: str, urls: dict[str, str], sizes: dict[str, int], trace: bool
) -> list[Figure]:
    """Measure one backend (children per figure) and return its figures."""
    results: dict[str, dict[str, Any]] = {}
    for label, url in urls.items():
        for kind in ("raw", "rebuild", "verify"):
            say(f"# {backend} {label}: {kind} ...")
            results[f"{label}-{kind}"] = measure(kind, url)
        if trace:
            say(f"# {backend} {label}: rebuild+verify under tracemalloc ...")
            results[f"{label}-traced"] = measure("both", url, trace=True)
    figures = []
    for label in urls:
        raw = results[f"{label}-raw"]
        raw_rate = raw["events"] / raw["seconds"]
        n = f"{sizes[label]:,} events"
        for kind in ("rebuild", "verify"):
            r = results[f"{label}-{kind}"]
            rate = r["events"] / r["seconds"]
            figures.append(
                Figure(
                    f"{backend} {kind} all projections ({n})",
                    f"{rate:,.0f} events/s",
                    f"raw read+decode {raw_rate:,.0f}/s",
                    rate / raw_rate,
                )
            )
        for kind in ("rebuild", "verify"):  # less noisy than wall time on a busy machine
            r = results[f"{label}-{kind}"]
            figures.append(
                Figure(
                    f"{backend} {kind} client CPU ({n})",
                    f"{r['events'] / r['cpu']:,.0f} events/CPU-s",
                    f"raw {raw['events'] / raw['cpu']:,.0f}/CPU-s",
                    raw["cpu"] / raw["events"] / (r["cpu"] / r["events"]),
                )
            )
        differences = results[f"{label}-verify"].get("differences", [])
        for text in differences:
            say(f"# difference: {text}")
        figures.append(
            Figure(
                f"{backend} verify: rows differing ({n})",
                str(len(differences)),
                "0",
                None,
                ok=not differences,
            )
        )
    for kind in ("rebuild", "verify"):
        big, base = results[f"large-{kind}"]["maxrss_kb"], results[f"small-{kind}"]["maxrss_kb"]
        figures.append(
            Figure(
                f"{backend} {kind} peak RSS (large vs small log)",
                f"{big / 1024:,.1f} MB",
                f"{base / 1024:,.1f} MB",
                big / base,
                ok=big / base <= MAX_RATIO,
            )
        )
    if trace:
        big, base = (results[f"{s}-traced"]["traced_peak"] for s in ("large", "small"))
        figures.append(
            Figure(
                f"{backend} rebuild+verify Python peak (tracemalloc)",
                f"{big / 1024 / 1024:,.1f} MB",
                f"{base / 1024 / 1024:,.1f} MB",
                big / base,
                ok=big / base <= MAX_RATIO,
            )
        )
    return figures


def run(
    backend: str = "both",
    quick: bool = False,
    *,
    pg_url: str = PG_URL,
    tracemalloc: bool = False,
) -> list[Figure]:
    """The benchmark: write both logs, then measure `backend` ('postgres', 'sqlite' or 'both').

    Returns every figure (progress goes to stdout as '#' lines); `Figure.ok` is False for a
    verify that found differences or memory that grew with the log."""
    small, large = (3_000, 30_000) if quick else (30_000, 300_000)
    backends = ["postgres", "sqlite"] if backend == "both" else [backend]
    figures: list[Figure] = []
    with tempfile.TemporaryDirectory() as d:
        logs = {
            "small": write_log(Path(d) / "small.db", small, "small"),
            "large": write_log(Path(d) / "large.db", large, "large"),
        }
        sizes = {label: count_events(url) for label, url in logs.items()}
        for name in backends:
            if name == "sqlite":
                figures += measure_backend("sqlite", logs, sizes, tracemalloc)
                continue
            with (
                postgres_copy(logs["small"], pg_url, "small") as small_url,
                postgres_copy(logs["large"], pg_url, "large") as large_url,
            ):
                urls = {"small": small_url, "large": large_url}
                figures += measure_backend("postgres", urls, sizes, tracemalloc)
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--backend", choices=["postgres", "sqlite", "both"], default="both")
    parser.add_argument("--quick", action="store_true", help="3,000 vs 30,000 events")
    parser.add_argument("--tracemalloc", action="store_true", help="also trace Python memory")
    parser.add_argument("--pg-url", default=PG_URL)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.url, args.tracemalloc)
        return 0
    started = time.perf_counter()
    figures = run(args.backend, args.quick, pg_url=args.pg_url, tracemalloc=args.tracemalloc)
    for backend in dict.fromkeys(f.name.split(" ", 1)[0] for f in figures):
        say()
        say(HEADER)
        for f in figures:
            if f.name.startswith(backend + " "):
                say(f.line())
        say()
    say(f"# done in {time.perf_counter() - started:.0f} s")
    return 0 if all(f.ok for f in figures) else 1


if __name__ == "__main__":
    sys.exit(main())
