"""The retention and archive read models: `retention_v1`, the retention period an operator set
per job name (the latest change of each name), and `archives_v2`, one row per archived job: the
log position of its archive record (which holds the rest), and its file and checksum once an
erasure rewrote them.

An archive record (`JobsArchived`, one per batch; `JobArchived`, one per job, from before) also
removes every row each of its jobs had in the inline read models (its job, stages, summaries,
tasks, queue rows, log lines and history index), in the transaction that removes their events
from the log. A rebuild no longer sees those events, so its removals find no rows: live tables
and rebuilt ones end the same. A schedule's run keeps its fire key (`schedule_fires_v1`, written
by the run's creation event): the record writes it again from its entry, so a rebuild has it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from jobnik.domain.archives import ARCHIVED, ArchiveErasure, ArchiveFile, RetentionChange
from jobnik.projections.inline.ops import Delete, Insert, Op, Update
from jobnik.projections.inline.tables import (
    ARCHIVES,
    ENTITY_JOBS,
    JOB_EVENTS,
    JOBS,
    LOGS,
    QUEUE,
    RETENTION,
    SCHEDULE_FIRES,
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


def _archived(file: ArchiveFile, position: int) -> list[Op]:
    """A job's archive: its rows leave, its record enters (and a schedule's run's fire key is
    written again as it was: a rebuild, without the run's events, gets it from here)."""
    job = {"job_id": file.job_id}
    ops: list[Op] = [
        *job_rows(file.job_id),
        Delete(JOB_EVENTS, job),
        Delete(ENTITY_JOBS, job),
        Insert(ARCHIVES, {"job_id": file.job_id, "position": position}),
    ]
    if file.fire is not None:
        f = file.fire
        key = {"schedule_id": f.schedule_id, "nominal_time": f.nominal_time}
        row = {**key, "job_id": file.job_id, "started_by": f.started_by, "fired_at": f.fired_at}
        ops += [Delete(SCHEDULE_FIRES, key), Insert(SCHEDULE_FIRES, row)]
    return ops


def _jobs_archived(e: Any, position: int) -> list[Op]:
    return [op for file in e.files for op in _archived(file, position)]


ARCHIVE_PROJECT: Final[Mapping[type, Callable[[Any, int], list[Op]]]] = {
    RetentionChange.RetentionSet: _retention_set,
    **dict.fromkeys(ARCHIVED, _jobs_archived),
    # (its file now: the one written without the job's user data)
    ArchiveErasure.ArchiveErased: lambda e, _: [
        Update(ARCHIVES, {"job_id": e.job_id}, {"location": e.location, "checksum": e.checksum})
    ],
}
