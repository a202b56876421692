"""Read-model rows ↔ aggregates: a row is its aggregate's latest snapshot."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from jobnik.domain.jobs import Job
from jobnik.domain.limits import StageTypeLimits
from jobnik.domain.ports import Summary
from jobnik.domain.schedules import Schedule
from jobnik.domain.stages import Stage
from jobnik.domain.tasks import Task
from jobnik.domain.tokens import Token
from jobnik.projections.inline.tables import SUMMARY_COUNTERS

# (columns the read model adds to its aggregate's state: a job's rank and gate)
_SKIP = frozenset({"id", "version", "creation_time", "update_time", "priority_rank", "gate"})


def _state(row: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in row.items() if k not in _SKIP}


def job_from_row(row: Mapping[str, Any]) -> Job:
    return Job.restore(
        row["id"],
        row["version"],
        row["creation_time"],
        row["update_time"],
        {**_state(row), "deleted": False},
    )


def stage_from_row(row: Mapping[str, Any]) -> Stage:
    state = {k: v for k, v in _state(row).items() if k not in SUMMARY_COUNTERS}
    state["order"] = state.pop("stage_order")
    state.pop("stage_id", None)
    return Stage.restore(row["id"], row["version"], row["creation_time"], row["update_time"], state)


def task_from_row(row: Mapping[str, Any]) -> Task:
    return Task.restore(
        row["id"], row["version"], row["creation_time"], row["update_time"], _state(row)
    )


def summary_from_row(row: Mapping[str, Any]) -> Summary:
    return Summary(**{k: row[k] for k in SUMMARY_COUNTERS})


def token_from_row(row: Mapping[str, Any]) -> Token:
    state = {k: row[k] for k in ("name", "role", "stage_types", "expires_at", "secret_hash")}
    state["revoked"] = row["revoked_at"] is not None
    return Token.restore(row["id"], row["version"], row["issued_at"], row["update_time"], state)


SCHEDULE_STATE = (
    *("name", "cron", "timezone", "interval_seconds", "template", "overlap", "catchup"),
    *("catchup_window", "paused", "pause_reason", "next_fire_at", "buffered_time"),
    *("last_job_id", "last_fire_time"),
)


def schedule_from_row(row: Mapping[str, Any]) -> Schedule:
    state = {k: row[k] for k in SCHEDULE_STATE}
    state.update(cursor=row["cursor_time"], deleted=False)
    return Schedule.restore(
        row["id"], row["version"], row["creation_time"], row["update_time"], state
    )


def limit_from_row(row: Mapping[str, Any]) -> StageTypeLimits:
    state = {
        k: row[k]
        for k in (
            "stage_type",
            "max_in_progress",
            "rate_starts",
            "rate_interval_seconds",
            "queue_order",
            "max_in_progress_per_key",
            "key_rate_starts",
            "key_rate_interval_seconds",
        )
    }
    return StageTypeLimits.restore(
        row["id"], row["version"], row["creation_time"], row["update_time"], state
    )
