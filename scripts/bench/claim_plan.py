"""The claim query `SqlSession.claim` runs: its SQL, its query plan and its bare cost."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any, Final

from jobnik.projections.store.base import SqlStore
from jobnik.projections.store.postgres import PostgresStore
from jobnik.projections.store.session import SqlSession
from jobnik.projections.store.sqlite import SqliteStore


class _Capture:
    """A cursor that records the statement `SqlSession.claim` runs (and finds nothing)."""

    sql: str = ""
    params: Any = None

    def one(self, sql: str, params: Any = ()) -> None:
        self.sql, self.params = sql, params

    def all(self, sql: str, params: Any = ()) -> list[Any]:
        """No key's bucket to wake (the claim that finds nothing looks for them)."""
        return []


def claim_statement(store: SqlStore, stage_type: str) -> tuple[str, Any]:
    """The engine's own claim SQL and parameters, so the figures track `SqlSession.claim`."""
    capture = _Capture()
    session = SqlSession(store, capture, write=False)  # type: ignore[arg-type]
    session.claim(stage_type, datetime.now(UTC))
    if not capture.sql:
        raise RuntimeError("SqlSession.claim ran no statement")
    return capture.sql, capture.params


# PostgreSQL's write sessions plan their statements generically (sql/queries.postgres.sql:
# `writing`); the claim's plan is checked as they run it.
GENERIC: Final = "SELECT set_config('plan_cache_mode', 'force_generic_plan', true)"


def claim_plan(store: SqlStore, stage_type: str) -> list[str]:
    sql, params = claim_statement(store, stage_type)
    with store.cursor(write=False) as cur:  # (the row locks EXPLAIN ANALYZE takes end with it)
        if isinstance(store, PostgresStore):
            cur.raw.execute(GENERIC)
            rows = cur.all(f"EXPLAIN (ANALYZE, BUFFERS) {sql}", params)
            return [r["QUERY PLAN"] for r in rows]
        cur.raw.execute(f"EXPLAIN QUERY PLAN {sql}", params)  # raw: its `id` is no uuid
        return [r["detail"] for r in cur.raw.fetchall()]


def plan_problems(store: SqlStore, lines: list[str]) -> list[str]:
    text = "\n".join(lines)
    problems = []
    if isinstance(store, PostgresStore):
        if "Seq Scan on queue_v1" in text:
            problems.append("Seq Scan on queue_v1")
    elif any(line.lstrip().startswith("SCAN queue_v1") for line in lines):
        problems.append("SCAN of queue_v1")
    if "queue_v1_next" not in text:
        problems.append("the plan does not use queue_v1_next")
    return problems


@contextmanager
def bare_claim(store: SqlStore) -> Iterator[Callable[[str], float]]:
    """A timer of the claim query alone, each run in its own transaction on one held connection."""
    if isinstance(store, PostgresStore):
        with store.pg.get_connection() as conn:

            def run_pg(stage_type: str) -> float:
                sql, params = claim_statement(store, stage_type)
                t0 = time.perf_counter()
                with conn.transaction(force_rollback=True):
                    row = conn.execute(sql, params).fetchone()
                dt = time.perf_counter() - t0
                if row is None:
                    raise RuntimeError(f"no queued task of type {stage_type}")
                return dt

            yield run_pg
    else:
        assert isinstance(store, SqliteStore)
        with store.lite.get_connection(commit=False) as lconn:
            raw = lconn.cursor().sqlite_cursor

            def run_lite(stage_type: str) -> float:
                sql, params = claim_statement(store, stage_type)
                t0 = time.perf_counter()
                raw.execute("BEGIN")
                row = raw.execute(sql, params).fetchone()
                raw.execute("ROLLBACK")
                dt = time.perf_counter() - t0
                if row is None:
                    raise RuntimeError(f"no queued task of type {stage_type}")
                return dt

            yield run_lite
