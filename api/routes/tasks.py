"""/v1/tasks: find, read, user metadata, and the worker's status report."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Body, Depends, Path, Query
from jobnik.api.deps import JobnikDep, ViewsDep, reject_unknown_query
from jobnik.api.schemas import Message, StageType, TaskOut, TaskStatusChange
from jobnik.domain.statuses import TaskStatus

router = APIRouter(prefix="/v1", tags=["tasks"], dependencies=[Depends(reject_unknown_query)])

TaskId = Annotated[UUID, Path(alias="taskId")]


@router.get("/tasks")
def get_tasks_by_criteria(
    views: ViewsDep,
    stage_id: UUID | None = None,
    stage_type: Annotated[StageType | None, Query()] = None,
    from_date: datetime | None = None,
    end_date: datetime | None = None,
    status: TaskStatus | None = None,
) -> list[TaskOut]:
    """Tasks matching stage, type, creation-time range and status."""
    found = views.tasks(
        stage_id=stage_id,
        stage_type=stage_type,
        from_date=from_date,
        end_date=end_date,
        status=status,
    )
    return [TaskOut.of(t) for t in found]


@router.get("/tasks/{taskId}")
def get_task_by_id(views: ViewsDep, task_id: TaskId) -> TaskOut:
    """One task."""
    return TaskOut.of(views.task(task_id))


@router.patch("/tasks/{taskId}/user-metadata")
def update_task_user_metadata(
    jobnik: JobnikDep, task_id: TaskId, body: Annotated[dict[str, Any], Body()]
) -> Message:
    """Replace the task's user metadata (any status)."""
    jobnik.replace_task_user_metadata(task_id, body)
    return Message(code="TASK_MODIFIED_SUCCESSFULLY")


@router.put("/tasks/{taskId}/status")
def update_task_status(jobnik: JobnikDep, task_id: TaskId, body: TaskStatusChange) -> TaskOut:
    """Report COMPLETED or FAILED; FAILED becomes RETRIED while attempts remain."""
    return TaskOut.of(jobnik.report_task(task_id, TaskStatus(body.status)))
