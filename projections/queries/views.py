"""Queries the API serves, read from the inline read models (read-your-writes after any 2xx)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from functools import cached_property
from typing import Any
from uuid import UUID

from jobnik.domain.errors import JobNotFound, StageNotFound, TaskNotFound
from jobnik.domain.ports import Summary
from jobnik.domain.tasks import Task
from jobnik.projections.inline.rows import (
    job_from_row,
    stage_from_row,
    summary_from_row,
    task_from_row,
)
from jobnik.projections.queries.audit import Audit
from jobnik.projections.queries.results import ChildJob, JobView, StageView
from jobnik.projections.queries.timetravel import AsOf, TimeTravel
from jobnik.projections.store.base import SqlStore
from jobnik.projections.store.cursor import Cursor

STAGE_SELECT = (
    "SELECT s.*, m.pending, m.in_progress, m.completed, m.failed, m.created, m.retried, "
    "m.aborted, m.total, m.delegated FROM stages_v1 s JOIN summaries_v1 m ON m.stage_id = s.id"
)


class _Where:
    """AND-ed filters with named parameters in the store's dialect."""

    def __init__(self, store: SqlStore) -> None:
        self.d = store.dialect
        self.parts: list[str] = []
        self.params: dict[str, Any] = {}

    def add(self, column: str, op: str, value: Any, key: str | None = None) -> None:
        if value is None:
            return
        name = f"p{len(self.params)}"
        self.parts.append(f"{column} {op} {self.d.param(name)}")
        self.params[name] = self.d.dump(key or column.split(".")[-1], value)

    def sql(self) -> str:
        return (" WHERE " + " AND ".join(self.parts)) if self.parts else ""


