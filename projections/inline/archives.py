"""The retention and archive read models: `retention_v1`, the retention period an operator set
per job name (the latest change of each name), and `archives_v1`, one row per archived job.

A job's `JobArchived` also removes every row the job had in the inline read models (its job,
stages, summaries, tasks, queue rows, log lines and history index), in the transaction that
removes its events from the log. A rebuild no longer sees those events, so its removals find no
rows: live tables and rebuilt ones end the same.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from jobnik.domain.archives import Archive, ArchiveErasure, RetentionChange
from jobnik.projections.inline.ops import Delete, Insert, Op, Update
from jobnik.projections.inline.tables import (
    ARCHIVES,
    ENTITY_JOBS,
    JOB_EVENTS,
    JOBS,
    LOGS,
    QUEUE,
    RETENTION,
    STAGES,
    SUMMARIES,
    TASKS,
)


def _retention_set(e: Any, _: int) -> list[Op]:
    ops: list[Op] = [Delete(RETENTION, {"name": e.name})]
    if e.period_seconds is not None:
        row = {
            "name": e.name,
            "period_seconds": e.period_seconds,
            "set_by": e.actor,
            "set_time": e.timestamp,
        }
        ops.append(Insert(RETENTION, row))
    return ops


def job_rows(job_id: Any) -> list[Op]:
    """The removal of the job's rows from the live read models (a deletion's too)."""
    job = {"job_id": job_id}
    return [
        Delete(QUEUE, job),
        Delete(LOGS, job),
        Delete(TASKS, job),
        Delete(SUMMARIES, job),
        Delete(STAGES, job),
        Delete(JOBS, {"id": job_id}),
    ]


def _job_archived(e: Any, _: int) -> list[Op]:
    job = {"job_id": e.job_id}
    return [
        *job_rows(e.job_id),
        Delete(JOB_EVENTS, job),
        Delete(ENTITY_JOBS, job),
        Insert(
            ARCHIVES,
            {
                "job_id": e.job_id,
                "name": e.name,
                "location": e.location,
                "checksum": e.checksum,
                "events": e.events,
                "last_position": e.last_position,
                "ended_at": e.ended_at,
                "archived_by": e.actor,
                "archived_at": e.timestamp,
            },
        ),
    ]


ARCHIVE_PROJECT: Final[Mapping[type, Callable[[Any, int], list[Op]]]] = {
    RetentionChange.RetentionSet: _retention_set,
    Archive.JobArchived: _job_archived,
    # (its file now: the one written without the job's user data)
    ArchiveErasure.ArchiveErased: lambda e, _: [
        Update(ARCHIVES, {"job_id": e.job_id}, {"location": e.location, "checksum": e.checksum})
    ],
}
