"""PostgreSQL's write session: optimistic until its first write, its statements in few strings.

It loads by id, and claims from the queue, beside other writers. Its first save, or query of any
other kind, takes the writer lock, and with it checks that nothing it loaded has changed since
(else ConcurrencyConflict: the command runs again); from then on it sees the latest committed
state, as writers take turns. A worker's command reads its task with the task's stage, job and
stage summary in one prepared statement, or starts from what this process last committed of them
(written.py), so its reads, checks and writes travel as one string.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Collection, Sequence
from typing import TYPE_CHECKING, Any, Final
from uuid import UUID

from eventsourcing.domain import DomainEventProtocol
from eventsourcing.persistence import StoredEvent

from jobnik.domain.base import Entity
from jobnik.domain.tasks import Task
from jobnik.projections.store import eventlog
from jobnik.projections.store.batch import BatchCursor, Later
from jobnik.projections.store.dialect import Dialect
from jobnik.projections.store.session import SqlSession
from jobnik.projections.store.written import Snapshot

if TYPE_CHECKING:  # (the store makes its sessions: a runtime import would go in a circle)
    from jobnik.projections.store.postgres import PostgresStore


class ParentRows:
    """The stage and job rows write sessions read ahead with each task, decoded, by id and
    version: every worker command reads the same few, and they change far less often than
    their tasks. A row is its aggregate's snapshot at that version (only the aggregate's own
    events write it), so a cached row is the row; the server still sends it (as text, which
    costs the client nothing to receive), and only a new version is decoded. The rows are
    shared, read-only: aggregates restored from them replace attributes, never mutate them.
    Bounded by rows and by the size of their text (a job's data may be large): when either
    is reached, everything kept is dropped and the hot rows come back with the next commands.

    A claim names the stage and job it found last for its stage type (`hint`): when the task
    it claims is of those, at those versions, the server leaves their rows out (rendering them
    was a third of the claim's cost) and they come from here (`cached`)."""

    ROWS: Final = 1024
    CHARS: Final = 16 * 1024 * 1024

    def __init__(self, dialect: Dialect) -> None:
        self.dialect = dialect
        self._rows: dict[UUID, tuple[int, dict[str, Any]]] = {}
        self._chars = 0
        self._last: dict[str, tuple[UUID, int, UUID, int]] = {}  # by stage type

    def hint(self, stage_type: str) -> dict[str, Any]:
        """The stage's and job's ids and versions last claimed for `stage_type`, if kept (the
        claim's parameters s, sv, j and jv; NULLs otherwise)."""
        last = self._last.get(stage_type)
        if last is None or not (self.cached(last[0], last[1]) and self.cached(last[2], last[3])):
            return {"s": None, "sv": None, "j": None, "jv": None}
        return {"s": last[0], "sv": last[1], "j": last[2], "jv": last[3]}

    def claimed(self, stage_type: str, row: dict[str, Any]) -> None:
        """Note the stage and job of a claim's `row` for the next claim of `stage_type`."""
        if len(self._last) >= self.ROWS:
            self._last = {}
        self._last[stage_type] = (
            row["stage_id"],
            row["stage_version"],
            row["job_id"],
            row["job_version"],
        )

    def cached(self, key: UUID, version: int) -> dict[str, Any] | None:
        """The row kept of `key` at `version`, if any."""
        kept = self._rows.get(key)
        return kept[1] if kept is not None and kept[0] == version else None

    def row(self, key: UUID, version: int, text: str) -> dict[str, Any]:
        cached = self._rows.get(key)
        if cached is not None and cached[0] == version:
            return cached[1]
        row = self.dialect.load_jsonb(json.loads(text))
        if len(self._rows) >= self.ROWS or self._chars + len(text) > self.CHARS:
            self._rows, self._chars = {}, 0
        self._rows[key] = (version, row)
        self._chars += len(text)
        return row


class PostgresSession(SqlSession):
    """A write session over a batched transaction (batch.py)."""

    store: PostgresStore
    cur: BatchCursor

    def __init__(self, store: PostgresStore, cur: BatchCursor) -> None:
        super().__init__(store, cur, write=True)
        self.locked = False
        self._seen: dict[UUID, tuple[str, int]] = {}  # loaded before the lock: table, version
        self._ids: list[Later] = []  # the events' ids, as the batches that insert them return
        # Stage summaries read ahead before this session sent any write, the deltas its saves
        # make to them, and the stage completions it predicted from the two (checked at commit).
        self._summary_seen: dict[UUID, dict[str, Any]] = {}
        self._deltas: dict[Any, dict[str, int]] = {}
        # (stage, predicted completed, the session's own completed - total when predicting)
        self._predicted: list[tuple[UUID, bool, int]] = []

    @property
    def position(self) -> int | None:
        if not self._ids:
            return None
        if self._ids[-1].rows is None:
            self.cur.flush()
        rows = self._ids[-1].rows
        assert rows
        return int(rows[-1]["notification_id"])

    def lock(self) -> None:
        """Take the writer lock, checking that what was loaded before it is still current."""
        if self.locked:
            return
        self.locked = self.cur.locked = True
        self.cur.execute(self.d.sql("lock_writers", events=self.store.events_table))
        if not self._seen:
            return
        params: dict[str, Any] = {"n": len(self._seen)}
        for i, (key, (_, version)) in enumerate(self._seen.items()):
            params[f"i{i}"], params[f"v{i}"] = key, version
        tables = tuple(table for table, _ in self._seen.values())
        self.cur.execute_prepared(_assert_fresh(self.d, tables), params, rows=len(tables))

    def hold_queue(self, *job_ids: UUID) -> None:
        """Lock the queue rows of `job_ids` and of their child jobs, at any depth (an abort
        cascades to them), before the writer lock; in one statement, so in one order with any
        other command's (a hold per job, in each command's order of jobs, could deadlock).

        A dequeue holds the queue row it claimed (FOR UPDATE SKIP LOCKED) while it waits for
        the event table's lock. A command that changes the job's queue rows under that lock
        would wait for the row in turn: a deadlock, broken by PostgreSQL after
        `deadlock_timeout` by failing one side. Locking the rows first keeps one order, rows
        then table: the command waits for the claims under way (which can take the table lock
        meanwhile), and dequeues skip the rows it holds. Queued, not sent: it travels at the
        head of the command's write string."""
        if job_ids and not self.locked:
            self.cur.execute_prepared(self.d.sql("hold_queue"), {"j": list(job_ids)})

    def _sent_events(self) -> bool:
        return any(ids.rows is not None for ids in self._ids)

    def all_completed(self, stage_id: UUID) -> bool:
        """A session that read the summary ahead (with its task) and has sent no write yet
        predicts the answer from that row and its own deltas, and checks at commit, under the
        writer lock, that the prediction still holds: no round trip while holding the lock, and
        a conflict only when a concurrent command changed the answer."""
        seen = self._summary_seen.get(stage_id)
        if seen is None or self._sent_events():
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
            self.cur.execute_prepared(
                self.d.sql("assert_summary_fresh"),
                {"s": stage_id, "no": _array(no), "yes": _array(yes)},
            )

    # -- loads ---------------------------------------------------------------------------------

    def _fetch(
        self,
        table: str,
        key: UUID,
        convert: Callable[[dict[str, Any]], Entity],
        missing: type[Exception],
    ) -> tuple[Entity, int]:
        held = self._fetched.get(key)
        if isinstance(held, Snapshot):
            del self._fetched[key]
            if held.table == table:
                return held.restore(), held.version
        return super()._fetch(table, key, convert, missing)

    def _loaded(self, key: UUID, table: str, version: int) -> None:
        if not self.locked:
            self._seen[key] = (table, version)

    def task(self, task_id: UUID) -> Task:
        if (
            task_id not in self.loaded
            and task_id not in self._fetched
            and not self._recall(task_id)
        ):
            rows = self._read_ahead("read_ahead_task", {"v": task_id})
            if rows:
                self._fetched[task_id] = rows[0]
        return super().task(task_id)

    def read_ahead(self, task_ids: Collection[UUID]) -> None:
        """Read the tasks not at hand, with their stages, jobs and summaries, in one statement
        (a batched report's, before its first write)."""
        wanted = [
            t
            for t in dict.fromkeys(task_ids)
            if t not in self.loaded and t not in self._fetched and not self._recall(t)
        ]
        if wanted:
            for row in self._read_ahead("read_ahead_tasks", {"v": wanted}):
                self._fetched.setdefault(row["id"], row)

    def _next_in_queue(self, stage_type: str) -> dict[str, Any] | None:
        parents = self.store.parents
        rows = self._read_ahead(
            "read_ahead_claim", {"v": stage_type, **parents.hint(stage_type)}, stage_type
        )
        return rows[0] if rows else None

    def _next_batch_in_queue(self, stage_type: str, count: int) -> list[dict[str, Any]]:
        return self._read_ahead("read_ahead_claims", {"v": stage_type, "n": int(count)})

    def _read_ahead(
        self, name: str, params: dict[str, Any], claimed: str | None = None
    ) -> list[dict[str, Any]]:
        """Tasks' rows (`read_ahead_task`, or the next queued of a stage type, locked:
        `read_ahead_claim(s)`), each with its stage's, job's and stage summary's rows, prepared:
        every worker command uses them. `claimed`: the stage type a claim's hint is for."""
        later = self.cur.queued_prepared(self.d.sql(name), params)
        self.cur.flush()
        # (A prepared statement that waited for a rebuild's swap, DROP TABLE then RENAME, would
        # find nothing rather than re-resolve the names; it cannot wait for one: the session's
        # first statement, `writing`, waits for a swap under way and holds the next one off.)
        rows = later.rows or ()
        if claimed is not None and rows:
            self.store.parents.claimed(claimed, rows[0])
        return [self._read_ahead_row(row) for row in rows]

    def _read_ahead_row(self, row: dict[str, Any]) -> dict[str, Any]:
        """The task's row; its stage's and job's rows kept for their loads (a batch's rows
        carry them, and the summary, with the stage's first task only; a claim's, unless they
        are those its hint named). A row left out and no longer kept is loaded when needed."""
        parents = self.store.parents
        for kind in ("stage", "job"):
            key, version = row[f"{kind}_id"], row[f"{kind}_version"]
            if key in self.loaded or key in self._fetched:
                continue
            if row[kind] is not None:
                self._fetched[key] = parents.row(key, version, row[kind])
            elif (held := parents.cached(key, version)) is not None:
                self._fetched[key] = held
        if row["summary"] is not None and not self._sent_events():
            self._summary_seen.setdefault(row["stage_id"], row["summary"])
        return self.d.load_jsonb(row["task"])

    def _recall(self, task_id: UUID) -> bool:
        """Start from this process's last write of the task, its stage and job (`written`), if
        any: only before the writer lock, whose freshness check then covers them."""
        if self.locked or self._sent_events():
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

    # -- saving --------------------------------------------------------------------------------

    def _append(
        self, stored: Sequence[StoredEvent], events: Sequence[DomainEventProtocol[Any]]
    ) -> None:
        ids, positions = eventlog.queue_insert_postgres(
            self.cur, self.store.events_table, self.store.sequence, stored
        )
        self._ids.append(ids)
        self.store.apply(self.cur, events, positions, self._deltas)


@functools.lru_cache(maxsize=256)
def _assert_fresh(d: Dialect, tables: tuple[str, ...]) -> str:
    """The check that rows loaded from `tables` (in load order; parameters `i<k>` and `v<k>`,
    the k-th row's id and version) are unchanged: a few shapes, each built once."""
    by_table: dict[str, list[tuple[str, str]]] = {}
    for i, table in enumerate(tables):
        by_table.setdefault(table, []).append((f"%(i{i})s::uuid", f"%(v{i})s::bigint"))
    counts = " + ".join(
        d.sql("unchanged_one", table=table, id=pairs[0][0], version=pairs[0][1])
        if len(pairs) == 1
        else d.sql("unchanged", table=table, pairs=", ".join(f"({i}, {v})" for i, v in pairs))
        for table, pairs in by_table.items()
    )
    return d.sql("assert_fresh", counts=counts)


def _array(values: set[int]) -> str:
    """A bigint[] literal's text."""
    return "{" + ",".join(str(v) for v in sorted(values)) + "}"
