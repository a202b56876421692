"""A store's session: one transaction, and an identity map of the aggregates it loads."""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime
from typing import TYPE_CHECKING, Any, cast
from uuid import UUID

from jobnik.domain.base import Entity
from jobnik.domain.errors import JobNotFound, StageNotFound, TaskNotFound, TokenNotFound
from jobnik.domain.jobs import Job
from jobnik.domain.ports import Summary
from jobnik.domain.stages import Stage
from jobnik.domain.tasks import Task
from jobnik.domain.tokens import Token
from jobnik.projections.inline.rows import (
    job_from_row,
    stage_from_row,
    summary_from_row,
    task_from_row,
    token_from_row,
)
from jobnik.projections.inline.tables import JOBS, QUEUE, STAGES, SUMMARIES, TASKS, TOKENS
from jobnik.projections.store.batch import BatchCursor, Later
from jobnik.projections.store.cursor import Cursor
from jobnik.projections.store.written import Snapshot

if TYPE_CHECKING:
    from jobnik.projections.store.base import SqlStore

FINAL_JOB_SQL = "('COMPLETED', 'FAILED', 'ABORTED')"
# The next eligible task of a stage type: priority, then enqueue order (one index probe).
CLAIM = (
    "SELECT task_id FROM queue_v1 WHERE stage_type = {type} AND stage_open AND job_open "
    "ORDER BY priority_rank, seq LIMIT 1{lock}"
)


