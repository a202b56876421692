"""The history index: which job every event belongs to (kept after the job is deleted).

`entity_jobs_v1` maps each job, stage and task to its job; `job_events_v1` lists, per job, the log
positions of the events of the job, its stages and its tasks. Both are inline (same transaction as
the events) and pure functions of the log, so they rebuild like every other read model.
"""

from __future__ import annotations

from typing import Any

from jobnik.domain.jobs import Job
from jobnik.domain.stages import Stage
from jobnik.domain.tasks import Task

KIND = {Job.JobCreated: "job", Stage.StageAdded: "stage", Task.TaskCreated: "task"}


def entity_row(event: Any) -> dict[str, Any] | None:
    """The `entity_jobs_v1` row a creation event adds (its aggregate and the aggregate's job);
    None for other events. (`project.project` files every event under it: `IndexEvent`.)"""
    kind = KIND.get(type(event))
    if kind is None:
        return None
    job_id = event.originator_id if kind == "job" else event.job_id
    return {"entity_id": event.originator_id, "job_id": job_id, "kind": kind}
