"""Time travel: a job, its stages (with summaries) and tasks as they were at a log position or time.

Computed from the events alone (through the history index), not from the read models.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

from jobnik.domain.errors import InvalidRequest, JobNotFound, StageNotFound, TaskNotFound
from jobnik.domain.jobs import Job
from jobnik.domain.ports import Summary
from jobnik.domain.stages import Stage
from jobnik.domain.statuses import TaskStatus
from jobnik.domain.tasks import Task
from jobnik.projections.inline.task_ops import SUMMARY_KEY
from jobnik.projections.queries.audit import Audit
from jobnik.projections.queries.results import JobView, StageView


def in_utc(moment: datetime) -> datetime:
    """`moment` (time-zone aware) in UTC; a moment beyond the calendar's ends there (the first
    day of year 1 ahead of UTC, the last of 9999 behind it) is that end."""
    try:
        return moment.astimezone(UTC)
    except OverflowError:
        return (datetime.min if moment.year == 1 else datetime.max).replace(tzinfo=UTC)


@dataclass(frozen=True)
class AsOf:
    """A point in history: a log position, or a time (events stamped at or before it)."""

    position: int | None = None
    time: datetime | None = None

    @classmethod
    def parse(cls, text: str) -> AsOf:
        text = text.strip()
        if re.fullmatch("[0-9]{1,19}", text) and int(text) < 2**63:  # ASCII digits, a BIGINT
            return cls(position=int(text))
        try:
            moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            raise InvalidRequest(
                "request/query/as_of must be a log position or an ISO 8601 date-time"
            ) from None
        if moment.tzinfo is None:
            raise InvalidRequest("request/query/as_of must carry a time-zone offset")
        return cls(time=in_utc(moment))

    def includes(self, position: int, timestamp: datetime) -> bool:
        if self.position is not None:
            return position <= self.position
        assert self.time is not None
        return timestamp <= self.time


class TimeTravel:
    """Replays one job's events up to a point and shapes them like the live views."""

    def __init__(self, audit: Audit) -> None:
        self.audit = audit

    def _replay(self, job_id: UUID, at: AsOf) -> dict[UUID, Any]:
        aggregates: dict[UUID, Any] = {}
        after = 0
        while True:
            page = self.audit.job_history(job_id, after, 1000)
            for entry in page.items:
                if not at.includes(entry.position, entry.time):
                    continue
                event = entry.event
                current = aggregates.get(entry.entity_id)
                aggregates[entry.entity_id] = event.mutate(current)
            if page.next is None:
                return aggregates
            after = page.next

    def job(self, job_id: UUID, at: AsOf, *, with_tasks: bool = False) -> JobView:
        aggregates = self._replay(job_id, at)
        job = aggregates.get(job_id)
        if not isinstance(job, Job) or job.deleted:
            raise JobNotFound
        stages = sorted((a for a in aggregates.values() if isinstance(a, Stage)), key=_order)
        tasks = [a for a in aggregates.values() if isinstance(a, Task)]
        views = []
        for stage in stages:
            mine = sorted((t for t in tasks if t.stage_id == stage.id), key=_created)
            counts = Counter(SUMMARY_KEY[TaskStatus(t.status)] for t in mine)
            summary = Summary(total=len(mine), **counts)
            views.append(StageView(stage, summary, mine if with_tasks else None))
        return JobView(job, views)

    def job_of(self, entity_id: UUID, missing: type[Exception]) -> UUID:
        with self.audit.store.cursor(write=False) as cur:
            row = cur.one(
                f"SELECT job_id FROM entity_jobs_v1 WHERE entity_id = {self.audit.p('e')}",
                {"e": self.audit.store.dialect.dump("entity_id", entity_id)},
            )
        if row is None:
            raise missing
        job_id: UUID = row["job_id"]
        return job_id

    def stage(self, stage_id: UUID, at: AsOf, *, with_tasks: bool = False) -> StageView:
        job_id = self.job_of(stage_id, StageNotFound)
        try:
            view = self.job(job_id, at, with_tasks=with_tasks)
        except JobNotFound:
            raise StageNotFound from None
        for s in view.stages or []:
            if s.stage.id == stage_id:
                return s
        raise StageNotFound

    def task(self, task_id: UUID, at: AsOf) -> Task:
        job_id = self.job_of(task_id, TaskNotFound)
        try:
            view = self.job(job_id, at, with_tasks=True)
        except JobNotFound:
            raise TaskNotFound from None
        for s in view.stages or []:
            for t in s.tasks or []:
                if t.id == task_id:
                    return t
        raise TaskNotFound


def _order(stage: Stage) -> int:
    return stage.order


def _created(task: Task) -> tuple[datetime, str]:
    return task.created_on, str(task.id)
