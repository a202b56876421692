"""A store's session: one transaction over the inline read models, seen as the domain's `Session`.

The session contract (domain/ports.py) is the same on every backend; tests/integration/
test_session_contract.py runs one test case against each implementation. This base reads through
a plain cursor and holds the writer lock, if it writes, from its first statement: SQLite's
sessions (sqlite.py) and every backend's read sessions. PostgreSQL's write sessions
(postgres.py) start optimistic instead.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final, cast
from uuid import UUID

import orjson
from eventsourcing.domain import DomainEventProtocol
from eventsourcing.persistence import StoredEvent

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
from jobnik.projections.inline.gates import WAKE_BATCH
from jobnik.projections.inline.rows import (
    job_from_row,
    limit_from_row,
    schedule_from_row,
    stage_from_row,
    summary_from_row,
    task_from_row,
    token_from_row,
)
from jobnik.projections.inline.tables import JOBS, LIMITS, SCHEDULES, STAGES, TASKS, TOKENS
from jobnik.projections.store import eventlog
from jobnik.projections.store.cursor import Cursor

if TYPE_CHECKING:  # (the store makes its sessions: a runtime import would go in a circle)
    from jobnik.projections.store.base import SqlStore

BY_ID: Final = {
    JOBS: "job_by_id",
    STAGES: "stage_by_id",
    TASKS: "task_by_id",
    TOKENS: "token_by_id",
    SCHEDULES: "schedule_by_id",
    LIMITS: "limit_by_id",
}


class SqlSession:
    """One transaction; an identity map so a command sees one object per aggregate."""

    def __init__(self, store: SqlStore, cur: Cursor, *, write: bool) -> None:
        self.store = store
        self.cur = cur
        self.d = store.dialect
        self.write = write
        self.loaded: dict[UUID, Entity] = {}
        self._fetched: dict[UUID, Any] = {}  # rows read ahead, not loaded yet
        self._position: int | None = None
        # Tasks claimed by stage type, not settled yet: what their limits are charged at
        # commit (`settle_claims`).
        self._claimed: dict[str, int] = {}
        self._claimed_jobs: dict[str, dict[Any, int]] = {}  # their tasks by job (their keys')

    @property
    def position(self) -> int | None:
        """The log position of the last event this session appended."""
        return self._position

    def lock(self) -> None:
        """Take the writer lock (here: held from the start, if the session writes)."""

    def hold_queue(self, *job_ids: UUID) -> None:
        """Nothing to wait for: the writer lock, held from the start, keeps every other command
        off the job's queue rows."""

    def close(self) -> None:
        """Before the commit: the session's last writes and checks (its claims' limits)."""
        self.settle_claims()

    def settle_claims(self) -> None:
        """Each rate-limited stage type this session claimed tasks of loses as many tokens, and
        under a per-key rate each key as many as its tasks claimed. The writer lock, held from
        the start, kept the room each claim read exact."""
        for stage_type, count, jobs in self._settled():
            by_job = orjson.dumps({str(job): n for job, n in jobs}).decode()
            self.cur.execute(self.d.sql("spend_tokens"), {"v": stage_type, "k": count, "j": by_job})

    def _settled(self) -> list[tuple[str, int, list[tuple[Any, int]]]]:
        """The claims not settled yet, by stage type, with their tasks by job, now settled."""
        claimed, self._claimed = sorted(self._claimed.items()), {}
        jobs, self._claimed_jobs = self._claimed_jobs, {}
        return [
            (t, n, sorted(jobs.get(t, {}).items(), key=lambda j: str(j[0]))) for t, n in claimed
        ]

    def _count_claims(self, stage_type: str, rows: Sequence[Mapping[str, Any]]) -> None:
        if rows:
            self._claimed[stage_type] = self._claimed.get(stage_type, 0) + len(rows)
            jobs = self._claimed_jobs.setdefault(stage_type, {})
            for row in rows:
                jobs[row["job_id"]] = jobs.get(row["job_id"], 0) + 1

    # -- loads by id ---------------------------------------------------------------------------

    def job(self, job_id: UUID) -> Job:
        return cast(Job, self._load(JOBS, job_id, job_from_row, JobNotFound))

    def stage(self, stage_id: UUID) -> Stage:
        return cast(Stage, self._load(STAGES, stage_id, stage_from_row, StageNotFound))

    def task(self, task_id: UUID) -> Task:
        return cast(Task, self._load(TASKS, task_id, task_from_row, TaskNotFound))

    def token(self, token_id: UUID) -> Token:
        return cast(Token, self._load(TOKENS, token_id, token_from_row, TokenNotFound))

    def schedule(self, schedule_id: UUID) -> Schedule:
        """Loaded under the writer lock (its row is not among the loads an optimistic session
        checks when it takes the lock)."""
        self.lock()
        return cast(
            Schedule, self._load(SCHEDULES, schedule_id, schedule_from_row, ScheduleNotFound)
        )

    def limit(self, limit_id: UUID) -> StageTypeLimits:
        """Loaded under the writer lock, as a schedule is."""
        self.lock()
        return cast(StageTypeLimits, self._load(LIMITS, limit_id, limit_from_row, LimitNotFound))

    def schedule_named(self, name: str) -> UUID | None:
        rows = self._rows("schedule_by_name", n=name)
        return UUID(str(rows[0]["id"])) if rows else None

    def run_at(self, schedule_id: UUID, nominal_time: datetime) -> UUID | None:
        d = self.d
        rows = self._rows(
            "schedule_run_at",
            s=d.dump("schedule_id", schedule_id),
            t=d.dump("nominal_time", nominal_time),
        )
        return UUID(str(rows[0]["job_id"])) if rows else None

    def limited_types_besides(self, stage_type: str) -> int:
        return int(self._rows("limited_types_besides", t=stage_type)[0]["n"])

    def retention_names_besides(self, name: str) -> int:
        return int(self._rows("retention_names_besides", n=name)[0]["n"])

    def due_schedules(self, now: datetime, limit: int) -> list[UUID]:
        rows = self._rows("due_schedules", now=self.d.dump("next_fire_at", now), limit=int(limit))
        return [UUID(str(r["id"])) for r in rows]

    def claim(self, stage_type: str, now: datetime) -> Task | None:
        params = self._claim_params(stage_type, now)
        row = self._next_in_queue(params)
        if row is None and self._woke(stage_type):
            row = self._next_in_queue(params)
        if row is None:
            return None
        self._count_claims(stage_type, [row])
        self._fetched.setdefault(row["id"], row)
        return self.task(row["id"])

    def read_ahead(self, task_ids: Collection[UUID]) -> None:
        """Nothing here: each load is one indexed read (PostgresSession reads them at once)."""

    def claim_batch(self, stage_type: str, count: int, now: datetime) -> list[Task]:
        params = {**self._claim_params(stage_type, now), "n": int(count)}
        rows = self._next_batch_in_queue(params)
        if len(rows) < count and self._woke(stage_type):
            rows = self._next_batch_in_queue(params)  # (the first rows again, in order)
        self._count_claims(stage_type, rows)
        for row in rows:
            self._fetched.setdefault(row["id"], row)
        return [self.task(row["id"]) for row in rows]

    def _woke(self, stage_type: str) -> bool:
        """Whether a claim that found fewer tasks than it asked for should look again: under
        the writer lock, the held tasks of the stage type's keys whose buckets gained a whole
        token since a claim drew from them are let through first (inline/gates.py; at most
        WAKE_BATCH keys, the longest waiting first)."""
        due = self.cur.all(self.d.sql("due_gates"), {"v": stage_type, "n": WAKE_BATCH})
        if not due:
            return False
        self.lock()
        gates = [r["g"] for r in due]
        self.store.executor.regate_gates(self.cur, stage_type, gates)
        where, params = self.d.one_of("gate", "g", gates)
        for name in ("wake_later", "drop_full_buckets"):
            self.cur.execute(self.d.sql(name, gates=where), {"v": stage_type, **params})
        return True

    def _claim_params(self, stage_type: str, now: datetime) -> dict[str, Any]:
        """A claim's parameters: the stage type, and now (delayed tasks due by then count)."""
        return {"v": stage_type, "now": self.d.dump("not_before", now)}

    def _next_batch_in_queue(self, params: dict[str, Any]) -> list[dict[str, Any]]:
        """The rows of the next `n` dequeueable tasks of stage type `v` at `now`."""
        return self.cur.all(self.d.sql("claim_tasks"), params)

    def _next_in_queue(self, params: dict[str, Any]) -> dict[str, Any] | None:
        """The row of the next dequeueable task of stage type `v` at `now`."""
        return self.cur.one(self.d.sql("claim_task"), params)

    def _load(
        self,
        table: str,
        key: UUID,
        convert: Callable[[dict[str, Any]], Entity],
        missing: type[Exception],
    ) -> Entity:
        if key in self.loaded:
            return self.loaded[key]
        aggregate, version = self._fetch(table, key, convert, missing)
        self.loaded[key] = aggregate
        self._loaded(key, table, version)
        return aggregate

    def _fetch(
        self,
        table: str,
        key: UUID,
        convert: Callable[[dict[str, Any]], Entity],
        missing: type[Exception],
    ) -> tuple[Entity, int]:
        """The aggregate `key` of `table` and its version: read ahead, or read now."""
        row = self._fetched.pop(key, None)
        if row is None:
            row = self.cur.one(self.d.sql(BY_ID[table]), {"id": self.d.dump("id", key)})
        if row is None:
            raise missing
        return convert(row), int(row["version"])

    def _loaded(self, key: UUID, table: str, version: int) -> None:
        """`key` was loaded at `version` (what an optimistic session checks under its lock)."""

    def _remember(self, aggregate: Entity) -> Entity:
        return self.loaded.setdefault(aggregate.id, aggregate)

    # -- queries (under the writer lock) ------------------------------------------------------

    def _rows(self, name: str, statuses: str = "", **params: Any) -> list[dict[str, Any]]:
        self.lock()
        sql = self.d.sql(name, statuses=statuses) if statuses else self.d.sql(name)
        return self.cur.all(sql, params)

    def stage_at(self, job_id: UUID, order: int) -> Stage | None:
        rows = self._rows("stage_at", job_id=self.d.dump("job_id", job_id), o=order)
        return cast(Stage, self._remember(stage_from_row(rows[0]))) if rows else None

    def stages_of(self, job_id: UUID) -> list[Stage]:
        rows = self._rows("stages_of_job", job_id=self.d.dump("job_id", job_id))
        return [cast(Stage, self._remember(stage_from_row(r))) for r in rows]

    def queued_tasks(self, job_id: UUID) -> list[Task]:
        rows = self._rows("queued_tasks_of_job", job_id=self.d.dump("job_id", job_id))
        return [cast(Task, self._remember(task_from_row(r))) for r in rows]

    def tasks_in(self, stage_id: UUID, statuses: Collection[str]) -> list[Task]:
        wanted = {f"st{i}": str(status) for i, status in enumerate(sorted(statuses))}
        marks = ", ".join(self.d.param(k) for k in wanted)
        rows = self._rows(
            "tasks_of_stage_in", marks, stage_id=self.d.dump("stage_id", stage_id), **wanted
        )
        return [cast(Task, self._remember(task_from_row(r))) for r in rows]

    def children_counts(self, task_id: UUID) -> ChildCounts:
        rows = self._rows("count_jobs_of_parent_task", t=self.d.dump("parent_task_id", task_id))
        return ChildCounts(int(rows[0]["n"]), int(rows[0]["running"] or 0))

    def child_jobs(self, job_id: UUID) -> list[Job]:
        rows = self._rows("open_child_jobs", j=self.d.dump("parent_job_id", job_id))
        return [cast(Job, self._remember(job_from_row(r))) for r in rows]

    def stale_delegations(self, before: datetime, limit: int) -> list[Task]:
        rows = self._rows(
            "stale_delegations", before=self.d.dump("delegated_at", before), limit=int(limit)
        )
        return [cast(Task, self._remember(task_from_row(r))) for r in rows]

    def summary(self, stage_id: UUID) -> Summary:
        rows = self._rows("summary_of_stage", s=self.d.dump("stage_id", stage_id))
        return summary_from_row(rows[0]) if rows else Summary()

    def queue_turns(self, stage_id: UUID) -> QueueTurns:
        """Read as claims read, before the writer lock: a turn orders the queue, it decides no
        rule (two commands reading the same head give their tasks the same turns)."""
        rows = self.cur.all(self.d.sql("queue_turns"), {"id": self.d.dump("id", stage_id)})
        if not rows:
            return QueueTurns()
        r = rows[0]
        return QueueTurns(
            r["queue_order"] == FAIR,
            r["head"] or 0,
            r["tail"] or 0,
            r["first"],
            r["last"],
            int(r["weight"]),
            int(r["at_last"]),
        )

    def all_completed(self, stage_id: UUID) -> bool:
        """Whether every task of the stage is COMPLETED, counting this session's saves."""
        summary = self.summary(stage_id)
        return summary.completed == summary.total

    def missed_deadlines(self, now: datetime, limit: int) -> list[tuple[UUID, UUID | None]]:
        rows = self._rows("missed_deadlines", now=self.d.dump("deadline", now), limit=int(limit))
        return [
            (UUID(str(r["job_id"])), None if r["stage_id"] is None else UUID(str(r["stage_id"])))
            for r in rows
        ]

    def expired_queued(self, now: datetime, limit: int) -> list[Task]:
        rows = self._rows("expired_queued", now=self.d.dump("expires_at", now), limit=int(limit))
        return [cast(Task, self._remember(task_from_row(r))) for r in rows]

    def expired_leases(self, now: datetime, limit: int) -> list[Task]:
        rows = self._rows(
            "expired_leases", now=self.d.dump("lease_expires_at", now), limit=int(limit)
        )
        return [cast(Task, self._remember(task_from_row(r))) for r in rows]

    # -- saving --------------------------------------------------------------------------------

    def erase_user_data(self, job_id: UUID) -> None:
        self.lock()
        store = self.store
        eventlog.erase_user_data(
            self.cur, store.log_app, store.events_table, store.position_column, job_id
        )
        # (answers kept for Idempotency-Key retries that name the job hold its data too)
        self.cur.execute(
            f"DELETE FROM jobnik_idempotency_keys WHERE body LIKE {self.d.param('job')}",
            {"job": f"%{job_id}%"},
        )

    def save(self, *aggregates: Entity) -> None:
        events = [e for a in aggregates for e in a.collect_events()]
        if not events:
            return
        self._append([self.store.mapper.to_stored_event(e) for e in events], events)
        for a in aggregates:
            self._remember(a)

    def _append(
        self, stored: Sequence[StoredEvent], events: Sequence[DomainEventProtocol[Any]]
    ) -> None:
        """Append the events to the log and apply them to the inline read models."""
        raise TypeError("a read session appends no events")
