"""What the entity queries answer: a job with its stages, a stage with its summary and tasks."""

from __future__ import annotations

from dataclasses import dataclass

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


@dataclass(frozen=True)
class ChildJob:
    """A child job of a delegated task, with its tasks that completed with a result."""

    job: Job
    results: list[Task]
