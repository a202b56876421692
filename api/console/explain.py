"""What the job page's numbers mean, in words: the job's progress beside its tasks', the run
counters, and why a queued task is not being worked on."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Final

from jobnik.api.history_schemas import TaskCountsOut
from jobnik.domain.jobs import Job
from jobnik.domain.stages import Stage
from jobnik.domain.statuses import TASK_QUEUED, JobStatus, StageStatus, TaskStatus
from jobnik.domain.tasks import Task
from jobnik.projections.inline.queue import is_open
from jobnik.projections.queries.results import StageView

# Each run counter (GET /v1/jobs/{id}/run, `tasks`): its name in words and what it counts.
RUN_COUNTERS: Final = {
    "created": ("created", "runs of tasks started: each task once, plus once per retry and rerun"),
    "successful": ("successful", "completed"),
    "retried_after_error": ("retried after error", "a failed attempt, queued again"),
    "retried_after_timeout": (
        "retried after timeout",
        "a lease that ran out (no heartbeat), queued again",
    ),
    "failed_after_retry": ("failed after retry", "failed for good: its attempts ran out"),
    "failed_without_retry": ("failed without retry", "failed for good at once (a fatal error)"),
    "canceled": ("canceled", "aborted with the job"),
    "obsolete": ("obsolete", "still queued when the job ended (a failed job's leftovers)"),
    "expired": ("expired", "not dequeued within its stage's schedule-to-start limit"),
}


@dataclass(frozen=True)
class Counter:
    key: str
    name: str
    value: int
    meaning: str


@dataclass(frozen=True)
class Progress:
    """The job's progress (Jobnik's rule: its completed stages) and its tasks' (completed of
    all), side by side."""

    stages_done: int
    stages: int
    percentage: int  # the job's own, of stages
    tasks_done: int
    tasks: int

    @property
    def tasks_percentage(self) -> int:
        return self.tasks_done * 100 // self.tasks if self.tasks else 0


def progress(job: Job, stages: list[StageView]) -> Progress:
    return Progress(
        job.completed_stages,
        job.stage_count,
        job.percentage,
        sum(s.summary.completed for s in stages),
        sum(s.summary.total for s in stages),
    )


def run_counters(tasks: TaskCountsOut) -> list[Counter]:
    """The run's counters with their names and meanings, in the API's order."""
    values = tasks.model_dump()
    return [
        Counter(key, name, values[f"{key}_task_count"], meaning)
        for key, (name, meaning) in RUN_COUNTERS.items()
    ]


def age(seconds: float) -> str:
    """A duration as the console shows it: seconds, minutes or hours."""
    if seconds < 120:
        return f"{round(seconds)} s"
    if seconds < 7200:
        return f"{round(seconds / 60)} min"
    return f"{round(seconds / 3600)} h"


def waiting(task: Task, stage: Stage, job: Job, now: datetime | None) -> str:
    """Why a task is where it is, and for how long (`now` None: the past, no ages): a queued
    task waits for a worker only while its job and stage are open."""
    queued = f"queued {age((now - task.modified_on).total_seconds())} ago" if now else "queued"
    if task.status in TASK_QUEUED:
        if job.status == JobStatus.PAUSED:
            return f"paused with its job ({queued})" if now else "paused with its job"
        if not is_open(job.status):
            return f"not handed out while its job is {job.status}"
        if stage.status in (StageStatus.CREATED, StageStatus.WAITING):
            return "held until its stage is released"
        if not is_open(stage.status):
            return f"not handed out while its stage is {stage.status}"
        return queued
    if task.status == TaskStatus.IN_PROGRESS:
        return "held by a worker"
    if task.status == TaskStatus.DELEGATED:
        return "waiting for its child jobs"
    return "—"
