"""The inline read models' tables: names (`<model>_v<N>`), primary keys, a summary's counters."""

from __future__ import annotations

from typing import Final

JOBS, STAGES, SUMMARIES = "jobs_v1", "stages_v1", "summaries_v1"
TASKS, QUEUE, LOGS = "tasks_v1", "queue_v1", "task_logs_v2"
ENTITY_JOBS, JOB_EVENTS = "entity_jobs_v1", "job_events_v1"
TOKENS = "tokens_v1"
SCHEDULES, SCHEDULE_FIRES = "schedules_v1", "schedule_fires_v1"
LIMITS = "stage_type_limits_v1"
RETENTION, ARCHIVES = "retention_v1", "archives_v2"
TABLES: Final = (
    *(JOBS, STAGES, SUMMARIES, TASKS, QUEUE, LOGS, ENTITY_JOBS, JOB_EVENTS, TOKENS),
    *(SCHEDULES, SCHEDULE_FIRES, LIMITS, RETENTION, ARCHIVES),
)
PRIMARY_KEYS: Final = {
    JOBS: "id",
    STAGES: "id",
    SUMMARIES: "stage_id",
    TASKS: "id",
    QUEUE: "task_id",
    LOGS: "task_id, position",
    ENTITY_JOBS: "entity_id",
    JOB_EVENTS: "job_id, position",
    TOKENS: "id",
    SCHEDULES: "id",
    SCHEDULE_FIRES: "schedule_id, nominal_time",
    LIMITS: "id",
    RETENTION: "name",
    ARCHIVES: "job_id",
}
# The same, as column tuples.
KEYS: Final = {t: tuple(c.strip() for c in cols.split(",")) for t, cols in PRIMARY_KEYS.items()}

SUMMARY_COUNTERS: Final = (
    "pending",
    "in_progress",
    "completed",
    "failed",
    "created",
    "retried",
    "aborted",
    "total",
    "delegated",
)
