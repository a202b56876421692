"""The write path's statement shapes (projections/store/shapes.py): a batch's rows as one
statement with numbered placeholders, and its prepared form."""

from __future__ import annotations

from jobnik.projections.store.shapes import prepared_form, rows_of, values_row

FILE = (
    "INSERT INTO job_events_v1 (job_id, position) SELECT e.job_id, v.position "
    "FROM (VALUES (%(entity_id)s::uuid, %(position)s::bigint)) AS v(entity_id, position) "
    "JOIN entity_jobs_v1 e ON e.entity_id = v.entity_id"
)


def test_a_batch_lists_the_values_row_once_per_row_with_its_own_placeholders() -> None:
    sql = rows_of(FILE, 3)

    assert sql == FILE.replace(
        "(%(entity_id)s::uuid, %(position)s::bigint)",
        "(%(entity_id_0)s::uuid, %(position_0)s::bigint), "
        "(%(entity_id_1)s::uuid, %(position_1)s::bigint), "
        "(%(entity_id_2)s::uuid, %(position_2)s::bigint)",
    )
    name, text, names = prepared_form(sql)
    assert names == tuple(f"{k}_{i}" for i in range(3) for k in ("entity_id", "position"))
    assert "($5::uuid, $6::bigint)) AS v" in text
    assert name != prepared_form(rows_of(FILE, 2))[0]


def test_a_statement_without_a_values_list_has_no_row() -> None:
    assert values_row("UPDATE tasks_v1 SET status = %(v)s WHERE id = ANY(%(keys)s)") is None
    start, end = values_row(FILE) or (0, 0)
    assert FILE[start:end] == "(%(entity_id)s::uuid, %(position)s::bigint)"
