"""Floors for the benchmark suite: the same work as jobnik's, done as bare SQL with the driver.

Task lifecycle floor (`RawLifecycle`): tables `bench_floor_tasks` (one row per task, a partial
index on the pending ones, like queue_v1_next) and `bench_floor_events` (append-only, one row per
transition). Each of K threads (or processes), on its own connection, loops:

  1. one transaction: claim the next PENDING task of the stage type (`FOR UPDATE SKIP LOCKED` on
     PostgreSQL; SQLite serialises writers with BEGIN IMMEDIATE instead), mark it IN_PROGRESS,
     append a `dequeued` event row;
  2. one transaction: mark it COMPLETED, append a `completed` event row;

until the claim finds nothing. No aggregates, no read models, no job or stage bookkeeping: what
any queue on this database must at least pay per task.

Bulk floor (`raw_bulk`): the rows `add_tasks` writes for each task (the event row, and every
read-model row TaskCreated produces: tasks_v1, queue_v1, the history index), copied from a task
the engine created and inserted with one multi-row INSERT per table per batch, plus one summary
increment per batch; one transaction per batch.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg.rows import dict_row, tuple_row
from psycopg.types.json import Jsonb

PG_DDL = """
CREATE TABLE IF NOT EXISTS bench_floor_tasks (
    id uuid PRIMARY KEY, stage_type text NOT NULL, status text NOT NULL, seq bigint NOT NULL,
    data jsonb NOT NULL);
CREATE INDEX IF NOT EXISTS bench_floor_next ON bench_floor_tasks (stage_type, seq)
    WHERE status = 'PENDING';
CREATE TABLE IF NOT EXISTS bench_floor_events (
    position bigserial PRIMARY KEY, task_id uuid NOT NULL, type text NOT NULL,
    state bytea NOT NULL)
