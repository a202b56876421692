"""An in-memory Store for the real application service: the pure projection applied to dicts.

`Tables` stands in for the SQL the executor runs, including its column-wise batching of the runs
`projections.store.executor.batches` makes (so the "ops of a run commute" claim is exercised
too), and the DEFAULT 0 summary counters. A session works on a copy of the tables and publishes
it on success only, as a transaction would.
"""

from __future__ import annotations

import copy
from collections.abc import Collection, Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime
from typing import Any, cast
from uuid import UUID

from jobnik.domain.base import Entity
from jobnik.domain.errors import (
    JobNotFound,
    LimitNotFound,
    ScheduleNotFound,
    StageNotFound,
    TaskNotFound,
    TokenNotFound,
)
from jobnik.domain.jobs import Job
from jobnik.domain.limits import StageTypeLimits
from jobnik.domain.ports import ChildCounts, Summary
from jobnik.domain.schedules import Schedule
from jobnik.domain.stages import Stage
from jobnik.domain.tasks import Task
from jobnik.domain.tokens import Token
from jobnik.domain.turns import FAIR, QueueTurns
from jobnik.projections.inline.gates import model_admitted
from jobnik.projections.inline.ops import (
    Add,
    Delete,
    Gate,
    IndexEvent,
    Insert,
    Op,
    QueueChange,
    Update,
)
from jobnik.projections.inline.queue import expiry, queue_row
from jobnik.projections.inline.rows import (
    job_from_row,
    limit_from_row,
    schedule_from_row,
    stage_from_row,
    summary_from_row,
    task_from_row,
    token_from_row,
)
from jobnik.projections.inline.tables import (
    ENTITY_JOBS,
    JOB_EVENTS,
    JOBS,
    LIMITS,
    PRIMARY_KEYS,
    QUEUE,
    RETENTION,
    SCHEDULE_FIRES,
    SCHEDULES,
    STAGES,
    SUMMARIES,
    SUMMARY_COUNTERS,
    TABLES,
    TASKS,
    TOKENS,
)
from jobnik.projections.store.executor import batches

from .builders import replay

Row = dict[str, Any]
FINAL = ("COMPLETED", "FAILED", "ABORTED")


