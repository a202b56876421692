"""Queries the API serves, read from the inline read models (read-your-writes after any 2xx)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property
from typing import Any, Generic, TypeVar
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
from jobnik.projections.queries.logs import TaskLogs
from jobnik.projections.queries.results import CHILD_RESULTS, ChildJob, JobView, StageView
from jobnik.projections.queries.timetravel import AsOf, TimeTravel
from jobnik.projections.store.base import SqlStore
from jobnik.projections.store.cursor import Cursor

STAGE_SELECT = (
    "SELECT s.*, m.pending, m.in_progress, m.completed, m.failed, m.created, m.retried, "
    "m.aborted, m.total, m.delegated FROM stages_v1 s JOIN summaries_v1 m ON m.stage_id = s.id"
)


T = TypeVar("T")
Key = tuple[datetime, UUID]  # a list's order: creation time, then id


@dataclass(frozen=True)
class Window:
    """A part of a list: `limit` items after `offset` (pages), or after the item whose key is
    `after` (the chunks a streamed list reads, each in its own short transaction)."""

    offset: int = 0
    limit: int | None = None
    after: Key | None = None
    newest_first: bool = False  # pages only: the newest items first


@dataclass(frozen=True)
class Listing(Generic[T]):
    """A filtered list, in creation order: its rows' query and how a chunk of rows loads."""

    select: str  # SELECT … FROM …, the table aliased so that `alias` prefixes its columns
    count: str  # SELECT COUNT(*) AS n FROM …
    where: _Where
    alias: str
    load: Callable[[Cursor, Sequence[Mapping[str, Any]]], list[T]]
    key: Callable[[T], Key]


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

    def sql(self, *more: str) -> str:
        parts = [*self.parts, *more]
        return (" WHERE " + " AND ".join(parts)) if parts else ""


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

    @cached_property
    def logs(self) -> TaskLogs:
        return TaskLogs(self.store)

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
        status: str | None = None,
    ) -> Listing[JobView]:
        w = _Where(self.store)
        w.add("j.name", "=", name)
        w.add("j.status", "=", status)
        w.add("j.parent_task_id", "=", parent_task_id)
        w.add("j.parent_job_id", "=", parent_job_id)
        w.add("j.priority", "=", priority)
        w.add("j.creation_time", ">=", from_date)
        w.add("j.creation_time", "<=", end_date)

        def load(cur: Cursor, rows: Sequence[Mapping[str, Any]]) -> list[JobView]:
            jobs = [job_from_row(r) for r in rows]
            if not with_stages:
                return [JobView(j) for j in jobs]
            stages = self._stages_of(cur, [j.id for j in jobs])
            return [JobView(j, stages.get(j.id, [])) for j in jobs]

        return Listing(
            "SELECT j.* FROM jobs_v1 j",
            "SELECT COUNT(*) AS n FROM jobs_v1 j",
            w,
            "j",
            load,
            lambda v: (v.job.created_on, v.job.id),
        )

    def read(self, listing: Listing[T], window: Window = Window()) -> list[T]:
        """The items of `listing` in `window`, in one short read transaction."""
        w, a = listing.where, listing.alias
        more = []
        params = dict(w.params)
        if window.after is not None:
            more.append(f"({a}.creation_time, {a}.id) > ({self.p('k0')}, {self.p('k1')})")
            params["k0"] = self.d.dump("creation_time", window.after[0])
            params["k1"] = self.d.dump("id", window.after[1])
        page = ""
        if window.limit is not None:
            page = f" LIMIT {int(window.limit)} OFFSET {int(window.offset)}"
        way = " DESC" if window.newest_first else ""
        order = f"{a}.creation_time{way}, {a}.id{way}"
        sql = f"{listing.select}{w.sql(*more)} ORDER BY {order}{page}"
        with self.store.cursor(write=False) as cur:
            return listing.load(cur, cur.all(sql, params))

    def total(self, listing: Listing[Any]) -> int:
        """How many items `listing` holds."""
        with self.store.cursor(write=False) as cur:
            row = cur.one(f"{listing.count}{listing.where.sql()}", listing.where.params)
        return int(row["n"]) if row else 0

    def counts_by_status(self, listing: Listing[Any]) -> dict[str, int]:
        """How many items `listing` holds per status (statuses with none left out)."""
        w, a = listing.where, listing.alias
        count = listing.count.replace("SELECT COUNT(*) AS n", f"SELECT {a}.status, COUNT(*) AS n")
        with self.store.cursor(write=False) as cur:
            rows = cur.all(f"{count}{w.sql()} GROUP BY {a}.status", w.params)
        return {str(r["status"]): int(r["n"]) for r in rows}

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
    ) -> Listing[StageView]:
        w = _Where(self.store)
        w.add("s.job_id", "=", job_id)
        w.add("s.type", "=", stage_type)
        w.add("s.status", "=", status)

        def load(cur: Cursor, rows: Sequence[Mapping[str, Any]]) -> list[StageView]:
            views = [StageView(stage_from_row(r), summary_from_row(r)) for r in rows]
            return self._with_tasks(cur, views) if with_tasks else views

        return Listing(
            STAGE_SELECT,
            "SELECT COUNT(*) AS n FROM stages_v1 s",
            w,
            "s",
            load,
            lambda v: (v.stage.created_on, v.stage.id),
        )

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

    def children(self, task_id: UUID, offset: int = 0, limit: int = 50) -> list[ChildJob]:
        """The child jobs of `task_id` (delegation), oldest first, from `offset`, at most
        `limit` of them, with their tasks' results (at most CHILD_RESULTS each)."""
        by_task = self._by_id("t", task_id)
        with self.store.cursor(write=False) as cur:
            if cur.one(f"SELECT id FROM tasks_v1 WHERE id = {self.p('t')}", by_task) is None:
                raise TaskNotFound
            jobs = cur.all(
                f"SELECT * FROM jobs_v1 WHERE parent_task_id = {self.p('t')} "
                f"ORDER BY creation_time, id LIMIT {self.p('limit')} OFFSET {self.p('offset')}",
                {**by_task, "limit": int(limit), "offset": int(offset)},
            )
            out = []
            for row in jobs:
                results = cur.all(
                    f"SELECT * FROM tasks_v1 WHERE job_id = {self.p('j')} "
                    "AND status = 'COMPLETED' AND result IS NOT NULL ORDER BY end_time, id "
                    f"LIMIT {self.p('n')}",
                    {"j": self.d.dump("job_id", row["id"]), "n": CHILD_RESULTS + 1},
                )
                tasks = [task_from_row(r) for r in results[:CHILD_RESULTS]]
                out.append(ChildJob(job_from_row(row), tasks, len(results) > CHILD_RESULTS))
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

    def tasks_of_stage(self, stage_id: UUID) -> Listing[Task]:
        """The stage's tasks; StageNotFound when there is no such stage."""
        with self.store.cursor(write=False) as cur:
            if (
                cur.one(
                    f"SELECT id FROM stages_v1 WHERE id = {self.p('id')}",
                    self._by_id("id", stage_id),
                )
                is None
            ):
                raise StageNotFound
        return self.tasks(stage_id=stage_id)

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

    def tasks(
        self,
        *,
        stage_id: UUID | None = None,
        stage_type: str | None = None,
        from_date: datetime | None = None,
        end_date: datetime | None = None,
        status: str | None = None,
    ) -> Listing[Task]:
        w = _Where(self.store)
        w.add("t.stage_id", "=", stage_id)
        w.add("t.stage_type", "=", stage_type)
        w.add("t.creation_time", ">=", from_date)
        w.add("t.creation_time", "<=", end_date)
        w.add("t.status", "=", status)
        return Listing(
            "SELECT t.* FROM tasks_v1 t",
            "SELECT COUNT(*) AS n FROM tasks_v1 t",
            w,
            "t",
            lambda _, rows: [task_from_row(r) for r in rows],
            lambda t: (t.created_on, t.id),
        )
