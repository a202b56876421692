"""What a handler gets besides its task: the stage and job, cancellation, logs, metadata."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from functools import cached_property
from typing import Any

from jobnik.workers.consumer import Consumer
from jobnik.workers.models import ChildJob, Job, Stage, Task
from jobnik.workers.producer import Producer


class TaskContext:
    """Per-task context. `stage` and `job` are fetched once, on first use.

    `cancelled` turns true (and `cancel_event` is set) when the job is aborted, the lease is lost,
    or the worker shuts down; `cancel_reason` says which. Handlers should check it at safe points.
    """

    def __init__(self, task: Task, consumer: Consumer, producer: Producer) -> None:
        self.task = task
        self.consumer = consumer
        self.producer = producer
        self.cancel_event = threading.Event()
        self.cancel_reason: str | None = None

    @cached_property
    def stage(self) -> Stage:
        return self.producer.stage(self.task.stage_id)

    @cached_property
    def job(self) -> Job:
        return self.producer.job(self.stage.job_id)

    @property
    def redispatched(self) -> bool:
        """True when the task comes back after its child jobs ended."""
        return self.task.delegations > 0

    @cached_property
    def children(self) -> list[ChildJob]:
        """The task's child jobs, with their outcomes and results (fetched once)."""
        return self.consumer.children(self.task)

    def create_child_job(self, name: str, data: Mapping[str, Any], **options: Any) -> Job:
        """A child job of this task (add its stages and tasks with `producer`); return
        `DELEGATED` from the handler to wait for the children."""
        return self.producer.create_job(name, data, parent_task_id=self.task.id, **options)

    @property
    def cancelled(self) -> bool:
        return self.cancel_event.is_set()

    def wait_cancelled(self, timeout: float | None = None) -> bool:
        """Block until cancelled (True) or `timeout` seconds pass (False)."""
        return self.cancel_event.wait(timeout)

    def cancel(self, reason: str) -> None:
        if not self.cancel_event.is_set():
            self.cancel_reason = reason
            self.cancel_event.set()

    def log(self, *lines: str) -> None:
        """Append lines to the task's log (GET /v1/tasks/{id}/logs)."""
        self.consumer.log(self.task, list(lines))

    def update_task_user_metadata(self, metadata: Mapping[str, Any]) -> None:
        self.producer.update_task_user_metadata(self.task.id, metadata)

    def update_stage_user_metadata(self, metadata: Mapping[str, Any]) -> None:
        self.producer.update_stage_user_metadata(self.task.stage_id, metadata)

    def update_job_user_metadata(self, metadata: Mapping[str, Any]) -> None:
        self.producer.update_job_user_metadata(self.job.id, metadata)
