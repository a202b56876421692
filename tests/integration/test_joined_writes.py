"""A PostgreSQL write session joins independent row writes into one statement (projections/store/
merge.py): the rows written are those the statements write one by one, and a write that reads a
table written before it still sees that write."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from jobnik.projections.inline.ops import Insert, Update
from jobnik.projections.store.batch import batch_transaction
from jobnik.projections.store.dialect import Dialect
from jobnik.projections.store.executor import OpExecutor

TABLES = """
CREATE TEMP TABLE jw_tasks (id int PRIMARY KEY, status text);
CREATE TEMP TABLE jw_counts (id int PRIMARY KEY, n int);
CREATE TEMP TABLE jw_entities (id int PRIMARY KEY, job int);
CREATE TEMP TABLE jw_index (job int, position int);
INSERT INTO jw_tasks VALUES (1, 'PENDING'), (2, 'PENDING');
INSERT INTO jw_counts VALUES (1, 0)
"""
UPDATE_TASK = "UPDATE jw_tasks SET status = %(v_status)s WHERE id = %(k_id)s"
ADD = "UPDATE jw_counts SET n = n + %(v_n)s WHERE id = %(k_id)s"
DELETE_TASK = "DELETE FROM jw_tasks WHERE id = %(k_id)s"
INSERT_ENTITY = "INSERT INTO jw_entities (id, job) VALUES (%(v_id)s, %(v_job)s)"
FILE = (
    "INSERT INTO jw_index (job, position) SELECT e.job, v.position FROM (VALUES "
    "(%(entity)s::int, %(position)s::int)) AS v(entity, position) "
    "JOIN jw_entities e ON e.id = v.entity"
)


@pytest.fixture
def conn(pg_server_url: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(pg_server_url, autocommit=True) as c:
        c.execute(TABLES)
        yield c


def rows(conn: psycopg.Connection[Any], table: str) -> list[tuple[Any, ...]]:
    return conn.execute(f"SELECT * FROM {table} ORDER BY 1").fetchall()  # type: ignore[arg-type]


def test_joined_writes_write_every_row(conn: psycopg.Connection[Any]) -> None:
    with batch_transaction(conn, Dialect()) as cur:
        cur.execute_writes(
            [
                (UPDATE_TASK, {"v_status": "DONE", "k_id": 1}),
                (ADD, {"v_n": 2, "k_id": 1}),
                (INSERT_ENTITY, {"v_id": 7, "v_job": 70}),
            ]
        )
        assert len([s for s in cur._queue if s.startswith("EXECUTE")]) == 1  # one statement

    assert rows(conn, "jw_tasks") == [(1, "DONE"), (2, "PENDING")]
    assert rows(conn, "jw_counts") == [(1, 2)]
    assert rows(conn, "jw_entities") == [(7, 70)]


def test_a_write_reading_an_earlier_write_s_table_sees_its_row(
    conn: psycopg.Connection[Any],
) -> None:
    with batch_transaction(conn, Dialect()) as cur:
        cur.execute_writes(
            [
                (INSERT_ENTITY, {"v_id": 7, "v_job": 70}),
                (FILE, {"entity": 7, "position": 3}),
                (DELETE_TASK, {"k_id": 2}),
                (UPDATE_TASK, {"v_status": "DONE", "k_id": 1}),
            ]
        )

    assert rows(conn, "jw_index") == [(70, 3)]
    assert rows(conn, "jw_tasks") == [(1, "DONE")]


def test_a_batch_of_updates_by_key_runs_after_the_writes_before_it(
    conn: psycopg.Connection[Any],
) -> None:
    # a task created (its own run), then it and another dequeued together (a batch by keys):
    # the batch's UPDATE must see the row the INSERT before it wrote
    insert = Insert("jw_tasks", {"id": 3, "status": "PENDING"})
    batch = [[Update("jw_tasks", {"id": i}, {"status": "RUNNING"})] for i in (1, 3)]
    with batch_transaction(conn, Dialect()) as cur:
        OpExecutor(Dialect()).run(cur, [[[insert]], batch])

    assert rows(conn, "jw_tasks") == [(1, "RUNNING"), (2, "PENDING"), (3, "RUNNING")]