"""
LITE_DDL = """
CREATE TABLE IF NOT EXISTS bench_floor_tasks (
    id TEXT PRIMARY KEY, stage_type TEXT NOT NULL, status TEXT NOT NULL, seq INTEGER NOT NULL,
    data TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS bench_floor_next ON bench_floor_tasks (stage_type, seq)
    WHERE status = 'PENDING';
CREATE TABLE IF NOT EXISTS bench_floor_events (
    position INTEGER PRIMARY KEY, task_id TEXT NOT NULL, type TEXT NOT NULL, state BLOB NOT NULL)
"""
PG_CLAIM = """
UPDATE bench_floor_tasks t SET status = 'IN_PROGRESS'
FROM (SELECT id FROM bench_floor_tasks WHERE stage_type = %s AND status = 'PENDING'
      ORDER BY seq LIMIT 1 FOR UPDATE SKIP LOCKED) next
WHERE t.id = next.id RETURNING t.id
"""
LITE_CLAIM = """
UPDATE bench_floor_tasks SET status = 'IN_PROGRESS'
WHERE id = (SELECT id FROM bench_floor_tasks WHERE stage_type = ? AND status = 'PENDING'
            ORDER BY seq LIMIT 1) RETURNING id
"""
BATCH = 1_000


def sqlite_path(url: str) -> str | None:
    """The file of a `sqlite:///path` URL, None for PostgreSQL."""
    return url.removeprefix("sqlite:///") if url.startswith("sqlite:") else None


def _state(task_id: object, kind: str) -> bytes:
    """An event body about the size of jobnik's (ids, a status, a timestamp, a cause)."""
    return json.dumps(
        {"originator_id": str(task_id), "type": kind, "timestamp": time.time(), "actor": "worker"}
    ).encode()


@dataclass
class RawResult:
    """Tasks done, the wall time it took, and each transaction's latency in seconds."""

    tasks: int
    seconds: float
    claim: list[float] = field(default_factory=list)
    done: list[float] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return self.tasks / self.seconds if self.seconds else 0.0


class RawLifecycle:
    """The task lifecycle as bare SQL on the database at `url` (its own two tables)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.path = sqlite_path(url)

    @contextmanager
    def connect(self) -> Iterator[Any]:
        if self.path is None:
            with psycopg.connect(self.url) as conn:
                yield conn
        else:
            lite = sqlite3.connect(
                self.path, isolation_level=None, timeout=60, check_same_thread=False
            )
            try:
                lite.execute("PRAGMA journal_mode=WAL")  # as the library's own connections
                yield lite
            finally:
                lite.close()

    def setup(self) -> None:
        with self.connect() as conn:
            if self.path is None:
                conn.execute(PG_DDL)
                conn.commit()
            else:
                conn.executescript(LITE_DDL)

    def load(self, stage_type: str, n: int) -> None:
        """`n` PENDING tasks of `stage_type` (untimed set-up)."""
        with self.connect() as conn:
            for first in range(0, n, BATCH):
                rows = [
                    (uuid.uuid4(), stage_type, "PENDING", first + i, json.dumps({"i": first + i}))
                    for i in range(min(BATCH, n - first))
                ]
                if self.path is None:
                    with conn.cursor() as cur:
                        cur.executemany(
                            "INSERT INTO bench_floor_tasks VALUES (%s, %s, %s, %s, %s::jsonb)", rows
                        )
                    conn.commit()
                else:
                    conn.execute("BEGIN IMMEDIATE")
                    conn.executemany(
                        "INSERT INTO bench_floor_tasks VALUES (?, ?, ?, ?, ?)",
                        [(str(r[0]), *r[1:]) for r in rows],
                    )
                    conn.execute("COMMIT")

    def work(self, conn: Any, stage_type: str, out: RawResult, lock: threading.Lock) -> None:
        """One worker on `conn`: claim and complete until `stage_type` has nothing pending."""
        claims: list[float] = []
        dones: list[float] = []
        while True:
            t0 = time.perf_counter()
            task_id = self._claim(conn, stage_type)
            t1 = time.perf_counter()
            if task_id is None:
                break
            self._done(conn, task_id)
            t2 = time.perf_counter()
            claims.append(t1 - t0)
            dones.append(t2 - t1)
        with lock:
            out.claim += claims
            out.done += dones
            out.tasks += len(claims)

    def _claim(self, conn: Any, stage_type: str) -> Any:
        if self.path is None:
            with conn.transaction(), conn.cursor() as cur:
                row = cur.execute(PG_CLAIM, (stage_type,)).fetchone()
                if row is None:
                    return None
                cur.execute(
                    "INSERT INTO bench_floor_events (task_id, type, state) VALUES (%s, %s, %s)",
                    (row[0], "dequeued", _state(row[0], "dequeued")),
                )
                return row[0]
        conn.execute("BEGIN IMMEDIATE")
        try:
            row = conn.execute(LITE_CLAIM, (stage_type,)).fetchone()
            if row is not None:
                conn.execute(
                    "INSERT INTO bench_floor_events (task_id, type, state) VALUES (?, ?, ?)",
                    (row[0], "dequeued", _state(row[0], "dequeued")),
                )
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
        return None if row is None else row[0]

    def _done(self, conn: Any, task_id: Any) -> None:
        if self.path is None:
            with conn.transaction(), conn.cursor() as cur:
                cur.execute(
                    "UPDATE bench_floor_tasks SET status = 'COMPLETED' WHERE id = %s", (task_id,)
                )
                cur.execute(
                    "INSERT INTO bench_floor_events (task_id, type, state) VALUES (%s, %s, %s)",
                    (task_id, "completed", _state(task_id, "completed")),
                )
            return
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute(
                "UPDATE bench_floor_tasks SET status = 'COMPLETED' WHERE id = ?", (task_id,)
            )
            conn.execute(
                "INSERT INTO bench_floor_events (task_id, type, state) VALUES (?, ?, ?)",
                (task_id, "completed", _state(task_id, "completed")),
            )
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    def run(self, stage_type: str, k: int) -> RawResult:
        """K threads drain `stage_type`; the wall time runs from their common start to the last."""
        out = RawResult(0, 0.0)
        lock = threading.Lock()
        with ExitStack() as stack:  # connected before the clock starts
            conns = [stack.enter_context(self.connect()) for _ in range(k)]
            out.seconds = parallel(k, lambda i: self.work(conns[i], stage_type, out, lock))
        return out


def parallel(k: int, work: Callable[[int], None]) -> float:
    """`work(i)` on k threads released together; seconds from that start until the last ends.

    The first error of any thread is raised here."""
    start = threading.Barrier(k + 1, timeout=300)

    def go(i: int) -> None:
        start.wait()
        work(i)

    with ThreadPoolExecutor(k) as pool:
        futures = [pool.submit(go, i) for i in range(k)]
        start.wait()
        t0 = time.perf_counter()
        for f in futures:
            f.result()
        return time.perf_counter() - t0


# -- bulk --------------------------------------------------------------------------------------


@dataclass
class BulkTemplate:
    """The rows one TaskCreated wrote, keyed by table, as the driver returns them."""

    task_id: uuid.UUID
    event: dict[str, Any]
    rows: dict[str, dict[str, Any]]  # table -> row (tasks_v1, queue_v1, history index...)
    stage_id: Any


def bulk_template(url: str, events_table: str, task_id: uuid.UUID, stage_id: Any) -> BulkTemplate:
    """Read back what the engine wrote for one task: its event and its read-model rows."""
    path = sqlite_path(url)
    tid: Any = task_id if path is None else str(task_id)
    p = "%s" if path is None else "?"
    queries = {
        "tasks_v1": f"SELECT * FROM tasks_v1 WHERE id = {p}",
        "queue_v1": f"SELECT * FROM queue_v1 WHERE task_id = {p}",
        "entity_jobs_v1": f"SELECT * FROM entity_jobs_v1 WHERE entity_id = {p}",
    }
    event_sql = (
        f"SELECT originator_id, originator_version, topic, state FROM {events_table} "
        f"WHERE originator_id = {p} AND originator_version = 1"
    )
    rows: dict[str, dict[str, Any]] = {}
    with _connect(url) as conn:
        for table, sql in queries.items():
            found = _fetch(conn, sql, tid)
            if found:
                rows[table] = found[0]
        eid = task_id if path is None else task_id.hex  # the library's SQLite stores hex
        event = _fetch(conn, event_sql, eid)[0]
        position = _fetch(
            conn, event_sql.replace("SELECT originator_id,", f"SELECT {_position(path)} AS p,"), eid
        )[0]["p"]
        rows["job_events_v1"] = _fetch(
            conn, f"SELECT * FROM job_events_v1 WHERE position = {p}", position
        )[0]
    return BulkTemplate(task_id, event, rows, stage_id)


@contextmanager
def _connect(url: str) -> Iterator[Any]:
    path = sqlite_path(url)
    if path is None:
        with psycopg.connect(url, row_factory=dict_row) as conn:
            yield conn
    else:
        lite = sqlite3.connect(path, isolation_level=None, timeout=60)
        lite.row_factory = sqlite3.Row
        try:
            yield lite
        finally:
            lite.close()


def _position(path: str | None) -> str:
    return "notification_id" if path is None else "rowid"


def _fetch(conn: Any, sql: str, *params: Any) -> list[dict[str, Any]]:
    return [dict(r) for r in conn.execute(sql, params).fetchall()]


def _shape(row: dict[str, Any], old: uuid.UUID) -> list[Callable[[uuid.UUID, int], Any]]:
    """Per column, how a new task's value is made: its id (as the template stores ids), its
    log position (`seq`, `position`), or the template's value."""
    shape: list[Callable[[uuid.UUID, int], Any]] = []
    for column, value in row.items():
        if column in ("seq", "position"):
            shape.append(lambda _, pos: pos)
        elif value == old:
            shape.append(lambda new, _: new)
        elif value == str(old):
            shape.append(lambda new, _: str(new))
        elif value == old.hex:
            shape.append(lambda new, _: new.hex)
        else:
            const = Jsonb(value) if isinstance(value, dict | list) else value
            shape.append(lambda _, __, v=const: v)
    return shape


def _insert(
    conn: Any, pg: bool, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]], ret: str
) -> list[Any]:
    """One multi-row INSERT (PostgreSQL: $n placeholders, sent as they are)."""
    width = len(columns)
    if pg:
        values = ", ".join(
            "(" + ", ".join(f"${r * width + c + 1}" for c in range(width)) + ")"
            for r in range(len(rows))
        )
    else:
        values = ", ".join(["(" + ", ".join(["?"] * width) + ")"] * len(rows))
    sql = f"INSERT INTO {table} ({', '.join(columns)}) VALUES {values}"
    sql += f" RETURNING {ret}" if ret else ""
    params = [v for r in rows for v in r]
    if pg:
        with psycopg.RawCursor(conn, row_factory=tuple_row) as cur:
            cur.execute(sql, params)
            return [r[0] for r in cur.fetchall()] if ret else []
    found = conn.execute(sql, params).fetchall()
    return [r[0] for r in found] if ret else []


