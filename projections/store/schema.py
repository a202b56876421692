"""The schema for PostgreSQL and SQLite: every column's kind, and each migration's DDL."""

from __future__ import annotations

from typing import Final

# Column kinds, so one loader turns either backend's row into the same Python values.
JSON_COLUMNS: Final = frozenset(
    {"data", "user_metadata", "result", "failure_patterns", "stage_types"}
)
UUID_COLUMNS: Final = frozenset(
    {"id", "job_id", "stage_id", "task_id", "entity_id", "last_job_id"}
    | {"parent_task_id", "parent_job_id"}
)
TIME_COLUMNS: Final = frozenset(
    {"creation_time", "update_time", "start_time", "end_time", "lease_expires_at", "time"}
    | {"last_interaction", "rebuilt_at"}  # catch-up projections and their registry
    | {"finish_time", "delegated_at"}
    | {"created_at"}  # Idempotency-Keys
    | {"expires_at", "issued_at", "revoked_at"}  # tokens
)
BOOL_COLUMNS: Final = frozenset(
    {"started", "stage_open", "job_open", "deleted", "finishing", "completing", "completion"}
)

_TYPES: Final = {
    "postgres": {
        "uuid": "uuid",
        "json": "jsonb",
        "time": "timestamptz",
        "bool": "boolean",
        "false": "false",
    },
    "sqlite": {"uuid": "TEXT", "json": "TEXT", "time": "TEXT", "bool": "INTEGER", "false": "0"},
}

_DDL: Final = """
CREATE TABLE IF NOT EXISTS jobs_v1 (
    id {uuid} PRIMARY KEY,
    version BIGINT NOT NULL,
    name TEXT NOT NULL,
    data {json} NOT NULL,
    priority TEXT NOT NULL,
    priority_rank SMALLINT NOT NULL,
    user_metadata {json} NOT NULL,
    status TEXT NOT NULL,
    percentage INTEGER NOT NULL,
    traceparent TEXT NOT NULL,
    tracestate TEXT,
    started {bool} NOT NULL,
    stage_count INTEGER NOT NULL,
    completed_stages INTEGER NOT NULL,
    creation_time {time} NOT NULL,
    update_time {time} NOT NULL,
    start_time {time},
    end_time {time}
);
CREATE INDEX IF NOT EXISTS jobs_v1_name ON jobs_v1 (name);
CREATE INDEX IF NOT EXISTS jobs_v1_creation_time ON jobs_v1 (creation_time);
CREATE TABLE IF NOT EXISTS stages_v1 (
    id {uuid} PRIMARY KEY,
    version BIGINT NOT NULL,
    job_id {uuid} NOT NULL,
    stage_order INTEGER NOT NULL,
    type TEXT NOT NULL,
    data {json} NOT NULL,
    user_metadata {json} NOT NULL,
    status TEXT NOT NULL,
    traceparent TEXT NOT NULL,
    tracestate TEXT,
    creation_time {time} NOT NULL,
    update_time {time} NOT NULL,
    start_time {time},
    end_time {time},
    UNIQUE (job_id, stage_order)
);
CREATE INDEX IF NOT EXISTS stages_v1_type ON stages_v1 (type);
CREATE TABLE IF NOT EXISTS summaries_v1 (
    stage_id {uuid} PRIMARY KEY,
    job_id {uuid} NOT NULL,
    pending INTEGER NOT NULL DEFAULT 0,
    in_progress INTEGER NOT NULL DEFAULT 0,
    completed INTEGER NOT NULL DEFAULT 0,
    failed INTEGER NOT NULL DEFAULT 0,
    created INTEGER NOT NULL DEFAULT 0,
    retried INTEGER NOT NULL DEFAULT 0,
    aborted INTEGER NOT NULL DEFAULT 0,
    total INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS summaries_v1_job ON summaries_v1 (job_id);
CREATE TABLE IF NOT EXISTS tasks_v1 (
    id {uuid} PRIMARY KEY,
    version BIGINT NOT NULL,
    stage_id {uuid} NOT NULL,
    job_id {uuid} NOT NULL,
    stage_type TEXT NOT NULL,
    data {json} NOT NULL,
    user_metadata {json} NOT NULL,
    status TEXT NOT NULL,
    attempts INTEGER NOT NULL,
    max_attempts INTEGER NOT NULL,
    attempt INTEGER NOT NULL,
    traceparent TEXT NOT NULL,
    tracestate TEXT,
    creation_time {time} NOT NULL,
    update_time {time} NOT NULL,
    start_time {time},
    end_time {time}
);
CREATE INDEX IF NOT EXISTS tasks_v1_stage ON tasks_v1 (stage_id);
CREATE INDEX IF NOT EXISTS tasks_v1_job_status ON tasks_v1 (job_id, status);
CREATE INDEX IF NOT EXISTS tasks_v1_type_status ON tasks_v1 (stage_type, status);
CREATE TABLE IF NOT EXISTS queue_v1 (
    task_id {uuid} PRIMARY KEY,
    job_id {uuid} NOT NULL,
    stage_id {uuid} NOT NULL,
    stage_type TEXT NOT NULL,
    priority_rank SMALLINT NOT NULL,
    seq BIGINT NOT NULL,
    stage_open {bool} NOT NULL,
    job_open {bool} NOT NULL
);
CREATE INDEX IF NOT EXISTS queue_v1_next ON queue_v1 (stage_type, priority_rank, seq)
    WHERE stage_open AND job_open;
CREATE INDEX IF NOT EXISTS queue_v1_job ON queue_v1 (job_id);
CREATE INDEX IF NOT EXISTS queue_v1_stage ON queue_v1 (stage_id);
"""


