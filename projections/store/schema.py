"""Every column's kind, so one loader turns either backend's row into the same Python values.

The tables themselves are in sql/schema.sql and sql/migrations/."""

from __future__ import annotations

from typing import Final

JSON_COLUMNS: Final = frozenset(
    {"data", "user_metadata", "result", "failure_patterns", "stage_types", "lines"}
    | {"template", "retry_policy"}
)
UUID_COLUMNS: Final = frozenset(
    {"id", "job_id", "stage_id", "task_id", "entity_id", "last_job_id"}
    | {"parent_task_id", "parent_job_id"}
    | {"schedule_id", "last_failed_job_id"}
)
TIME_COLUMNS: Final = frozenset(
    {"creation_time", "update_time", "start_time", "end_time", "lease_expires_at", "time"}
    | {"last_interaction", "rebuilt_at"}  # catch-up projections and their registry
    | {"last_dequeue_at", "last_event_at", "last_expired_at", "since"}  # operations
    | {"finish_time", "delegated_at"}
    | {"created_at"}  # Idempotency-Keys
    | {"expires_at", "issued_at", "revoked_at"}  # tokens
    | {"cursor_time", "next_fire_at", "buffered_time", "last_fire_time"}  # schedules
    | {"nominal_time", "fired_at", "failing_since"}
    | {"set_time"}  # retention
    | {"not_before", "deadline"}  # time
)
BOOL_COLUMNS: Final = frozenset(
    {"started", "stage_open", "job_open", "deleted", "finishing", "completing", "completion"}
    | {"open", "paused", "held"}
)
# Columns that hold a log position: written through `jobnik_position` on PostgreSQL.
POSITION_COLUMNS: Final = frozenset({"position", "seq"})
