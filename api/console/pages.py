"""What each console page shows, read through the query objects the `/v1` routes use."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from uuid import UUID

from jobnik.api.console.filters import PAGE_SIZE, JobFilters
from jobnik.api.history_schemas import JobRunOut
from jobnik.api.routes.catchup import job_run
from jobnik.domain.errors import JobNotFound
from jobnik.domain.jobs import Job
from jobnik.domain.statuses import JobStatus, StageStatus, TaskStatus
from jobnik.domain.tasks import Task
from jobnik.projections.queries.audit import Audit, Entry
from jobnik.projections.queries.catchup_views import CatchUpViews
from jobnik.projections.queries.results import StageView
from jobnik.projections.queries.timetravel import AsOf
from jobnik.projections.queries.views import Views, Window

ENDED = frozenset({JobStatus.COMPLETED, JobStatus.FAILED, JobStatus.ABORTED})
RERUNNABLE_TASKS = frozenset({TaskStatus.FAILED, TaskStatus.ABORTED})
FAILURES = ["TaskFailed", "TaskRetried"]  # the events whose reason is a task's last error


@dataclass(frozen=True)
class Paged:
    page: int
    total: int
    size: int = PAGE_SIZE

    @property
    def pages(self) -> int:
        return max(1, -(-self.total // self.size))

    @property
    def window(self) -> Window:
        return Window(offset=(self.page - 1) * self.size, limit=self.size, newest_first=True)


def jobs_page(views: Views, audit: Audit, filters: JobFilters) -> dict[str, Any]:
    """A page of jobs, newest first, with the counts per status of the other filters."""
    args = filters.query_args()
    listing = views.jobs(**args)
    paged = Paged(filters.page, views.total(listing))
    counts = views.counts_by_status(views.jobs(**{**args, "status": None}))
    return {
        "jobs": [v.job for v in views.read(listing, paged.window)],
        "paged": paged,
        "counts": {s: counts.get(str(s), 0) for s in JobStatus},
        "filters": filters,
        "position": audit.last_position(),
    }


def _current_stage(stages: list[StageView]) -> StageView | None:
    """The stage whose tasks the page shows first: the first one not completed, else the last."""
    for s in stages:
        if s.stage.status != StageStatus.COMPLETED:
            return s
    return stages[-1] if stages else None


def _last_errors(audit: Audit, job_id: UUID, tasks: list[Task]) -> dict[UUID, str]:
    """The reason of each failed attempt's event, the latest per task, for `tasks`."""
    wanted = {t.id for t in tasks if t.attempts or t.status in RERUNNABLE_TASKS}
    found: dict[UUID, str] = {}
    after = 0
    for _ in range(10):  # bounded: at most 10,000 failure events read per page view
        if not wanted:
            break
        page = audit.feed(after, 1000, FAILURES, job_id)
        for e in page.items:
            if e.entity_id in wanted and e.reason:
                found[e.entity_id] = e.reason
        if page.next is None:
            break
        after = page.next
    return found


def job_page(
    views: Views,
    audit: Audit,
    catchup: CatchUpViews,
    job_id: UUID,
    stage_id: UUID | None,
    task_page: int,
    as_of: AsOf | None,
) -> dict[str, Any]:
    """A job: its stages, the tasks of one of them (paged), its children, its run."""
    view = views.job(job_id, with_stages=True, as_of=as_of)
    stages = view.stages or []
    shown = next((s for s in stages if s.stage.id == stage_id), None) or _current_stage(stages)
    tasks: list[Task] = []
    paged = Paged(task_page, 0)
    if shown is not None:
        if as_of is not None:
            every = views.stage(shown.stage.id, with_tasks=True, as_of=as_of).tasks or []
            paged = Paged(task_page, len(every))
            tasks = every[paged.window.offset : paged.window.offset + paged.size]
        else:
            listing = views.tasks(stage_id=shown.stage.id)
            paged = Paged(task_page, views.total(listing))
            tasks = views.read(listing, Window(offset=paged.window.offset, limit=paged.size))
    children = views.jobs(parent_job_id=job_id)
    return {
        "job": view.job,
        "stages": stages,
        "shown": shown,
        "tasks": tasks,
        "paged": paged,
        "errors": _last_errors(audit, job_id, tasks),
        "children": [c.job for c in views.read(children, Window(limit=PAGE_SIZE))],
        "children_total": views.total(children),
        "parent": _parent(views, view.job),
        "run": _run(views, catchup, job_id) if as_of is None else None,
        "as_of": as_of,
        "ended": view.job.status in ENDED,
        "position": audit.last_position(),
        "rerunnable": RERUNNABLE_TASKS,
    }


def _parent(views: Views, job: Job) -> Job | None:
    if job.parent_job_id is None:
        return None
    try:
        return views.job(job.parent_job_id).job
    except JobNotFound:  # deleted since
        return None


def _run(views: Views, catchup: CatchUpViews, job_id: UUID) -> JobRunOut | None:
    try:
        return job_run(views, catchup, job_id)
    except JobNotFound:
        return None


def history_page(audit: Audit, views: Views, job_id: UUID, after: int) -> dict[str, Any]:
    """A page of the job's events, oldest first; the job's name when it still exists."""
    page = audit.job_history(job_id, after, 100)
    try:
        name: str | None = views.job(job_id).job.name
    except JobNotFound:
        name = None
    entries: list[Entry] = page.items
    return {"job_id": job_id, "name": name, "entries": entries, "next": page.next, "after": after}