class Tables:
    """The inline read models as lists of dict rows."""

    def __init__(self) -> None:
        self.rows: dict[str, list[Row]] = {t: [] for t in TABLES}

    def run(self, runs: Iterator[list[list[Op]]]) -> None:
        """Like OpExecutor.run: a run of equal-length op lists is applied column by column."""
        for run in runs:
            if len(run) == 1 or len({len(ops) for ops in run}) != 1:
                for ops in run:
                    for op in ops:
                        self.apply(op)
                continue
            for column in zip(*run, strict=True):
                for op in column:
                    self.apply(op)

    def apply(self, op: Op) -> None:
        if isinstance(op, Insert):
            defaults = dict.fromkeys(SUMMARY_COUNTERS, 0) if op.table == SUMMARIES else {}
            key = {k: op.row[k] for k in PRIMARY_KEYS[op.table].split(", ")}
            assert not self.where(op.table, key), f"duplicate key in {op.table}"
            self.rows[op.table].append({**defaults, **copy.deepcopy(dict(op.row))})
        elif isinstance(op, Update):
            for row in self.where(op.table, op.key):
                row.update(copy.deepcopy(dict(op.values)))
        elif isinstance(op, QueueChange):  # as inline/queue.py's SQL does
            for row in self.where(QUEUE, op.key):
                row.update(op.values, expires_at=expiry(row, op.values, op.time))
        elif isinstance(op, Add):
            for row in self.where(op.table, op.key):
                for column, delta in op.deltas.items():
                    row[column] += delta
        elif isinstance(op, Delete):
            gone = [id(r) for r in self.where(op.table, op.key)]
            self.rows[op.table] = [r for r in self.rows[op.table] if id(r) not in gone]
        elif isinstance(op, Gate):  # (the claim works the gates out: `dequeueable`)
            pass
        elif isinstance(op, IndexEvent):  # the job of the event's aggregate, as the SQL does
            entity = self.maybe(ENTITY_JOBS, entity_id=op.originator_id)
            if entity is not None:  # (a token's events belong to no job)
                self.rows[JOB_EVENTS].append({"job_id": entity["job_id"], "position": op.position})
        else:  # Enqueue: priority and eligibility from the job and stage rows, as the SQL does
            stage = self.one(STAGES, id=op.stage_id)
            job = self.one(JOBS, id=stage["job_id"])
            assert not self.where(QUEUE, {"task_id": op.task_id}), "task enqueued twice"
            row = queue_row(op.task_id, stage, job, op.seq, op.time, op.not_before, op.turn)
            self.rows[QUEUE].append(row)

    def copy(self) -> Tables:
        """A copy to write on: rows are copied, values are only ever replaced, never mutated."""
        other = Tables()
        other.rows = {t: [dict(r) for r in rows] for t, rows in self.rows.items()}
        return other

    def where(self, table: str, key: Mapping[str, Any]) -> list[Row]:
        return [r for r in self.rows[table] if all(r[k] == v for k, v in key.items())]

    def one(self, table: str, **key: Any) -> Row:
        [row] = self.where(table, key)
        return row

    def maybe(self, table: str, **key: Any) -> Row | None:
        rows = self.where(table, key)
        assert len(rows) <= 1
        return rows[0] if rows else None

    def dequeueable(
        self, stage_type: str | None = None, now: datetime | None = None, count: int | None = None
    ) -> list[UUID]:
        """Task ids in dequeue order, as the claim's SQL (inline/queue.py) takes `count` (None:
        all): the first of the ready tasks (priority, turn, then enqueue position) and of the
        delayed ones due at `now` (due time, then enqueue position), merged by priority, turn,
        then position; none whose expiry has come."""
        rows = [
            r
            for r in self.rows[QUEUE]
            if r["stage_open"]
            and r["job_open"]
            and stage_type in (None, r["stage_type"])
            and (r["expires_at"] is None or now is None or r["expires_at"] > now)
            and self.admitted(r)
        ]
        ready = sorted(
            (r for r in rows if r["not_before"] is None),
            key=lambda r: (r["priority_rank"], r["turn"], r["seq"]),
        )[:count]
        due = sorted(
            (r for r in rows if r["not_before"] is not None and now and r["not_before"] <= now),
            key=lambda r: (r["not_before"], r["seq"]),
        )[:count]
        merged = sorted([*ready, *due], key=lambda r: (r["priority_rank"], r["turn"], r["seq"]))[
            :count
        ]
        return [r["task_id"] for r in merged]

    def admitted(self, row: Row) -> bool:
        """Whether queue `row` passes its key's per-key limit, as inline/gates.py works it out."""
        limits = self.maybe(LIMITS, stage_type=row["stage_type"])
        if limits is None or limits["max_in_progress_per_key"] is None:
            return True
        gates = {j["id"]: j["gate"] for j in self.rows[JOBS]}
        gate = gates[row["job_id"]]
        mine = [
            r
            for r in self.rows[QUEUE]
            if r["stage_type"] == row["stage_type"] and gates[r["job_id"]] == gate
        ]
        running = sum(
            1
            for t in self.rows[TASKS]
            if t["stage_type"] == row["stage_type"]
            and t["status"] == "IN_PROGRESS"
            and gates[t["job_id"]] == gate
        )
        return any(
            r is row for r in model_admitted(mine, limits["max_in_progress_per_key"], running)
        )

    def queue_turns(self, stage_id: UUID) -> QueueTurns:
        """As the `queue_turns` statement reads them (queries.sql)."""
        stage = self.maybe(STAGES, id=stage_id)
        if stage is None:
            return QueueTurns()
        job = self.one(JOBS, id=stage["job_id"])
        limits = self.maybe(LIMITS, stage_type=stage["type"])
        ready = [
            r["turn"]
            for r in self.rows[QUEUE]
            if r["stage_type"] == stage["type"]
            and r["priority_rank"] == job["priority_rank"]
            and r["stage_open"]
            and r["job_open"]
            and r["not_before"] is None
        ]
        own = [r["turn"] for r in self.rows[QUEUE] if r["stage_id"] == stage_id]
        key = job.get("fairness_key")
        last = (
            own
            if key is None
            else [
                r["turn"]
                for r in self.rows[QUEUE]
                if r["stage_type"] == stage["type"] and r["fairness_key"] == key
            ]
        )
        top = max(last, default=None)
        return QueueTurns(
            limits is not None and limits["queue_order"] == FAIR,
            min(ready, default=0),
            max(ready, default=0),
            min(own, default=None),
            top,
            job.get("fairness_weight") or 1,
            min(100, sum(1 for turn in last if turn == top)),
        )

    def room(self, stage_type: str, n: int) -> int:
        """How many of `n` tasks a claim of `stage_type` may take: its concurrency limit (a rate,
        whose bucket refills by the database's clock, is the SQL stores' alone)."""
        limit = self.maybe(LIMITS, stage_type=stage_type)
        if limit is None or limit["max_in_progress"] is None:
            return n
        running = sum(
            1
            for r in self.rows[TASKS]
            if r["stage_type"] == stage_type and r["status"] == "IN_PROGRESS"
        )
        return max(0, min(n, limit["max_in_progress"] - running))