def raw_bulk(url: str, events_table: str, template: BulkTemplate, n: int) -> float:
    """Insert `n` tasks' rows, BATCH per transaction; returns the seconds it took."""
    pg = sqlite_path(url) is None
    position_column = _position(None if pg else "sqlite")
    old = template.task_id
    tables = [(events_table, template.event), *template.rows.items()]
    shapes = {table: _shape(row, old) for table, row in tables}
    started = time.perf_counter()
    with _connect(url) as conn:
        for first in range(0, n, BATCH):
            count = min(BATCH, n - first)
            ids = [uuid.uuid4() for _ in range(count)]
            if not pg:
                conn.execute("BEGIN IMMEDIATE")
            positions = [0] * count
            for table, row in tables:
                shape = shapes[table]
                made = [
                    [f(new, pos) for f in shape] for new, pos in zip(ids, positions, strict=True)
                ]
                ret = position_column if table == events_table else ""
                got = _insert(conn, pg, table, list(row), made, ret)
                positions = got or positions
            p = "%s" if pg else "?"
            conn.execute(
                f"UPDATE summaries_v1 SET pending = pending + {p}, total = total + {p} "
                f"WHERE stage_id = {p}",
                (count, count, template.stage_id),
            )
            conn.commit() if pg else conn.execute("COMMIT")
    return time.perf_counter() - started
