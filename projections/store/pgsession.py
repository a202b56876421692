"""PostgreSQL's write session: optimistic until its first write, its statements pipelined.

It loads by id, and claims from the queue, beside other writers. Its first save, or query of any
other kind, takes the writer lock, and with it checks that nothing it loaded has changed since
(else ConcurrencyConflict: the command runs again); from then on it sees the latest committed
state, as writers take turns. A worker's command reads its task with the task's stage, job and
stage summary in one statement.

The session runs in psycopg's pipeline mode, on real parameters: a statement whose rows the
command needs (a read) waits for its answer; every other statement (the lock, the check, the
events, the read-model rows, the commit) is sent without waiting, and the commit's answer is the
only one it then waits for. A command that reads once is therefore two round trips.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING, Any, Final
from uuid import UUID

import orjson
import psycopg
from eventsourcing.domain import DomainEventProtocol
from eventsourcing.persistence import StoredEvent

from jobnik.domain.errors import ConcurrencyConflict
from jobnik.domain.tasks import Task
from jobnik.projections.store.cursor import Cursor
from jobnik.projections.store.session import SqlSession

if TYPE_CHECKING:  # (the store makes its sessions: a runtime import would go in a circle)
    from jobnik.projections.store.postgres import PostgresStore

# SQLSTATEs that mean "run the command again": serialization_failure (the stale-read check
# raises it), deadlock_detected, unique_violation (an aggregate version taken meanwhile).
RETRYABLE: Final = frozenset({"40001", "40P01", "23505"})


class PostgresSession(SqlSession):
    """A write session on a pooled connection in pipeline mode (see the module)."""

    store: PostgresStore

    def __init__(self, store: PostgresStore, conn: psycopg.Connection[Any]) -> None:
        super().__init__(store, Cursor(conn.cursor(), store.dialect), write=True)
        self.conn = conn
        self.locked = False
        self.wrote = False  # a write was sent: a failure must roll back
        self._seen: dict[UUID, tuple[str, int]] = {}  # loaded before the lock: table, version
        self._inserts: list[psycopg.Cursor[Any]] = []  # each save's events INSERT
        # Stage summaries read ahead before this session sent any write, the deltas its saves
        # make to them, and the stage completions it predicted from the two (checked at commit).
        self._summary_seen: dict[UUID, dict[str, Any]] = {}
        self._deltas: dict[Any, dict[str, int]] = {}
        # (stage, predicted completed, the session's own completed - total when predicting)
        self._predicted: list[tuple[UUID, bool, int]] = []

    def lock(self) -> None:
        """Take the writer lock, checking that what was loaded before it is still current (with
        the session's first events, when it saves: `_append`)."""
        if not self.locked:
            self._append_events([])

    def _append_events(self, stored: Sequence[StoredEvent]) -> None:
        """Queue `append`: the writer lock with its checks the first time, and `stored`."""
        seen = (
            []
            if self.locked
            else [{"id": str(k), "version": v, "tbl": t} for k, (t, v) in self._seen.items()]
        )
        self.locked = self.wrote = True
        events = [
            [str(e.originator_id), e.originator_version, e.topic, e.state.decode()] for e in stored
        ]
        params = {"seen": orjson.dumps(seen).decode(), "events": orjson.dumps(events).decode()}
        inserted = self.conn.cursor()
        inserted.execute(self.d.sql("append"), params)
        if stored:
            self._inserts.append(inserted)
            self._position = None

    def hold_queue(self, *job_ids: UUID) -> None:
        """Lock the queue rows of `job_ids` and of their child jobs, at any depth (an abort
        cascades to them), before the writer lock; in one statement, so in one order with any
        other command's (a hold per job, in each command's order of jobs, could deadlock).

        A dequeue holds the queue row it claimed (FOR UPDATE SKIP LOCKED) while it waits for
        the event table's lock. A command that changes the job's queue rows under that lock
        would wait for the row in turn: a deadlock, broken by PostgreSQL after
        `deadlock_timeout` by failing one side. Locking the rows first keeps one order, rows
        then table: the command waits for the claims under way (which can take the table lock
        meanwhile), and dequeues skip the rows it holds."""
        if job_ids and not self.locked:
            self.cur.execute(self.d.sql("hold_queue"), {"j": list(job_ids)})

    def all_completed(self, stage_id: UUID) -> bool:
        """A session that read the summary ahead (with its task, before any write of its own)
        predicts the answer from that row and its own deltas, and checks at commit, under the
        writer lock, that the prediction still holds: no round trip while holding the lock, and
        a conflict only when a concurrent command changed the answer."""
        seen = self._summary_seen.get(stage_id)
        if seen is None:
            return super().all_completed(stage_id)
        own = self._own_lead(stage_id)
        done = bool(seen["completed"] - seen["total"] + own == 0)
        self._predicted.append((stage_id, done, own))
        return done

    def _own_lead(self, stage_id: UUID) -> int:
        """completed - total, counting this session's own saves only."""
        delta = self._deltas.get(stage_id, {})
        return delta.get("completed", 0) - delta.get("total", 0)

    def close(self) -> None:
        """Before the commit: check the predictions made, under the writer lock.

        No NOTIFY: jobnik's followers poll and are woken in-process (`on_commit`), and a NOTIFY
        would serialise every commit of the cluster on the notification queue's lock."""
        if self._predicted:
            self.lock()
        # A prediction made before later saves of this session (a batch) is checked against
        # the row without them: completed - total, less what those saves added, is 0 exactly
        # when it predicted a completion. One check per stage.
        zero: dict[UUID, tuple[set[int], set[int]]] = {}
        for stage_id, done, own in self._predicted:
            later = self._own_lead(stage_id) - own
            zero.setdefault(stage_id, (set(), set()))[done].add(later)
        for stage_id, (no, yes) in zero.items():
            self.cur.execute(
                self.d.sql("assert_summary_fresh"),
                {"s": stage_id, "no": sorted(no), "yes": sorted(yes)},
            )
        self.settle_claims()

    def settle_claims(self) -> None:
        """A claim read its stage type's room before the writer lock, beside other claims of
        the type: under the lock, with every earlier claim committed, its tasks take their
        tokens from the type's rate bucket and their keys' (under a per-key rate), which must
        not go below 0, the type's tasks IN_PROGRESS must be within its concurrency limit, and
        the keys of the claimed tasks' jobs within its per-key limit; else the command runs
        again (and then finds the room taken). Sent with the commit; for a type without
        limits, one probe of a small table."""
        claimed = self._settled()
        if claimed:
            self.lock()
        for stage_type, count, jobs in claimed:
            self.cur.execute(
                self.d.sql("settle_claim"),
                {"v": stage_type, "k": count, "j": [j for j, _ in jobs], "c": [n for _, n in jobs]},
            )

    # -- loads ---------------------------------------------------------------------------------

    def _loaded(self, key: UUID, table: str, version: int) -> None:
        if not self.locked:
            self._seen[key] = (table, version)

    def _at_hand(self, key: UUID) -> bool:
        return key in self.loaded or key in self._fetched

    def task(self, task_id: UUID) -> Task:
        if not self._at_hand(task_id):
            rows = self._read_ahead("read_ahead_task", {"v": task_id})
            if rows:
                self._fetched[task_id] = rows[0]
        return super().task(task_id)

    def read_ahead(self, task_ids: Collection[UUID]) -> None:
        """Read the tasks not at hand, with their stages, jobs and summaries, in one statement
        (a batched report's, before its first write)."""
        wanted = [t for t in dict.fromkeys(task_ids) if not self._at_hand(t)]
        if wanted:
            for row in self._read_ahead("read_ahead_tasks", {"v": wanted}):
                self._fetched.setdefault(row["id"], row)

    def _next_in_queue(self, params: dict[str, Any]) -> dict[str, Any] | None:
        rows = self._read_ahead("read_ahead_claim", params)
        return rows[0] if rows else None

    def _next_batch_in_queue(self, params: dict[str, Any]) -> list[dict[str, Any]]:
        return self._read_ahead("read_ahead_claims", params)

    def _read_ahead(self, name: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        """Tasks' rows (`read_ahead_task(s)`, or the next queued of a stage type, locked:
        `read_ahead_claim(s)`), each with its stage's, job's and stage summary's rows (a batch's
        with each stage's first task only); the stage and job rows kept for their loads."""
        out = []
        for row in self.cur.raw_all(self.d.sql(name), params):
            for kind in ("stage", "job"):
                key = row[f"{kind}_id"]
                if row[kind] is not None and not self._at_hand(key):
                    self._fetched[key] = self.d.load_jsonb(row[kind])
            if row["summary"] is not None and not self._inserts:  # (a later read sees its own)
                self._summary_seen.setdefault(row["stage_id"], row["summary"])
            out.append(self.d.load_jsonb(row["task"]))
        return out

    # -- saving --------------------------------------------------------------------------------

    def _append(
        self, stored: Sequence[StoredEvent], events: Sequence[DomainEventProtocol[Any]]
    ) -> None:
        """Queue the events' INSERT and their read-model rows, which name each event's position
        relative to the last one inserted (`jobnik_position`: under the writer lock the
        positions are consecutive)."""
        self._append_events(stored)
        last = len(stored) - 1
        self.store.apply(self.cur, events, [i - last for i in range(len(stored))], self._deltas)

    @property
    def position(self) -> int | None:
        """The log position of the last event appended: known once its INSERT's answer came
        back (with the commit's; asked before, it waits for it)."""
        if self._position is None and self._inserts:
            row = self._inserts[-1].fetchone()
            assert row is not None
            self._position = int(row["last"])
        return self._position

    def begin(self) -> None:
        """The transaction's first statements: BEGIN, and the shared lock that keeps a
        rebuild's swap from dropping the tables this session reads (see store/postgres.py)."""
        self.cur.raw.execute("BEGIN", prepare=False)
        self.cur.execute(self.d.sql("writing"))

    def abandon(self) -> None:
        """Roll back what this session sent (its command failed after writing)."""
        self.cur.raw.execute("ROLLBACK", prepare=False)

    def commit(self) -> None:
        """Commit. The transaction holding the writer lock commits without waiting for its WAL
        flush (`append` set it so), so the lock goes as soon as its commit record is written;
        a second, one-row transaction in the same round trip then commits synchronously, which
        flushes the WAL through that record too. The command answers only once both are
        durable: nothing acknowledged is lost, while concurrent commands' flushes share fsyncs
        (PostgreSQL's group commit) instead of queueing behind the lock one by one. A session
        that wrote nothing only ends its transaction, with a commit: a rollback would make
        psycopg forget the statements it prepared on the connection."""
        self.cur.raw.execute("COMMIT", prepare=False)
        if self.locked:
            # After the explicit COMMIT, the statement up to the pipeline's sync is a
            # transaction of its own, committed synchronously. PostgreSQL flushes a commit only
            # for a transaction that has an xid and wrote WAL: a transactional logical message
            # does both and writes no table row. Decoders of logical replication slots see an
            # empty message with the prefix "jobnik.flush", which they may ignore.
            self.cur.execute("SELECT pg_logical_emit_message(true, 'jobnik.flush', '')")


def error(e: psycopg.Error) -> Exception:
    """The domain's error for a failed statement: ConcurrencyConflict when running the command
    again can succeed, else the driver's error itself (wrapped as a DatabaseError above)."""
    if e.sqlstate in RETRYABLE:
        return ConcurrencyConflict(f"concurrent update, run again: {e}")
    return e