class MemorySession:
    """One transaction over a private copy of the tables; an identity map like SqlSession's."""

    def __init__(self, store: MemoryStore) -> None:
        self.store = store
        self.tables = store.tables.copy()
        self.log = list(store.log)
        self.loaded: dict[UUID, Entity] = {}
        self.position: int | None = None

    def _load(self, table: str, key: UUID, convert: Any, missing: type[Exception]) -> Any:
        if key in self.loaded:
            return self.loaded[key]
        row = self.tables.maybe(table, id=key)
        if row is None:
            raise missing
        aggregate = convert(dict(row))
        self.loaded[key] = aggregate
        return aggregate

    def _remember(self, row: Row, convert: Any) -> Any:
        return self.loaded.setdefault(row["id"], convert(dict(row)))

    def job(self, job_id: UUID) -> Job:
        return cast(Job, self._load(JOBS, job_id, job_from_row, JobNotFound))

    def stage(self, stage_id: UUID) -> Stage:
        return cast(Stage, self._load(STAGES, stage_id, stage_from_row, StageNotFound))

    def task(self, task_id: UUID) -> Task:
        return cast(Task, self._load(TASKS, task_id, task_from_row, TaskNotFound))

    def token(self, token_id: UUID) -> Token:
        return cast(Token, self._load(TOKENS, token_id, token_from_row, TokenNotFound))

    def limit(self, limit_id: UUID) -> StageTypeLimits:
        return cast(StageTypeLimits, self._load(LIMITS, limit_id, limit_from_row, LimitNotFound))

    def schedule(self, schedule_id: UUID) -> Schedule:
        return cast(
            Schedule, self._load(SCHEDULES, schedule_id, schedule_from_row, ScheduleNotFound)
        )

    def schedule_named(self, name: str) -> UUID | None:
        row = self.tables.maybe(SCHEDULES, name=name)
        return row["id"] if row else None

    def limited_types_besides(self, stage_type: str) -> int:
        return sum(
            1
            for r in self.tables.rows[LIMITS]
            if r["stage_type"] != stage_type
            and (r["max_in_progress"] is not None or r["rate_starts"] is not None)
        )

    def retention_names_besides(self, name: str) -> int:
        return sum(1 for r in self.tables.rows[RETENTION] if r["name"] != name)

    def run_at(self, schedule_id: UUID, nominal_time: datetime) -> UUID | None:
        row = self.tables.maybe(SCHEDULE_FIRES, schedule_id=schedule_id, nominal_time=nominal_time)
        return row["job_id"] if row else None

    def due_schedules(self, now: datetime, limit: int) -> list[UUID]:
        rows = [
            r
            for r in self.tables.rows[SCHEDULES]
            if not r["paused"]
            and (r["buffered_time"] is not None or (r["next_fire_at"] or now) <= now)
        ]
        return [r["id"] for r in rows[:limit]]

    def stage_at(self, job_id: UUID, order: int) -> Stage | None:
        row = self.tables.maybe(STAGES, job_id=job_id, stage_order=order)
        return cast(Stage, self._remember(row, stage_from_row)) if row else None

    def stages_of(self, job_id: UUID) -> list[Stage]:
        rows = sorted(self.tables.where(STAGES, {"job_id": job_id}), key=lambda r: r["stage_order"])
        return [cast(Stage, self._remember(r, stage_from_row)) for r in rows]

    def queued_tasks(self, job_id: UUID) -> list[Task]:
        rows = [
            r
            for r in self.tables.where(TASKS, {"job_id": job_id})
            if r["status"] in ("PENDING", "RETRIED", "DELEGATED")
        ]
        rows.sort(key=lambda r: (r["creation_time"], str(r["id"])))
        return [cast(Task, self._remember(r, task_from_row)) for r in rows]

    def tasks_in(self, stage_id: UUID, statuses: Collection[str]) -> list[Task]:
        rows = [
            r for r in self.tables.where(TASKS, {"stage_id": stage_id}) if r["status"] in statuses
        ]
        rows.sort(key=lambda r: (r["creation_time"], str(r["id"])))
        return [cast(Task, self._remember(r, task_from_row)) for r in rows]

    def _jobs(self, rows: list[Row]) -> list[Job]:
        rows = sorted(rows, key=lambda r: (r["creation_time"], str(r["id"])))
        return [cast(Job, self._remember(r, job_from_row)) for r in rows]

    def children_counts(self, task_id: UUID) -> ChildCounts:
        rows = self.tables.where(JOBS, {"parent_task_id": task_id})
        return ChildCounts(len(rows), sum(1 for r in rows if r["status"] not in FINAL))

    def child_jobs(self, job_id: UUID) -> list[Job]:
        rows = self.tables.where(JOBS, {"parent_job_id": job_id})
        return self._jobs([r for r in rows if r["status"] not in FINAL])

    def stale_delegations(self, before: datetime, limit: int) -> list[Task]:
        rows = [
            r
            for r in self.tables.rows[TASKS]
            if r["status"] == "DELEGATED"
            and r["delegated_at"] < before
            and all(
                j["status"] in FINAL for j in self.tables.where(JOBS, {"parent_task_id": r["id"]})
            )
        ]
        rows.sort(key=lambda r: r["delegated_at"])
        return [cast(Task, self._remember(r, task_from_row)) for r in rows[:limit]]

    def claim(self, stage_type: str, now: datetime) -> Task | None:
        queued = self.tables.dequeueable(stage_type, now, self.tables.room(stage_type, 1))
        return self.task(queued[0]) if queued else None

    def read_ahead(self, task_ids: Collection[UUID]) -> None:
        """Nothing to gain: every row is at hand."""

    def claim_batch(self, stage_type: str, count: int, now: datetime) -> list[Task]:
        room = self.tables.room(stage_type, count)
        return [self.task(t) for t in self.tables.dequeueable(stage_type, now, room)]

    def hold_queue(self, *job_ids: UUID) -> None:
        """Nothing to wait for: this store's sessions never overlap."""

    def summary(self, stage_id: UUID) -> Summary:
        row = self.tables.maybe(SUMMARIES, stage_id=stage_id)
        return summary_from_row(row) if row else Summary()

    def queue_turns(self, stage_id: UUID) -> QueueTurns:
        return self.tables.queue_turns(stage_id)

    def all_completed(self, stage_id: UUID) -> bool:
        summary = self.summary(stage_id)
        return summary.completed == summary.total

    def missed_deadlines(self, now: datetime, limit: int) -> list[tuple[UUID, UUID | None]]:
        found: list[tuple[datetime, UUID, UUID | None]] = [
            (r["deadline"], r["id"], None)
            for r in self.tables.rows[JOBS]
            if r["deadline"] is not None and r["deadline"] < now and r["status"] not in FINAL
        ]
        found += [
            (r["deadline"], r["job_id"], r["id"])
            for r in self.tables.rows[STAGES]
            if r["deadline"] is not None and r["deadline"] < now and r["status"] not in FINAL
        ]
        found.sort(key=lambda f: f[0])
        return [(job_id, stage_id) for _, job_id, stage_id in found[:limit]]

    def expired_queued(self, now: datetime, limit: int) -> list[Task]:
        rows = [r for r in self.tables.rows[QUEUE] if r["expires_at"] and r["expires_at"] <= now]
        rows.sort(key=lambda r: r["expires_at"])
        tasks = [self.tables.one(TASKS, id=r["task_id"]) for r in rows[:limit]]
        return [cast(Task, self._remember(r, task_from_row)) for r in tasks]

    def expired_leases(self, now: datetime, limit: int) -> list[Task]:
        rows = [
            r
            for r in self.tables.rows[TASKS]
            if r["status"] == "IN_PROGRESS" and r["lease_expires_at"] < now
        ]
        rows.sort(key=lambda r: r["lease_expires_at"])
        return [cast(Task, self._remember(r, task_from_row)) for r in rows[:limit]]

    def save(self, *aggregates: Entity) -> None:
        events = [e for a in aggregates for e in a.collect_events()]
        if not events:
            return
        start = len(self.log) + 1
        ids = list(range(start, start + len(events)))
        self.log += events
        self.tables.run(batches(events, ids))
        self.position = ids[-1]
        for a in aggregates:
            self.loaded.setdefault(a.id, a)


