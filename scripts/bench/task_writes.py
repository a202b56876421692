"""What a task writes to PostgreSQL: WAL bytes per task, the task rows' HOT updates, CPU per task.

Each run is the cpu figure's drain (scripts/bench/cpu.py: --tasks tasks, one job and one stage, made
by the engine, then drained by PROCESSES x THREADS plain HTTP clients, each a dequeue and a
COMPLETED report, against one uvicorn process) in a fresh database, with tasks_v1's indexes as a
variant names them (set after the tasks are made, so the drain alone meets them):

  as-is    the schema's indexes
  merged   one index by (job_id, stage_id, status) for the by-job and by-stage ones, the tasks in
           progress of a stage type on a partial index: a dequeue writes one index entry fewer,
           a report two
  fillfactor
           the schema's indexes, fillfactor 70 (room on each page for the updated versions)
  no-hot-blockers
           no index names a column the lifecycle changes (status, the lease, the delegation),
           fillfactor 70: every lifecycle update can be HOT; the reads of the tasks in progress
           (concurrency limits, the lease sweep) would lose their index, so this is a ceiling,
           not a schema

Measured over the drain: the database's WAL bytes per task (pg_waldump over the LSNs before and
after, the records of the transactions that touched this database's files, full-page images
included: it needs pg_waldump and read access to the server's pg_wal, i.e. PostgreSQL on this
machine, run as its owner or root; a CHECKPOINT starts each drain, so each run pays its
full-page images alike, but another database's checkpoint during a drain adds more: the bytes
without them are given too), the task rows' updates and how many were HOT (pg_stat_user_tables),
the PostgreSQL backends' and the API server's CPU per task. Variants alternate, the order turned
each round. With --by-relation, each run also prints its WAL bytes per task by relation and
record type (the largest 25).
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any, Final

import psycopg

from jobnik.domain.application import Jobnik
from jobnik.scripts.bench import PG_URL
from jobnik.scripts.bench.batch import PROCESSES, THREADS
from jobnik.scripts.bench.context import say
from jobnik.scripts.bench.cpu import backends_cpu, cpu_seconds, task_updates
from jobnik.scripts.bench.databases import fresh_database
from jobnik.scripts.bench.engine import engine, populate
from jobnik.scripts.bench.http_lifecycle import server_process
from jobnik.scripts.bench.processes import worker_processes
from jobnik.scripts.bench.worker import plain_worker

_BY_STATUS: Final = ("tasks_v1_job_status", "tasks_v1_type_status")
VARIANTS: Final[dict[str, list[str]]] = {
    "as-is": [],
    "merged": [
        *(f"DROP INDEX {i}" for i in (*_BY_STATUS, "tasks_v1_stage")),
        "CREATE INDEX tasks_v1_job ON tasks_v1 (job_id, stage_id, status)",
        "CREATE INDEX tasks_v1_running ON tasks_v1 (stage_type) WHERE status = 'IN_PROGRESS'",
    ],
    "fillfactor": ["ALTER TABLE tasks_v1 SET (fillfactor = 70)", "VACUUM FULL tasks_v1"],
    "no-hot-blockers": [
        *(f"DROP INDEX {i}" for i in (*_BY_STATUS, "tasks_v1_lease", "tasks_v1_delegated")),
        "CREATE INDEX tasks_v1_job ON tasks_v1 (job_id)",
        "CREATE INDEX tasks_v1_type ON tasks_v1 (stage_type)",
        "ALTER TABLE tasks_v1 SET (fillfactor = 70)",
        "VACUUM FULL tasks_v1",
    ],
}
SLOT: Final = "bench_task_writes"
RECORD: Final = re.compile(r"len \(rec/tot\):\s*(\d+)/\s*(\d+), tx:\s*(\d+)")
RELATION: Final = re.compile(r"rel \d+/(\d+)/(\d+)")


def waldump() -> str:
    """pg_waldump: on the PATH, else in pg_config's bindir."""
    if found := shutil.which("pg_waldump"):
        return found
    bindir = subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True, check=True)
    return str(Path(bindir.stdout.strip()) / "pg_waldump")


def wal_records(lsn0: str, lsn1: str, pg_wal: Path) -> list[tuple[int, int, int, str]]:
    """(transaction id, record bytes, bytes with its full-page images, line) of each WAL record
    between the two LSNs."""
    out = subprocess.run(
        [waldump(), "-p", str(pg_wal), "-s", lsn0, "-e", lsn1],
        capture_output=True,
        text=True,
        check=False,
    )
    if not out.stdout:
        raise RuntimeError(f"pg_waldump: {out.stderr.strip()}")
    found = ((RECORD.search(line), line) for line in out.stdout.splitlines())
    return [(int(m[3]), int(m[1]), int(m[2]), line) for m, line in found if m]