class SqlSession:
    """One transaction; an identity map so a command sees one object per aggregate.

    A PostgreSQL write session starts optimistic: loads by id and the queue claim run beside
    other writers. Its first save or query of any other kind takes the writer lock, and with it
    checks that nothing it loaded has changed since (else ConcurrencyConflict: the command runs
    again); from then on it sees the latest committed state, as writers take turns."""

    def __init__(
        self, store: SqlStore, cur: Cursor | BatchCursor, *, write: bool, locked: bool
    ) -> None:
        self.store = store
        self.cur = cur
        self.p = store.dialect.param
        self.d = store.dialect
        self.write = write
        self.locked = locked
        self.loaded: dict[UUID, Entity] = {}
        self._seen: dict[UUID, tuple[str, int]] = {}  # loaded before the lock: table, version
        # rows read ahead, or snapshots of this process's own last writes, not used yet
        self._fetched: dict[UUID, dict[str, Any] | Snapshot] = {}
        self._ids: list[Later] = []  # the events' ids, as the batches that insert them return
        self._position: int | None = None
        # Stage summaries read ahead before this session sent any write, the deltas its saves
        # make to them, and the stage completions it predicted from the two (checked at commit).
        self._summary_seen: dict[UUID, dict[str, Any]] = {}
        self._deltas: dict[Any, dict[str, int]] = {}
        self._predicted: list[tuple[UUID, bool]] = []

    @property
    def position(self) -> int | None:
        """The log position of the last event this session appended."""
        if self._ids:
            if self._ids[-1].rows is None:
                cast(BatchCursor, self.cur).flush()
            rows = self._ids[-1].rows
            assert rows
            return int(rows[-1]["notification_id"])
        return self._position

    def lock(self) -> None:
        """Take the writer lock, checking that what was loaded before it is still current."""
        if self.locked or not self.write:
            return
        self.locked = True
        self.cur.execute(f"LOCK TABLE {self.store.events_table} IN EXCLUSIVE MODE")
        cast(BatchCursor, self.cur).locked = True
        if not self._seen:
            return
        by_table: dict[str, list[str]] = {}
        params: dict[str, Any] = {"n": len(self._seen)}
        for i, (key, (table, version)) in enumerate(self._seen.items()):
            by_table.setdefault(table, []).append(f"(%(i{i})s::uuid, %(v{i})s::bigint)")
            params[f"i{i}"], params[f"v{i}"] = key, version
        counts = " + ".join(
            f"(SELECT count(*) FROM {table} WHERE (id, version) IN ({', '.join(rows)}))"
            for table, rows in by_table.items()
        )
        cast(BatchCursor, self.cur).execute_prepared(
            f"SELECT jobnik_assert_fresh({counts}, %(n)s::bigint)", params, rows=len(self._seen)
        )

    def hold_queue(self, job_id: UUID) -> None:
        """Lock the queue rows of `job_id` and of its child jobs, at any depth (an abort
        cascades to them), before the writer lock (PostgreSQL).

        A dequeue holds the queue row it claimed (FOR UPDATE SKIP LOCKED) while it waits for
        the event table's lock. A command that changes the job's queue rows under that lock
        would wait for the row in turn: a deadlock, broken by PostgreSQL after
        `deadlock_timeout` by failing one side. Locking the rows first keeps one order, rows
        then table: the command waits for the claims under way (which can take the table lock
        meanwhile), and dequeues skip the rows it holds. Queued, not sent: it travels at the
        head of the command's write string."""
        if self.locked or not isinstance(self.cur, BatchCursor):
            return
        self.cur.execute_prepared(
            f"WITH RECURSIVE tree(id) AS (SELECT %(j)s::uuid UNION ALL SELECT c.id FROM {JOBS} c "
            "JOIN tree ON c.parent_job_id = tree.id) SELECT count(*) FROM (SELECT 1 FROM "
            f"{QUEUE} WHERE job_id IN (SELECT id FROM tree) ORDER BY task_id FOR UPDATE) held",
            {"j": job_id},
        )

    def _sent_events(self) -> bool:
        return any(ids.rows is not None for ids in self._ids)

    def all_completed(self, stage_id: UUID) -> bool:
        """Whether every task of the stage is COMPLETED, counting this session's saves.

        A PostgreSQL session that read the summary ahead (with its task) and has sent no
        write yet predicts it from that row and its own deltas, and checks at commit, under the
        writer lock, that the prediction still holds: no round trip while holding the lock,
        and a conflict only when a concurrent command changed the answer."""
        seen = self._summary_seen.get(stage_id)
        if seen is None or not self.write or self._sent_events():
            summary = self.summary(stage_id)
            return summary.completed == summary.total
        delta = self._deltas.get(stage_id, {})
        done = bool(
            seen["completed"] + delta.get("completed", 0) == seen["total"] + delta.get("total", 0)
        )
        self._predicted.append((stage_id, done))
        return done

    def close(self) -> None:
        """Before the commit: check the predictions made, under the writer lock.

        No NOTIFY: jobnik's followers poll and are woken in-process (`on_commit`), and a NOTIFY
        would serialise every commit of the cluster on the notification queue's lock."""
        if self._predicted:
            self.lock()
        for stage_id, done in self._predicted:
            cast(BatchCursor, self.cur).execute_prepared(
                f"SELECT jobnik_assert_fresh((SELECT count(*) FROM {SUMMARIES} WHERE stage_id = "
                "%(s)s::uuid AND (completed = total) = %(d)s::boolean), 1)",
                {"s": stage_id, "d": done},
            )

    def _load(self, table: str, key: UUID, convert: Any, missing: type[Exception]) -> Any:
        if key in self.loaded:
            return self.loaded[key]
        row = self._fetched.pop(key, None)
        if isinstance(row, Snapshot) and row.table == table:
            aggregate, version = row.restore(), row.version
        else:
            if not isinstance(row, dict):
                row = self.cur.one(
                    f"SELECT * FROM {table} WHERE id = {self.p('id')}",
                    {"id": self.d.dump("id", key)},
                )
            if row is None:
                raise missing
            aggregate, version = convert(row), row["version"]
        self.loaded[key] = aggregate
        if not self.locked and self.write:
            self._seen[key] = (table, version)
        return aggregate

    def _read_ahead(self, value: Any, *, claim: bool) -> dict[str, Any] | None:
        """The task row with id `value`, or (`claim`) the next queued of stage type `value`,
        locked. PostgreSQL write sessions read its stage's, job's and stage summary's rows in
        the same statement, prepared: every worker command uses them."""
        if not isinstance(self.cur, BatchCursor):
            p = self.p("v")
            which = f"({CLAIM.format(type=p, lock='')})" if claim else p
            params = {"v": value if claim else self.d.dump("id", value)}
            return self.cur.one(f"SELECT * FROM {TASKS} t WHERE t.id = {which}", params)
        where = (
            f"({CLAIM.format(type='%(v)s', lock=' FOR UPDATE SKIP LOCKED')})"
            if claim
            else "%(v)s::uuid"
        )
        sql = (
            "SELECT to_jsonb(t) AS task, s.id AS stage_id, s.version AS stage_version, "
            "to_jsonb(s)::text AS stage, j.id AS job_id, j.version AS job_version, "
            "to_jsonb(j)::text AS job, "
            f"to_jsonb(sm) AS summary FROM {TASKS} t JOIN {STAGES} s ON s.id = t.stage_id "
            f"JOIN {JOBS} j ON j.id = t.job_id LEFT JOIN {SUMMARIES} sm ON sm.stage_id = s.id "
            f"WHERE t.id = {where}"
        )
        later = self.cur.later_prepared(sql, {"v": value})
        self.cur.flush()
        rows = later.rows
        # (A prepared statement that waited for a rebuild's swap, DROP TABLE then RENAME, would
        # find nothing rather than re-resolve the names; it cannot wait for one: the session's
        # first statement, WRITING, waits for a swap under way and holds the next one off.)
        if not rows:
            return None
        row = rows[0]
        for kind in ("stage", "job"):
            key = row[f"{kind}_id"]
            if key not in self.loaded and key not in self._fetched:
                self._fetched[key] = self.store.parents.row(key, row[f"{kind}_version"], row[kind])
        if row["summary"] is not None and not self._sent_events():
            self._summary_seen.setdefault(row["stage_id"], row["summary"])
        return self.d.load_jsonb(row["task"])

    def _remember(self, aggregate: Entity) -> Entity:
        return self.loaded.setdefault(aggregate.id, aggregate)

    def job(self, job_id: UUID) -> Job:
        return cast(Job, self._load(JOBS, job_id, job_from_row, JobNotFound))

    def stage(self, stage_id: UUID) -> Stage:
        return cast(Stage, self._load(STAGES, stage_id, stage_from_row, StageNotFound))

    def task(self, task_id: UUID) -> Task:
        if (
            task_id not in self.loaded
            and task_id not in self._fetched
            and self.write
            and not self._recall(task_id)
        ):
            row = self._read_ahead(task_id, claim=False)
            if row is not None:
                self._fetched[task_id] = row
        return cast(Task, self._load(TASKS, task_id, task_from_row, TaskNotFound))

    def token(self, token_id: UUID) -> Token:
        return cast(Token, self._load(TOKENS, token_id, token_from_row, TokenNotFound))

    def _recall(self, task_id: UUID) -> bool:
        """Start from this process's last write of the task, its stage and job (`written`), if
        any: only before the writer lock, whose freshness check then covers them."""
        if self.locked or not isinstance(self.cur, BatchCursor) or self._sent_events():
            return False
        entry = self.store.written.take(task_id)
        if entry is None:
            return False
        for snapshot in (entry.task, entry.stage, entry.job):
            if snapshot.id not in self.loaded:
                self._fetched.setdefault(snapshot.id, snapshot)
        if entry.summary is not None:
            self._summary_seen.setdefault(entry.task.state["stage_id"], dict(entry.summary))
        return True

    def summaries(self) -> dict[UUID, dict[str, int]]:
        """The stage summaries' counts this session saw, with its own changes: after its commit,
        what it knows of them (`written`)."""
        out = {}
        for stage_id, seen in self._summary_seen.items():
            delta = self._deltas.get(stage_id, {})
            out[stage_id] = {c: int(seen[c]) + delta.get(c, 0) for c in ("completed", "total")}
        return out

    def claim(self, stage_type: str) -> Task | None:
        row = self._read_ahead(stage_type, claim=True)
        if row is None:
            return None
        self._fetched.setdefault(row["id"], row)
        return self.task(row["id"])

    def stage_at(self, job_id: UUID, order: int) -> Stage | None:
        self.lock()
        row = self.cur.one(
            f"SELECT * FROM {STAGES} WHERE job_id = {self.p('job_id')} "
            f"AND stage_order = {self.p('o')}",
            {"job_id": self.d.dump("job_id", job_id), "o": order},
        )
        return cast(Stage, self._remember(stage_from_row(row))) if row else None

    def stages_of(self, job_id: UUID) -> list[Stage]:
        self.lock()
        rows = self.cur.all(
            f"SELECT * FROM {STAGES} WHERE job_id = {self.p('job_id')} ORDER BY stage_order",
            {"job_id": self.d.dump("job_id", job_id)},
        )
        return [cast(Stage, self._remember(stage_from_row(r))) for r in rows]

    def queued_tasks(self, job_id: UUID) -> list[Task]:
        self.lock()
        rows = self.cur.all(
            f"SELECT * FROM {TASKS} WHERE job_id = {self.p('job_id')} "
            "AND status IN ('PENDING', 'RETRIED', 'DELEGATED') ORDER BY creation_time, id",
            {"job_id": self.d.dump("job_id", job_id)},
        )
        return [cast(Task, self._remember(task_from_row(r))) for r in rows]

    def tasks_in(self, stage_id: UUID, statuses: Collection[str]) -> list[Task]:
        self.lock()
        wanted = {f"st{i}": str(status) for i, status in enumerate(sorted(statuses))}
        rows = self.cur.all(
            f"SELECT * FROM {TASKS} WHERE stage_id = {self.p('stage_id')} AND status IN "
            f"({', '.join(self.p(k) for k in wanted)}) ORDER BY creation_time, id",
            {"stage_id": self.d.dump("stage_id", stage_id), **wanted},
        )
        return [cast(Task, self._remember(task_from_row(r))) for r in rows]

    def _jobs(self, where: str, params: dict[str, Any]) -> list[Job]:
        self.lock()
        rows = self.cur.all(
            f"SELECT * FROM {JOBS} WHERE {where} ORDER BY creation_time, id", params
        )
        return [cast(Job, self._remember(job_from_row(r))) for r in rows]

    def children_of(self, task_id: UUID) -> list[Job]:
        return self._jobs(
            f"parent_task_id = {self.p('t')}", {"t": self.d.dump("parent_task_id", task_id)}
        )

    def child_jobs(self, job_id: UUID) -> list[Job]:
        return self._jobs(
            f"parent_job_id = {self.p('j')} AND status NOT IN {FINAL_JOB_SQL}",
            {"j": self.d.dump("parent_job_id", job_id)},
        )

    def stale_delegations(self, before: datetime, limit: int) -> list[Task]:
        self.lock()
        rows = self.cur.all(
            f"SELECT * FROM {TASKS} t WHERE status = 'DELEGATED' AND delegated_at < "
            f"{self.p('before')} AND NOT EXISTS (SELECT 1 FROM {JOBS} j WHERE "
            f"j.parent_task_id = t.id AND j.status NOT IN {FINAL_JOB_SQL}) "
            f"ORDER BY delegated_at LIMIT {int(limit)}",
            {"before": self.d.dump("delegated_at", before)},
        )
        return [cast(Task, self._remember(task_from_row(r))) for r in rows]

    def summary(self, stage_id: UUID) -> Summary:
        self.lock()
        row = self.cur.one(
            f"SELECT * FROM {SUMMARIES} WHERE stage_id = {self.p('s')}",
            {"s": self.d.dump("stage_id", stage_id)},
        )
        return summary_from_row(row) if row else Summary()

    def expired_leases(self, now: datetime, limit: int) -> list[Task]:
        self.lock()
        rows = self.cur.all(
            f"SELECT * FROM {TASKS} WHERE status = 'IN_PROGRESS' AND lease_expires_at < "
            f"{self.p('now')} ORDER BY lease_expires_at LIMIT {int(limit)}",
            {"now": self.d.dump("lease_expires_at", now)},
        )
        return [cast(Task, self._remember(task_from_row(r))) for r in rows]

    def save(self, *aggregates: Entity) -> None:
        events = [e for a in aggregates for e in a.collect_events()]
        if not events:
            return
        self.lock()
        stored = [self.store.mapper.to_stored_event(e) for e in events]
        if isinstance(self.cur, BatchCursor):
            ids, positions = self.store.queue_events(self.cur, stored)
            self._ids.append(ids)
            self.store.apply(self.cur, events, positions, self._deltas)
        else:
            written = self.store.insert_events(self.cur, stored)
            self.store.apply(self.cur, events, written)
            self._position = written[-1]
        for a in aggregates:
            self._remember(a)
