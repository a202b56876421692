"""The batched worker protocol's bodies: a batched dequeue's answer, a batched report and its
per-item answers."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final
from uuid import UUID

from fastapi import Response
from pydantic import Field

from jobnik.api.errors import status_for
from jobnik.api.schemas import Attempt, OutModel, TaskOut, TaskStatusChange
from jobnik.domain.batches import Outcome
from jobnik.domain.statuses import TaskStatus
from jobnik.domain.tasks import Task
from jobnik.domain.work import Report

BATCH_ANSWER: Final[dict[str, Any]] = {
    "description": "without `count`: the task (404 TASK_NOT_FOUND when none is queued); with "
    "`count` (jobnik): an array of up to `count` tasks, empty when none is queued",
    "content": {
        "application/json": {
            "schema": {
                "oneOf": [
                    {"$ref": "#/components/schemas/TaskOut"},
                    {"type": "array", "items": {"$ref": "#/components/schemas/TaskOut"}},
                ]
            }
        }
    },
}


def tasks_response(tasks: Sequence[Task]) -> Response:
    return TaskOut.list_response([TaskOut.of(t) for t in tasks])


class TaskReport(TaskStatusChange):
    """One task's outcome in a batched report: `PUT /v1/tasks/{taskId}/status`'s body, with the
    task's id and its (required) attempt."""

    id: UUID
    attempt: Attempt = Field(description="the reporting attempt; a stale one gets 409")

    def report(self) -> Report:
        return Report(
            self.id,
            self.attempt,
            self.status,
            reason=self.reason,
            fatal=self.fatal,
            result=self.result,
        )


class ReportAnswer(OutModel):
    """One item's answer: `ok` with the task's status and attempt after the report, or the
    HTTP status, `code` and `message` a single report would have answered."""

    id: UUID
    ok: bool
    http_status: int = Field(description="what `PUT /v1/tasks/{taskId}/status` would answer")
    status: TaskStatus | None = Field(default=None, description="the task's status after it")
    attempt: int | None = None
    code: str | None = Field(default=None, description="the error's code, when not ok")
    message: str | None = Field(default=None, description="the error's message, when not ok")

    @classmethod
    def of(cls, outcome: Outcome) -> ReportAnswer:
        """The item's answer; an error's HTTP status is the single report's."""
        if outcome.error is not None:
            e = outcome.error
            return cls(
                id=outcome.task_id,
                ok=False,
                http_status=status_for("update_task_status", e),
                code=e.code,
                message=str(e),
            )
        t = outcome.task
        assert t is not None
        return cls(
            id=t.id, ok=True, http_status=200, status=TaskStatus(t.status), attempt=t.attempt
        )