class Views:
    """Read-only queries; each opens its own short read transaction."""

    def __init__(self, store: SqlStore) -> None:
        self.store = store
        self.p = store.dialect.param
        self.d = store.dialect

    def _by_id(self, key: str, value: UUID) -> dict[str, Any]:
        return {key: self.d.dump(key, value)}

    # -- jobs -----------------------------------------------------------------------------

    @cached_property
    def history(self) -> TimeTravel:
        return TimeTravel(Audit(self.store))

    def job(self, job_id: UUID, *, with_stages: bool = False, as_of: AsOf | None = None) -> JobView:
        if as_of is not None:
            view = self.history.job(job_id, as_of)
            return view if with_stages else JobView(view.job)
        with self.store.cursor(write=False) as cur:
            row = cur.one(
                f"SELECT * FROM jobs_v1 WHERE id = {self.p('id')}", self._by_id("id", job_id)
            )
            if row is None:
                raise JobNotFound
            stages = self._stages_of(cur, [job_id]).get(job_id, []) if with_stages else None
            return JobView(job_from_row(row), stages)

    def jobs(
        self,
        *,
        name: str | None = None,
        priority: str | None = None,
        from_date: datetime | None = None,
        end_date: datetime | None = None,
        with_stages: bool = False,
        parent_task_id: UUID | None = None,
        parent_job_id: UUID | None = None,
    ) -> list[JobView]:
        w = _Where(self.store)
        w.add("name", "=", name)
        w.add("parent_task_id", "=", parent_task_id)
        w.add("parent_job_id", "=", parent_job_id)
        w.add("priority", "=", priority)
        w.add("creation_time", ">=", from_date)
        w.add("creation_time", "<=", end_date)
        with self.store.cursor(write=False) as cur:
            rows = cur.all(f"SELECT * FROM jobs_v1{w.sql()} ORDER BY creation_time, id", w.params)
            jobs = [job_from_row(r) for r in rows]
            if not with_stages:
                return [JobView(j) for j in jobs]
            stages = self._stages_of(cur, [j.id for j in jobs])
            return [JobView(j, stages.get(j.id, [])) for j in jobs]

    def _stages_of(self, cur: Cursor, job_ids: Iterable[UUID]) -> dict[UUID, list[StageView]]:
        out: dict[UUID, list[StageView]] = {}
        ids = list(job_ids)
        for chunk in range(0, len(ids), 500):
            part = ids[chunk : chunk + 500]
            names = {f"j{i}": self.d.dump("job_id", j) for i, j in enumerate(part)}
            marks = ", ".join(self.p(n) for n in names)
            rows = cur.all(
                f"{STAGE_SELECT} WHERE s.job_id IN ({marks}) ORDER BY s.job_id, s.stage_order",
                names,
            )
            for r in rows:
                out.setdefault(r["job_id"], []).append(
                    StageView(stage_from_row(r), summary_from_row(r))
                )
        return out

    # -- stages ---------------------------------------------------------------------------

    def stages_of_job(self, job_id: UUID, *, with_tasks: bool = False) -> list[StageView]:
        with self.store.cursor(write=False) as cur:
            if (
                cur.one(
                    f"SELECT id FROM jobs_v1 WHERE id = {self.p('id')}", self._by_id("id", job_id)
                )
                is None
            ):
                raise JobNotFound
            stages = self._stages_of(cur, [job_id]).get(job_id, [])
            return self._with_tasks(cur, stages) if with_tasks else stages

    def stage(
        self, stage_id: UUID, *, with_tasks: bool = False, as_of: AsOf | None = None
    ) -> StageView:
        if as_of is not None:
            return self.history.stage(stage_id, as_of, with_tasks=with_tasks)
        with self.store.cursor(write=False) as cur:
            row = cur.one(
                f"{STAGE_SELECT} WHERE s.id = {self.p('id')}", self._by_id("id", stage_id)
            )
            if row is None:
                raise StageNotFound
            view = StageView(stage_from_row(row), summary_from_row(row))
            return self._with_tasks(cur, [view])[0] if with_tasks else view

    def stages(
        self,
        *,
        job_id: UUID | None = None,
        stage_type: str | None = None,
        status: str | None = None,
        with_tasks: bool = False,
    ) -> list[StageView]:
        w = _Where(self.store)
        w.add("s.job_id", "=", job_id)
        w.add("s.type", "=", stage_type)
        w.add("s.status", "=", status)
        with self.store.cursor(write=False) as cur:
            rows = cur.all(f"{STAGE_SELECT}{w.sql()} ORDER BY s.creation_time, s.id", w.params)
            views = [StageView(stage_from_row(r), summary_from_row(r)) for r in rows]
            return self._with_tasks(cur, views) if with_tasks else views

    def summary(self, stage_id: UUID) -> Summary:
        with self.store.cursor(write=False) as cur:
            row = cur.one(
                f"SELECT * FROM summaries_v1 WHERE stage_id = {self.p('stage_id')}",
                self._by_id("stage_id", stage_id),
            )
            if row is None:
                raise StageNotFound
            return summary_from_row(row)

    def held_by_workers(self, job_id: UUID) -> int:
        """How many of the job's tasks are IN_PROGRESS (held by a worker)."""
        with self.store.cursor(write=False) as cur:
            row = cur.one(
                "SELECT COALESCE(SUM(in_progress), 0) AS n FROM summaries_v1 "
                f"WHERE job_id = {self.p('j')}",
                {"j": self.d.dump("job_id", job_id)},
            )
            return int(row["n"]) if row else 0

    def children(self, task_id: UUID) -> list[ChildJob]:
        """The child jobs of `task_id` (delegation), oldest first, with their tasks' results."""
        by_task = self._by_id("t", task_id)
        with self.store.cursor(write=False) as cur:
            if cur.one(f"SELECT id FROM tasks_v1 WHERE id = {self.p('t')}", by_task) is None:
                raise TaskNotFound
            jobs = cur.all(
                f"SELECT * FROM jobs_v1 WHERE parent_task_id = {self.p('t')} "
                "ORDER BY creation_time, id",
                by_task,
            )
            out = []
            for row in jobs:
                results = cur.all(
                    f"SELECT * FROM tasks_v1 WHERE job_id = {self.p('j')} "
                    "AND status = 'COMPLETED' AND result IS NOT NULL ORDER BY end_time, id",
                    {"j": self.d.dump("job_id", row["id"])},
                )
                out.append(ChildJob(job_from_row(row), [task_from_row(r) for r in results]))
            return out

    def _with_tasks(self, cur: Cursor, views: list[StageView]) -> list[StageView]:
        return [StageView(v.stage, v.summary, self._tasks_of(cur, v.stage.id)) for v in views]

    def _tasks_of(self, cur: Cursor, stage_id: UUID) -> list[Task]:
        rows = cur.all(
            f"SELECT * FROM tasks_v1 WHERE stage_id = {self.p('s')} ORDER BY creation_time, id",
            {"s": self.d.dump("stage_id", stage_id)},
        )
        return [task_from_row(r) for r in rows]

    # -- tasks ----------------------------------------------------------------------------

    def tasks_of_stage(self, stage_id: UUID) -> list[Task]:
        with self.store.cursor(write=False) as cur:
            if (
                cur.one(
                    f"SELECT id FROM stages_v1 WHERE id = {self.p('id')}",
                    self._by_id("id", stage_id),
                )
                is None
            ):
                raise StageNotFound
            return self._tasks_of(cur, stage_id)

    def task(self, task_id: UUID, *, as_of: AsOf | None = None) -> Task:
        if as_of is not None:
            return self.history.task(task_id, as_of)
        with self.store.cursor(write=False) as cur:
            row = cur.one(
                f"SELECT * FROM tasks_v1 WHERE id = {self.p('id')}", self._by_id("id", task_id)
            )
            if row is None:
                raise TaskNotFound
            return task_from_row(row)

    def task_logs(self, task_id: UUID) -> list[tuple[datetime, int, str]]:
        with self.store.cursor(write=False) as cur:
            row = cur.one(
                f"SELECT id FROM tasks_v1 WHERE id = {self.p('id')}", self._by_id("id", task_id)
            )
            if row is None:
                raise TaskNotFound
            rows = cur.all(
                f"SELECT time, attempt, line FROM task_logs_v1 WHERE task_id = {self.p('task_id')}"
                " ORDER BY position, line_no",
                self._by_id("task_id", task_id),
            )
            return [(r["time"], r["attempt"], r["line"]) for r in rows]

    def tasks(
        self,
        *,
        stage_id: UUID | None = None,
        stage_type: str | None = None,
        from_date: datetime | None = None,
        end_date: datetime | None = None,
        status: str | None = None,
    ) -> list[Task]:
        w = _Where(self.store)
        w.add("stage_id", "=", stage_id)
        w.add("stage_type", "=", stage_type)
        w.add("creation_time", ">=", from_date)
        w.add("creation_time", "<=", end_date)
        w.add("status", "=", status)
        with self.store.cursor(write=False) as cur:
            rows = cur.all(f"SELECT * FROM tasks_v1{w.sql()} ORDER BY creation_time, id", w.params)
            return [task_from_row(r) for r in rows]