def of_database(records: list[tuple[int, int, int, str]], oid: int) -> list[tuple[int, int, str]]:
    """(bytes, bytes with full-page images, line) of the records of transactions that wrote to
    database `oid`'s files."""
    mine = {
        x for x, _, _, line in records if x and (m := RELATION.search(line)) and int(m[1]) == oid
    }
    return [(size, total, line) for x, size, total, line in records if x in mine]


def one(conn: psycopg.Connection[Any], sql: str) -> Any:
    """The first column of `sql`'s first row."""
    row = conn.execute(sql.encode()).fetchone()
    return row[0] if row else None


def run(variant: str, pg_url: str, n: int, tmp: Path, pg_wal: Path) -> dict[str, Any]:
    with fresh_database(pg_url, "bench_task_writes") as url:
        with engine(url) as store:
            populate(Jobnik(store), "cpu", n)
        pg = psycopg.connect(url, autocommit=True)
        try:
            for statement in VARIANTS[variant]:
                pg.execute(statement.encode())  # the variants' own DDL
            pg.execute("VACUUM ANALYZE tasks_v1")
            db_oid = int(one(pg, "SELECT oid FROM pg_database WHERE datname = current_database()"))
            upd0 = task_updates(pg)
            # a temporary slot keeps the drain's WAL until this session ends: other databases'
            # checkpoints (a DROP DATABASE asks for one) would remove its segments
            pg.execute("SELECT pg_create_physical_replication_slot(%s, true, true)", [SLOT])
            with server_process(url, tmp / f"server-{variant}.log") as (base, proc):
                pg.execute("CHECKPOINT")
                lsn0 = str(one(pg, "SELECT pg_current_wal_lsn()"))
                db0, server0 = backends_cpu(pg), cpu_seconds(proc.pid)
                _, outs = worker_processes(PROCESSES, plain_worker, base, "cpu", THREADS)
                db1, server1 = backends_cpu(pg), cpu_seconds(proc.pid)
                lsn1 = str(one(pg, "SELECT pg_current_wal_lsn()"))
            upd1 = task_updates(pg)
            rows = pg.execute("SELECT relfilenode::text, relname FROM pg_class").fetchall()
            names: dict[str, str] = {str(r[0]): str(r[1]) for r in rows}
            wal = of_database(wal_records(lsn0, lsn1, pg_wal), db_oid)
        finally:
            pg.close()
    done = sum(o["tasks"] for o in outs)
    if done != n or server0 is None or server1 is None:
        raise RuntimeError(f"drained {done} of {n} (server CPU: {server0}, {server1})")
    by: Counter[str] = Counter()
    for _, total, line in wal:
        rel = RELATION.search(line)
        kind = re.search(r"rmgr: (\S+) .* desc: (\S+)", line)
        name = names.get(str(rel[2]), str(rel[2])) if rel else "-"
        by[f"{name} {kind[1]} {kind[2]}" if kind else name] += total
    updates, hot = upd1[0] - upd0[0], upd1[1] - upd0[1]
    return {
        "pg": sum(s - db0.get(pid, 0.0) for pid, s in db1.items()) * 1000 / n,
        "api": (server1 - server0) * 1000 / n,
        "wal": sum(total for _, total, _ in wal) / n,
        "records": sum(size for size, _, _ in wal) / n,
        "updates": updates / n,
        "hot": hot / max(updates, 1),
        "by": {k: v / n for k, v in by.most_common(25)},
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--tasks", type=int, default=1500)
    parser.add_argument("--rounds", type=int, default=4, help="each variant once per round")
    parser.add_argument("--variants", default="as-is,merged,no-hot-blockers")
    parser.add_argument("--pg-url", default=PG_URL + "/postgres")
    parser.add_argument("--pg-wal", type=Path, default=Path("/var/lib/postgresql/15/main/pg_wal"))
    parser.add_argument("--by-relation", action="store_true")
    args = parser.parse_args(argv)
    variants = args.variants.split(",")
    if unknown := set(variants) - set(VARIANTS):
        parser.error(f"no such variant: {', '.join(sorted(unknown))}")
    with TemporaryDirectory() as tmp:
        for i in range(args.rounds):
            for variant in variants if i % 2 == 0 else variants[::-1]:
                r = run(variant, args.pg_url, args.tasks, Path(tmp), args.pg_wal)
                load = Path("/proc/loadavg").read_text().split()[0]
                say(
                    f"{i} {variant:16} PostgreSQL {r['pg']:.2f} ms, API {r['api']:.2f} ms per "
                    f"task; WAL {r['wal']:,.0f} B per task ({r['records']:,.0f} B without "
                    f"full-page images); {r['updates']:.2f} task updates per "
                    f"task, {r['hot']:.0%} HOT; load {load}"
                )
                for what, size in r["by"].items() if args.by_relation else ():
                    say(f"    {size:7,.0f} B  {what}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
