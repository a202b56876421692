"""What each console page shows, read through the query objects the `/v1` routes use."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final
from uuid import UUID

from markupsafe import Markup

from jobnik.api.console import charts, explain
from jobnik.api.console.filters import PAGE_SIZE, JobFilters
from jobnik.api.history_schemas import JobRunOut
from jobnik.api.routes.catchup import job_run
from jobnik.domain.errors import JobNotFound, TaskNotFound
from jobnik.domain.jobs import Job
from jobnik.domain.statuses import JobStatus, StageStatus, TaskStatus
from jobnik.domain.tasks import Task
from jobnik.projections.catchup.activity import WINDOW_MINUTES
from jobnik.projections.queries.activity import ActivityViews, JobMinute, TypeActivity
from jobnik.projections.queries.audit import Audit, Entry
from jobnik.projections.queries.catchup_views import CatchUpViews
from jobnik.projections.queries.results import StageView
from jobnik.projections.queries.timetravel import AsOf
from jobnik.projections.queries.views import Views, Window

ENDED = frozenset({JobStatus.COMPLETED, JobStatus.FAILED, JobStatus.ABORTED})
RERUNNABLE_TASKS = frozenset({TaskStatus.FAILED, TaskStatus.ABORTED})
FAILURES = ["TaskFailed", "TaskRetried"]  # the events whose reason is a task's last error
CHART_MINUTES: Final = 60  # the queues page's window
CHART_TYPES: Final = 10  # stage types charted a page
JOB_CHART_MINUTES: Final = 30  # the narrowest a job's chart gets


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
    activity: ActivityViews,
    job_id: UUID,
    stage_id: UUID | None,
    task_page: int,
    as_of: AsOf | None,
    now: datetime,
    task_id: UUID | None = None,
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
        elif task_id is not None:
            tasks = [t for t in _task(views, task_id) if t.stage_id == shown.stage.id]
            paged = Paged(1, len(tasks))
        else:
            listing = views.tasks(stage_id=shown.stage.id)
            paged = Paged(task_page, views.total(listing))
            tasks = views.read(listing, Window(offset=paged.window.offset, limit=paged.size))
    children = views.jobs(parent_job_id=job_id)
    run = _run(views, catchup, job_id) if as_of is None else None
    return {
        "job": view.job,
        "stages": stages,
        "shown": shown,
        "tasks": tasks,
        "only_task": task_id if as_of is None else None,
        "paged": paged,
        "errors": _last_errors(audit, job_id, tasks),
        "children": [c.job for c in views.read(children, Window(limit=PAGE_SIZE))],
        "children_total": views.total(children),
        "parent": _parent(views, view.job),
        "run": run,
        "progress": explain.progress(view.job, stages),
        "counters": explain.run_counters(run.tasks) if run else [],
        "waiting": {
            t.id: explain.waiting(t, shown.stage, view.job, None if as_of else now)
            for t in tasks
            if shown is not None
        },
        "completions": None
        if as_of is not None
        else completions_chart(activity.job(job_id), None if view.job.status in ENDED else now),
        "as_of": as_of,
        "ended": view.job.status in ENDED,
        "position": audit.last_position(),
        "rerunnable": RERUNNABLE_TASKS,
    }


def _task(views: Views, task_id: UUID) -> list[Task]:
    try:
        return [views.task(task_id)]
    except TaskNotFound:  # (a link to a task deleted since: no task to show)
        return []


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


@dataclass(frozen=True)
class TypeCharts:
    """A stage type's hour on the queues page: its figures and two charts."""

    stage_type: str
    queued: int
    completed: int
    retried: int
    failed: int
    dequeued: int
    depth: Markup
    throughput: Markup


def type_charts(index: int, a: TypeActivity) -> TypeCharts:
    start = a.minutes[0].start
    total = {k: sum(getattr(m, k) for m in a.minutes) for k in ("completed", "retried", "failed")}
    return TypeCharts(
        a.stage_type,
        a.queued,
        dequeued=sum(m.dequeued for m in a.minutes),
        depth=charts.line(
            f"depth-{index}",
            f"Queued tasks of {a.stage_type}, minute by minute",
            start,
            charts.Series("queued", "s-queued", [m.queued for m in a.minutes]),
        ),
        throughput=charts.bars(
            f"throughput-{index}",
            f"Tasks of {a.stage_type} ended per minute",
            start,
            [
                charts.Series("completed", "s-completed", [m.completed for m in a.minutes]),
                charts.Series("retried", "s-retried", [m.retried for m in a.minutes]),
                charts.Series("failed", "s-failed", [m.failed for m in a.minutes]),
            ],
        ),
        **total,
    )


def queues_page(activity: ActivityViews, now: datetime, page: int) -> dict[str, Any]:
    """The stage types with queued tasks or activity in the last hour, charted, a page of them."""
    paged = Paged(page, 0, CHART_TYPES)
    total, found = activity.stage_types(
        now, CHART_MINUTES, offset=paged.window.offset, limit=CHART_TYPES
    )
    return {
        "activity": [type_charts(i, a) for i, a in enumerate(found)],
        "paged": Paged(page, total, CHART_TYPES),
        "minutes": CHART_MINUTES,
    }


def completions_chart(minutes: list[JobMinute], until: datetime | None) -> Markup | None:
    """The job's completed tasks per minute as bars, on to `until` (a job still running: now),
    `JOB_CHART_MINUTES` at least (None: no completion in the day kept)."""
    if not minutes:
        return None
    counts = [m.completed for m in minutes]
    if until is not None:
        later = (until - minutes[-1].start) // timedelta(minutes=1)
        counts += [0] * max(0, min(later, WINDOW_MINUTES - len(counts)))
    earlier = max(0, JOB_CHART_MINUTES - len(counts))
    return charts.bars(
        "completions",
        "Tasks of this job completed per minute",
        minutes[0].start - timedelta(minutes=earlier),
        [charts.Series("completed", "s-completed", [0] * earlier + counts)],
    )
