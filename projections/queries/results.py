"""What the entity queries answer: a job with its stages, a stage with its summary and tasks."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from jobnik.domain.jobs import Job
from jobnik.domain.ports import Summary
from jobnik.domain.stages import Stage
from jobnik.domain.tasks import Task


@dataclass(frozen=True)
class StageView:
    stage: Stage
    summary: Summary
    tasks: list[Task] | None = None


@dataclass(frozen=True)
class JobView:
    job: Job
    stages: list[StageView] | None = None


CHILD_RESULTS: Final = 100  # the results a child job lists (GET /v1/tasks/{taskId}/children)


@dataclass(frozen=True)
class ChildJob:
    """A child job of a delegated task, with its tasks that completed with a result: the first
    CHILD_RESULTS of them by end time, `more_results` when it has others."""

    job: Job
    results: list[Task]
    more_results: bool = False
