"""The rebuild benchmark's logs: written through the engine's commands, copied to PostgreSQL."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from jobnik.domain.application import Jobnik, NewJob, NewStage, NewTask
from jobnik.domain.ports import Session
from jobnik.domain.statuses import TaskStatus
from jobnik.projections.startup import migrate
from jobnik.projections.store.backends import open_store
from jobnik.projections.store.base import SqlStore
from jobnik.projections.store.config import library_env
from jobnik.projections.store.dialect import SQLITE
from jobnik.projections.store.postgres import PostgresStore
from jobnik.projections.store.sqlite import SqliteStore
from jobnik.scripts.bench.databases import fresh_database

TASKS_PER_JOB = 1_000
GROUP = 1_000  # commands per transaction while generating


def say(line: str = "") -> None:
    print(line, flush=True)


# -- generating the log -------------------------------------------------------------------------


class GroupCommit:
    """A Store whose sessions are one shared write session, committed every `size` commands.

    `Jobnik`'s commands run unchanged on it; a command that raised would leave its group
    half-done, so the generator only issues commands that succeed."""

    def __init__(self, store: SqlStore, size: int = GROUP) -> None:
        self.store, self.size = store, size
        self._open: ExitStack | None = None
        self._session: Session | None = None
        self._commands = 0

    @contextmanager
    def session(self, *, write: bool) -> Iterator[Session]:
        if self._session is None:
            self._open = ExitStack()
            self._session = self._open.enter_context(self.store.session(write=True))
        yield self._session
        self._commands += 1
        if self._commands >= self.size:
            self.flush()

    def flush(self) -> None:
        if self._open is not None:
            self._open.close()
        self._open, self._session, self._commands = None, None, 0


def generate(store: SqlStore, events: int, label: str) -> int:
    """Jobs of TASKS_PER_JOB tasks until the log holds at least `events` events."""
    batch = GroupCommit(store)
    jobnik = Jobnik(batch)
    per_job = TASKS_PER_JOB * 3 + TASKS_PER_JOB // 20 * 2 + 8
    jobs = max(1, -(-events // per_job))
    started = time.perf_counter()
    for j in range(jobs):
        stage_type = f"bench-{j}"
        job = jobnik.create_job(NewJob(name=f"bench-{j % 7}", data={"j": j}))
        stage = jobnik.add_stage(job.id, NewStage(type=stage_type, data={}))
        jobnik.add_tasks(
            stage.id, [NewTask(data={"i": i}, max_attempts=2) for i in range(TASKS_PER_JOB)]
        )
        for i in range(TASKS_PER_JOB + TASKS_PER_JOB // 20):
            task = jobnik.dequeue(stage_type)
            outcome = (
                TaskStatus.FAILED if i % 20 == 0 and task.attempt == 1 else TaskStatus.COMPLETED
            )
            jobnik.report_task(task.id, outcome, attempt=task.attempt)
        batch.flush()
        head = int(store.recorder.max_notification_id() or 0)
        took = time.perf_counter() - started
        if (j + 1) % max(1, jobs // 5) == 0 or j + 1 == jobs:
            say(f"# {label}: {head:>9,} events written, {head / took:,.0f} events/s")
    from jobnik.projections.catchup.registry import CATCH_UP
    from jobnik.projections.catchup.runner import catch_up

    for projection in CATCH_UP:
        while catch_up(store, projection, 5_000):
            pass
    return int(store.recorder.max_notification_id() or 0)


# -- the databases ------------------------------------------------------------------------------


def write_log(path: Path, events: int, label: str) -> str:
    """A SQLite database holding a log of at least `events` events; its URL."""
    url = f"sqlite:///{path}"
    store = open_store(library_env({"JOBNIK_DATABASE_URL": url}))
    try:
        migrate(store)
        generate(store, events, label)
    finally:
        store.close()
    return url


@contextmanager
def postgres_copy(sqlite_url: str, pg_url: str, label: str) -> Iterator[str]:
    """A fresh PostgreSQL database holding a copy of the SQLite database; dropped afterwards."""
    with fresh_database(pg_url, f"jobnik_bench_rebuild_{os.getpid()}_{label}") as url:
        copy(sqlite_url, url)
        yield url


def copy(sqlite_url: str, pg_url: str) -> None:
    """Events (with their notification ids), projection tables and registry, row for row."""
    from jobnik.projections.catchup.registry import ALL
    from jobnik.projections.store.dialect import POSTGRES

    source = open_store(library_env({"JOBNIK_DATABASE_URL": sqlite_url}))
    target = open_store(library_env({"JOBNIK_DATABASE_URL": pg_url}))
    started = time.perf_counter()
    try:
        migrate(target)
        assert isinstance(source, SqliteStore)
        assert isinstance(target, PostgresStore)
        tables = [t for p in ALL for t in p.tables]
        with source.lite.get_connection(commit=False) as lite, target.pg.get_connection() as pg:
            read = lite.cursor().sqlite_cursor
            with pg.transaction(), pg.cursor() as cur:
                for table in tables:
                    cur.execute(f"DELETE FROM {table}")
                read.execute(
                    f"SELECT rowid, originator_id, originator_version, topic, state "
                    f"FROM {source.events_table} ORDER BY rowid"
                )
                with cur.copy(
                    f"COPY {target.events_table} (notification_id, originator_id, "
                    "originator_version, topic, state) FROM STDIN"
                ) as out:
                    for row in read:
                        out.write_row((row[0], row[1], row[2], row[3], bytes(row[4])))
                cur.execute(
                    f"SELECT setval(pg_get_serial_sequence('{target.events_table}', "
                    f"'notification_id'), (SELECT MAX(notification_id) FROM {target.events_table}))"
                )
                for table in tables:
                    read.execute(f"SELECT * FROM {table}")
                    columns = [d[0] for d in read.description]
                    with cur.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as out:
                        for raw in read:
                            row = SQLITE.load(dict(zip(columns, raw, strict=True)))
                            out.write_row([POSTGRES.dump(c, row[c]) for c in columns])
                read.execute("SELECT name, version, position FROM jobnik_projections")
                for name, version, position in read.fetchall():
                    cur.execute(
                        "UPDATE jobnik_projections SET version = %s, position = %s WHERE name = %s",
                        (version, position, name),
                    )
            pg.execute(f"VACUUM ANALYZE {target.events_table}")
    finally:
        source.close()
        target.close()
    say(f"# copied {sqlite_url} to PostgreSQL in {time.perf_counter() - started:.1f} s")


def count_events(url: str) -> int:
    """The events in the log at `url`."""
    store = open_store(library_env({"JOBNIK_DATABASE_URL": url}))
    try:
        return int(store.recorder.max_notification_id() or 0)
    finally:
        store.close()
