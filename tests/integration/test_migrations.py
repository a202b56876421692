"""Numbered migrations: a database migrated one release at a time equals a new one, on both
backends (the new one gets sql/schema.sql in one go)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import psycopg
import pytest

from jobnik.domain.application import Jobnik, NewJob, NewStage, NewTask
from jobnik.projections.inline.tables import LOGS
from jobnik.projections.queries.logs import TaskLogs
from jobnik.projections.startup import migrate
from jobnik.projections.store import migrations
from jobnik.projections.store.backends import open_store
from jobnik.projections.store.base import SqlStore
from jobnik.projections.store.config import library_env
from jobnik.projections.store.cursor import Cursor
from jobnik.projections.store.dialect import POSTGRES

Catalog = dict[str, Any]


def _squeezed(sql: str | None) -> str | None:
    return None if sql is None else re.sub(r"\s+", " ", sql).strip()


def catalog(store: SqlStore) -> Catalog:
    """Every table's columns (in order, with types, nullability and defaults), every index and
    constraint, and jobnik's functions."""
    with store.cursor(write=False) as cur:
        return _postgres(cur) if store.backend == "postgres" else _sqlite(cur)


def _postgres(cur: Cursor) -> Catalog:
    columns = cur.raw_all(
        "SELECT table_name, ordinal_position, column_name, data_type, is_nullable, "
        "column_default FROM information_schema.columns WHERE table_schema = current_schema() "
        "ORDER BY table_name, ordinal_position"
    )
    indexes = cur.raw_all(
        "SELECT tablename, indexname, indexdef FROM pg_indexes "
        "WHERE schemaname = current_schema() ORDER BY indexname"
    )
    constraints = cur.raw_all(
        "SELECT conrelid::regclass::text AS tbl, conname, pg_get_constraintdef(oid) AS def "
        "FROM pg_constraint WHERE connamespace = current_schema()::regnamespace ORDER BY conname"
    )
    functions = cur.raw_all(
        "SELECT proname, pg_get_functiondef(p.oid) AS def FROM pg_proc p "
        "WHERE pronamespace = current_schema()::regnamespace AND proname LIKE 'jobnik%%'"
    )
    return {
        "columns": [tuple(r.values()) for r in columns],
        "indexes": [tuple(r.values()) for r in indexes],
        "constraints": [tuple(r.values()) for r in constraints],
        "functions": [tuple(r.values()) for r in functions],
    }


def _sqlite(cur: Cursor) -> Catalog:
    tables = [
        r["name"]
        for r in cur.raw_all(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' "
            "ORDER BY name"
        )
    ]
    out: Catalog = {"tables": tables}
    for table in tables:
        out[f"{table} columns"] = [
            tuple(r.values()) for r in cur.raw_all(f"PRAGMA table_info({table})")
        ]
        indexes = {}
        for index in cur.raw_all(f"PRAGMA index_list({table})"):
            name = index["name"]
            sql = cur.raw_all("SELECT sql FROM sqlite_master WHERE name = :n", {"n": name})
            columns = [r["name"] for r in cur.raw_all(f"PRAGMA index_info({name})")]
            key = name if not name.startswith("sqlite_autoindex") else f"auto {columns}"
            indexes[key] = (index["unique"], index["partial"], columns, _squeezed(sql[0]["sql"]))
        out[f"{table} indexes"] = indexes
    return out


def _emptied(store: SqlStore, database_url: str) -> None:
    """Drop everything the store created (PostgreSQL: the schema; SQLite: the file)."""
    store.close()
    if database_url.startswith("sqlite:///"):
        Path(database_url.removeprefix("sqlite:///")).unlink()
        return
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("DROP SCHEMA public CASCADE")
        conn.execute("CREATE SCHEMA public")


def test_a_database_migrated_release_by_release_equals_a_new_one(database_url: str) -> None:
    env = library_env({"JOBNIK_DATABASE_URL": database_url})
    new = open_store(env)
    assert migrate(new) == [m.version for m in migrations.MIGRATIONS]
    fresh = catalog(new)
    _emptied(new, database_url)

    old = open_store(env)
    try:
        old.create_tables()
        for m in migrations.MIGRATIONS:
            assert migrations.apply(old, until=m.version) == [m.version]
        assert migrate(old) == []
        migrated = catalog(old)
    finally:
        old.close()

    assert migrated == fresh
    assert any("jobs_v1" in str(row) for row in fresh.get("columns", fresh.get("tables", [])))


def test_migrations_are_numbered_from_one_without_gaps() -> None:
    assert [m.version for m in migrations.MIGRATIONS] == list(
        range(1, len(migrations.MIGRATIONS) + 1)
    )
    assert all(m.description for m in migrations.MIGRATIONS)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("-- a comment\nCREATE TABLE a (x {uuid});\n\nCREATE INDEX i ON a (x);\n", 2),
        (
            "CREATE FUNCTION f() RETURNS void LANGUAGE plpgsql AS $$\n"
            "BEGIN\n  PERFORM 1;\nEND\n$$;\n",
            1,
        ),
        ("SELECT 1", 1),
    ],
)
def test_a_migration_file_splits_into_its_statements(text: str, expected: int) -> None:
    found = migrations.statements(text, POSTGRES)

    assert len(found) == expected
    assert not any(s.endswith(";") for s in found)
    assert "{uuid}" not in " ".join(found)


def test_the_upgrade_to_a_row_per_log_append_rebuilds_the_logs_from_the_log(
    database_url: str,
) -> None:
    """A database from before migration 11 kept a row per line: the upgrade makes the new table
    and fills it from the events, each append with its actor."""
    store = open_store(library_env({"JOBNIK_DATABASE_URL": database_url}))
    try:
        migrate(store)
        jobnik = Jobnik(store)
        job = jobnik.create_job(NewJob(name="upgrade", data={}))
        stage = jobnik.add_stage(job.id, NewStage(type="logged", data={}))
        jobnik.add_tasks(stage.id, [NewTask(data={})])
        task = jobnik.dequeue("logged")
        jobnik.append_log(task.id, ["one", "two"], task.attempt)
        jobnik.append_log(task.id, ["three"], task.attempt)
        with store.cursor(write=True) as cur:  # the tables as the release before it left them
            cur.execute(f"DROP TABLE {LOGS}")
            for statement in migrations.MIGRATIONS[1].statements(store.dialect):
                if "task_logs_v1" in statement:
                    cur.execute(statement)
            cur.execute("DELETE FROM jobnik_migrations WHERE version = 11")

        assert migrate(store) == [11]
        page = TaskLogs(store).page(task.id, None, 10)
    finally:
        store.close()

    assert [(ln.line, ln.attempt, ln.actor) for ln in page.lines] == [
        ("one", 1, "worker"),
        ("two", 1, "worker"),
        ("three", 1, "worker"),
    ]