# Migration 2 (workers: leases, heartbeats, logs). ADD COLUMN with defaults keeps existing rows
# equal to what the projection writes for events from before leases existed.
_DDL_LEASES: Final = """
ALTER TABLE tasks_v1 ADD COLUMN lease_seconds INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tasks_v1 ADD COLUMN lease_expires_at {time};
CREATE INDEX IF NOT EXISTS tasks_v1_lease ON tasks_v1 (lease_expires_at)
    WHERE status = 'IN_PROGRESS';
CREATE TABLE IF NOT EXISTS task_logs_v1 (
    task_id {uuid} NOT NULL,
    position BIGINT NOT NULL,
    line_no INTEGER NOT NULL,
    job_id {uuid} NOT NULL,
    attempt INTEGER NOT NULL,
    time {time} NOT NULL,
    line TEXT NOT NULL,
    PRIMARY KEY (task_id, position, line_no)
);
CREATE INDEX IF NOT EXISTS task_logs_v1_job ON task_logs_v1 (job_id);
"""


# Migration 3 (history): the per-job event index, kept when a job is deleted.
_DDL_HISTORY: Final = """
CREATE TABLE IF NOT EXISTS entity_jobs_v1 (
    entity_id {uuid} PRIMARY KEY,
    job_id {uuid} NOT NULL,
    kind TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS job_events_v1 (
    job_id {uuid} NOT NULL,
    position BIGINT NOT NULL,
    PRIMARY KEY (job_id, position)
);
"""


# Migration 4 (catch-up projections and rebuilds): every projection's name, the version of the
# code that built its rows, and the log position they reflect (catchup/registry.py).
_DDL_PROJECTIONS: Final = """
CREATE TABLE IF NOT EXISTS jobnik_projections (
    name TEXT PRIMARY KEY,
    version INTEGER NOT NULL,
    position BIGINT NOT NULL,
    rebuilt_at {time}
);
"""


# Migration 6 (seed systems): delegation (seed 001), job modes and completion stages (seed 004),
# task results. The defaults are what the projection writes for events from before them.
_DDL_SEEDS: Final = """
ALTER TABLE jobs_v1 ADD COLUMN mode TEXT NOT NULL DEFAULT 'runOnce';
ALTER TABLE jobs_v1 ADD COLUMN parent_task_id {uuid};
ALTER TABLE jobs_v1 ADD COLUMN parent_job_id {uuid};
ALTER TABLE jobs_v1 ADD COLUMN completion_stages INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs_v1 ADD COLUMN finishing {bool} NOT NULL DEFAULT {false};
ALTER TABLE jobs_v1 ADD COLUMN completing {bool} NOT NULL DEFAULT {false};
ALTER TABLE jobs_v1 ADD COLUMN finish_time {time};
CREATE INDEX IF NOT EXISTS jobs_v1_parent_task ON jobs_v1 (parent_task_id);
CREATE INDEX IF NOT EXISTS jobs_v1_parent_job ON jobs_v1 (parent_job_id);
ALTER TABLE stages_v1 ADD COLUMN completion {bool} NOT NULL DEFAULT {false};
ALTER TABLE stages_v1 ADD COLUMN failure_patterns {json} NOT NULL DEFAULT '[]';
ALTER TABLE summaries_v1 ADD COLUMN delegated INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tasks_v1 ADD COLUMN result {json};
ALTER TABLE tasks_v1 ADD COLUMN delegations INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tasks_v1 ADD COLUMN delegated_at {time};
CREATE INDEX IF NOT EXISTS tasks_v1_delegated ON tasks_v1 (delegated_at)
    WHERE status = 'DELEGATED'
"""


