"""A job seen as a job run: its state, from the job and its in-flight tasks."""

from __future__ import annotations

from enum import StrEnum

from jobnik.domain.jobs import Job
from jobnik.domain.statuses import JobStatus


class RunState(StrEnum):
    PREPARING = "PREPARING"
    RUNNING = "RUNNING"
    FINISHING = "FINISHING"
    COMPLETING = "COMPLETING"
    CLEANINGUP = "CLEANINGUP"  # a run's clean-up step: jobnik has none, so never shown
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELING = "CANCELING"
    CANCELED = "CANCELED"


def run_state(job: Job, held_by_workers: int) -> RunState:
    """The job's run state; `held_by_workers`: its tasks still IN_PROGRESS.

    COMPLETED → SUCCEEDED, FAILED → FAILED; ABORTED is CANCELING while aborted tasks are still
    held by workers (their late reports or expiring leases end them), then CANCELED. Before
    that: COMPLETING in the completion phase, FINISHING once finished, PREPARING while the job has
    no stage yet, else RUNNING (a PAUSED job keeps the state it paused in)."""
    status = JobStatus(job.status)
    if status is JobStatus.COMPLETED:
        return RunState.SUCCEEDED
    if status is JobStatus.FAILED:
        return RunState.FAILED
    if status is JobStatus.ABORTED:
        return RunState.CANCELING if held_by_workers else RunState.CANCELED
    if job.completing:
        return RunState.COMPLETING
    if job.finishing:
        return RunState.FINISHING
    if job.stage_count == 0 and not job.started:
        return RunState.PREPARING
    return RunState.RUNNING
