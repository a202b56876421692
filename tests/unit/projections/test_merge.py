"""Which row writes a PostgreSQL write session joins into one statement (projections/store/
merge.py): only writes whose order cannot matter, in their original order."""

from __future__ import annotations

from typing import Any

from jobnik.projections.store.merge import MAX_PARTS, chunks, joined, parts_of, tables

UPDATE_TASK = "UPDATE tasks_v1 SET status = %(v_status)s WHERE id = %(k_id)s"
ADD_SUMMARY = (
    "UPDATE summaries_v1 SET completed = completed + %(v_completed)s "
    "WHERE stage_id = %(k_stage_id)s"
)
DELETE_QUEUED = "DELETE FROM queue_v1 WHERE task_id = %(k_task_id)s"
FILE_EVENT = (
    "INSERT INTO job_events_v1 (job_id, position) SELECT e.job_id, v.position FROM (VALUES "
    "(%(entity_id)s::uuid, %(position)s::bigint)) AS v(entity_id, position) "
    "JOIN entity_jobs_v1 e ON e.entity_id = v.entity_id"
)
INSERT_ENTITY = (
    "INSERT INTO entity_jobs_v1 (entity_id, job_id) VALUES (%(v_entity_id)s, %(v_job_id)s)"
)


def shape(statements: list[tuple[str, dict[str, Any]]]) -> list[list[str]]:
    return [[sql for sql, _ in run] for run in chunks(statements)]


def test_a_statement_names_the_table_it_writes_and_those_it_reads() -> None:
    assert tables(FILE_EVENT) == ("job_events_v1", frozenset({"entity_jobs_v1"}))
    assert tables(UPDATE_TASK) == ("tasks_v1", frozenset())
    assert tables("SELECT 1") is None
    assert tables("WITH x AS (SELECT 1) DELETE FROM queue_v1") is None


def test_writes_of_distinct_tables_that_read_none_of_them_join() -> None:
    writes = [(UPDATE_TASK, {}), (ADD_SUMMARY, {}), (DELETE_QUEUED, {}), (FILE_EVENT, {})]

    assert shape(writes) == [[UPDATE_TASK, ADD_SUMMARY, DELETE_QUEUED, FILE_EVENT]]


def test_a_second_write_of_a_table_starts_a_new_statement() -> None:
    writes = [(UPDATE_TASK, {}), (ADD_SUMMARY, {}), (UPDATE_TASK, {})]

    assert shape(writes) == [[UPDATE_TASK, ADD_SUMMARY], [UPDATE_TASK]]


def test_a_read_of_a_table_written_before_it_starts_a_new_statement() -> None:
    # the history index reads entity_jobs_v1: it must see the row inserted before it
    writes = [(UPDATE_TASK, {}), (INSERT_ENTITY, {}), (FILE_EVENT, {}), (DELETE_QUEUED, {})]

    assert shape(writes) == [[UPDATE_TASK, INSERT_ENTITY], [FILE_EVENT, DELETE_QUEUED]]


def test_a_statement_of_another_form_stays_alone_and_in_place() -> None:
    other = "SELECT jobnik_assert_fresh(1, 1)"
    writes = [(UPDATE_TASK, {}), (other, {}), (ADD_SUMMARY, {})]

    assert shape(writes) == [[UPDATE_TASK], [other], [ADD_SUMMARY]]


def test_a_run_holds_at_most_max_parts_writes() -> None:
    writes = [(f"DELETE FROM t{i} WHERE id = %(k_id)s", {}) for i in range(MAX_PARTS + 1)]

    assert [len(run) for run in chunks(writes)] == [MAX_PARTS, 1]


def test_joined_writes_keep_each_part_s_parameters_apart() -> None:
    sql = joined((UPDATE_TASK, DELETE_QUEUED))

    assert sql == (
        "WITH w0 AS (UPDATE tasks_v1 SET status = %(w0_v_status)s WHERE id = %(w0_k_id)s) "
        "DELETE FROM queue_v1 WHERE task_id = %(w1_k_task_id)s"
    )
    assert parts_of(("w0_v_status", "w0_k_id", "w11_k_task_id")) == (
        (0, "v_status"),
        (0, "k_id"),
        (11, "k_task_id"),
    )