def ddl_seeds(backend: str) -> list[str]:
    """Migration 6: delegation, job modes, completion stages, task results."""
    return _split(_DDL_SEEDS, backend)


# Migration 5 (so1's Idempotency-Key): one row per key, written in the transaction of the command
# it guards (api/idempotency.py). Not a projection: nothing in the log rebuilds it. The
# body is TEXT in both dialects so a replay answers the original bytes (jsonb reorders keys).
IDEMPOTENCY_KEYS: Final = "jobnik_idempotency_keys"
_DDL_IDEMPOTENCY: Final = """
CREATE TABLE IF NOT EXISTS jobnik_idempotency_keys (
    idempotency_key TEXT PRIMARY KEY,
    fingerprint TEXT NOT NULL,
    status INTEGER NOT NULL,
    body TEXT NOT NULL,
    position BIGINT,
    created_at {time} NOT NULL
);
CREATE INDEX IF NOT EXISTS jobnik_idempotency_keys_created_at
    ON jobnik_idempotency_keys (created_at);
"""


def _split(text: str, backend: str) -> list[str]:
    return [s.strip() for s in text.format(**_TYPES[backend]).split(";") if s.strip()]


def ddl(backend: str) -> list[str]:
    """Migration 1: the inline read models, for `backend` ('postgres'/'sqlite')."""
    return _split(_DDL, backend)


def ddl_leases(backend: str) -> list[str]:
    """Migration 2: task leases and the task log."""
    return _split(_DDL_LEASES, backend)


def ddl_history(backend: str) -> list[str]:
    """Migration 3: the history index."""
    return _split(_DDL_HISTORY, backend)


def ddl_projections(backend: str) -> list[str]:
    """Migration 4: the projection registry."""
    return _split(_DDL_PROJECTIONS, backend)


def ddl_idempotency(backend: str) -> list[str]:
    """Migration 5: the Idempotency-Key table."""
    return _split(_DDL_IDEMPOTENCY, backend)


# Migration 7 (PostgreSQL), for optimistic write sessions (see SqlSession and BatchCursor).
# `jobnik_assert_fresh`: the check a write session runs when it takes the writer lock: `seen`
# of the `expected` aggregates it loaded before the lock still have the version it read, else
# serialization_failure, and the command runs again. `jobnik_wal_flush`: one row per server
# backend, updated by the synchronous transaction that follows a write session's asynchronous
# commit, so that transaction writes WAL and its commit flushes the WAL through both (unused
# since: a logical message does it without a row, see BatchCursor.commit; the table stays for
# processes of an older version during a rolling deploy). SQLite
# needs neither: its write sessions hold the lock from BEGIN IMMEDIATE and commit synchronously.
_DDL_FRESHNESS: Final = """
CREATE OR REPLACE FUNCTION jobnik_assert_fresh(seen bigint, expected bigint) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF seen <> expected THEN
        RAISE EXCEPTION USING ERRCODE = 'serialization_failure', MESSAGE = 'stale read: '
            || (expected - seen) || ' of ' || expected || ' aggregates changed since loaded';
    END IF;
END
$$
"""
_DDL_WAL_FLUSH: Final = """
CREATE TABLE IF NOT EXISTS jobnik_wal_flush (
    backend INTEGER PRIMARY KEY,
    commits BIGINT NOT NULL
)
"""


def ddl_freshness(backend: str) -> list[str]:
    """Migration 7: the writer lock's freshness check (one statement: its body holds `;`) and
    the WAL flush table."""
    if backend != "postgres":
        return []
    return [_DDL_FRESHNESS.strip(), _DDL_WAL_FLUSH.strip()]


# Migration 8 (access control): the tokens read model, and the token that holds a task's current
# attempt. Rows from before equal what the projection writes for their events (no token events;
# attempts opened with access control off belong to no token), so nothing is rebuilt.
_DDL_TOKENS: Final = """
CREATE TABLE IF NOT EXISTS tokens_v1 (
    id {uuid} PRIMARY KEY,
    version BIGINT NOT NULL,
    name TEXT NOT NULL UNIQUE,
    role TEXT NOT NULL,
    stage_types {json} NOT NULL,
    expires_at {time},
    secret_hash TEXT NOT NULL,
    issued_at {time} NOT NULL,
    issued_by TEXT NOT NULL,
    update_time {time} NOT NULL,
    revoked_at {time},
    revoked_by TEXT
);
ALTER TABLE tasks_v1 ADD COLUMN holder TEXT
"""


def ddl_tokens(backend: str) -> list[str]:
    """Migration 8: tokens, and the holder of a task's attempt."""
    return _split(_DDL_TOKENS, backend)