class MemoryStore:
    """Sessions over `Tables` and an in-memory event log; a failed session publishes nothing."""

    def __init__(self) -> None:
        self.tables = Tables()
        self.log: list[Any] = []
        self._writing: MemorySession | None = None

    @contextmanager
    def session(self, *, write: bool) -> Iterator[MemorySession]:
        """A write session opened inside another one joins it, as SqlStore's do."""
        if write and self._writing is not None:
            yield self._writing
            return
        session = MemorySession(self)
        if write:
            self._writing = session
        try:
            yield session  # an exception propagates and the copy is dropped: a rollback
        finally:
            if write:
                self._writing = None
        if write:
            self.tables, self.log = session.tables, session.log

    def forget(self, task_id: UUID) -> None:
        """(Nothing is remembered between sessions here.)"""

    def events_of(self, aggregate_id: UUID) -> list[Any]:
        return [e for e in self.log if e.originator_id == aggregate_id]

    def replayed(self, aggregate_id: UUID) -> Any:
        """The aggregate rebuilt from the log alone."""
        return replay(self.events_of(aggregate_id))

    def restored(self, table: str, aggregate_id: UUID) -> Entity | None:
        """The aggregate as the next command would load it from its row."""
        convert = {JOBS: job_from_row, STAGES: stage_from_row, TASKS: task_from_row}[table]
        row = self.tables.maybe(table, id=aggregate_id)
        return convert(dict(row)) if row else None
