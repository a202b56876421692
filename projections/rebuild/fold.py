"""Rebuild fast path: a page of row operations folded into final row states, written in bulk.

During a rebuild the shadow tables are private (only the rebuild writes them), so the operations
a page of events makes (`inline.project.project`) need not reach the database one by one. `Fold`
applies them in memory, keyed by primary key: an Insert followed by Updates and Adds of the same
row is one row; a row inserted and deleted in the page never reaches the database; Updates and
Adds of a row stored by an earlier page collapse into one patch. `flush` then writes a few
statements per table and shape, whatever the number of rows (store/bulk.py).

Exactly the rows of the per-event path (`store.executor.OpExecutor`), by construction:
- an operation is folded only when its outcome is known from memory: it names its row by primary
  key, and the row is new in the page, or known absent, or the operation needs nothing but the key
  (a patch: `UPDATE ... WHERE pk` does the same to the stored row, or nothing if there is none);
- `Enqueue` reads the job and stage rows: one that memory has no word of is read from the
  database when an Enqueue first needs it (nothing in memory changed it: the stored row is the
  row), and followed in memory from there;
- a Delete by another column (a stage's or job's tasks leaving the queue as it ends) keeps its
  statement, which the flush runs before every other write of the page, and turns the rows in
  memory it matches into GONE: the same rows, unless the page moved a row out of the set it
  names (the stored row may match), where it is a barrier;
- anything else (an Update by another column, an Insert of a row the page already holds, an
  Enqueue whose rows memory has only patched or a pending Delete may remove) is a barrier:
  everything folded so far is written, the operation runs as its own SQL, and memory forgets
  what the statement may have changed.
The history index (an `IndexEvent` per event on the per-event path, a lookup in
`entity_jobs_v1`) is not folded: pages come without IndexEvents (`apply.fold_ops`), and the
page's (aggregate, position) pairs are filed by one set-based statement after the page's
`entity_jobs_v1` rows. That files the same events, since an aggregate's first event is its
creation, the one that makes its `entity_jobs_v1` row, and nothing deletes those rows.

What memory keeps between pages, and the rows it carries to the next one: rowstate.py.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from jobnik.projections.inline.ops import (
    Add,
    Delete,
    Enqueue,
    Gate,
    IndexEvent,
    Insert,
    Op,
    QueueChange,
    Update,
)
from jobnik.projections.inline.queue import queue_row
from jobnik.projections.inline.tables import JOBS, QUEUE, STAGES
from jobnik.projections.rebuild.rowstate import (
    CARRIED,
    GONE,
    KEEP,
    KEPT,
    LOADED,
    MISSING,
    NEW,
    PATCH,
    PK,
    PK1,
    Barrier,
    Row,
    memo,
    stored_key,
)
from jobnik.projections.store.bulk import BulkWriter
from jobnik.projections.store.cursor import Cursor
from jobnik.projections.store.executor import OpExecutor


class Fold:
    """Folds pages of `Op`s and writes them with `bulk` (into the tables its `rename` names);
    one instance per rebuild pass."""

    def __init__(self, executor: OpExecutor, bulk: BulkWriter) -> None:
        self.executor = executor
        self.bulk = bulk
        self.rows: dict[str, dict[Any, Row]] = {}
        self.where: list[Delete] = []  # Deletes by other columns: `flush` runs them first
        self.kept: dict[str, dict[Any, Row]] = {}  # (`_retain`)
        self.carried: dict[str, dict[Any, Row]] = {}  # (`_carry`)
        self.cur: Cursor | None = None  # the page's, while `apply` folds it
        self._fold: dict[type, Callable[[Any], None]] = {
            Enqueue: self._enqueue,
            Insert: self._insert_op,
            Update: self._update_op,
            Add: self._add_op,
            Delete: self._delete_op,
            QueueChange: self._queue_change,
            Gate: self._gate,
        }

    # -- the fold ------------------------------------------------------------------------------

    def apply(
        self, cur: Cursor, page: Sequence[list[Op]], index: Sequence[tuple[Any, int]] = ()
    ) -> None:
        """Apply one page of op lists (an event's each, in log order, without IndexEvents) and
        write the result; `index`: the (aggregate, position) of the page's events, filed in the
        history index after the page's entity_jobs rows."""
        for table in PK:
            self.bulk.types(cur, table)
        self.bulk.begin(cur)
        self.cur = cur  # (`_known` reads a stage or job row memory lacks through it)
        fold = self._fold
        for ops in page:
            for op in ops:
                try:
                    fold[type(op)](op)  # in memory, or raise Barrier
                except Barrier:
                    self.flush(cur, keep=True)
                    cur.execute(*self.executor.statement(op))
                    self.forget(op)
        self.flush(cur, keep=False)
        if index:
            self.bulk.index(cur, index)
        self._retain()
        self.cur = None

    def _enqueue(self, op: Enqueue) -> None:
        self._insert(QUEUE, self._enqueued(op))

    @staticmethod
    def _gate(op: Gate) -> None:
        """Nothing: the pass works every gate out at its end (apply.py), as one command's
        `Gate`s are worked out after its other rows."""

    @staticmethod
    def _queue_change(op: QueueChange) -> None:
        raise Barrier  # (rare: a stage or job opening or closing, a task rescheduled)

    def _insert_op(self, op: Insert) -> None:
        self._insert(op.table, dict(op.row))

    def _row(self, table_name: str, key: Mapping[str, Any]) -> tuple[dict[Any, Row], Any]:
        """The table's rows in memory and the key of the row `key` names (else Barrier)."""
        table = self.rows.get(table_name)
        if table is None:
            table = self.rows[table_name] = {}
        single = PK1.get(table_name)
        if single is not None and len(key) == 1:  # the usual case, without a call to _pk
            value = key.get(single, MISSING)
            if value is not MISSING:
                return table, memo(value)
        return table, self._pk(table_name, key)

    def _delete_op(self, op: Delete) -> None:
        try:
            table, key = self._row(op.table, op.key)
        except Barrier:
            self._delete_where(op)  # by another column than the primary key
            return
        row = table.get(key)
        if row is None or row.state is LOADED or row.state is PATCH:
            table[key] = Row(GONE, replaces=True)
        elif row.state is NEW:
            table[key] = Row(GONE, replaces=row.replaces)

    def _delete_where(self, op: Delete) -> None:
        """A Delete by other columns (a stage's or job's tasks leaving the queue when it ends):
        the stored rows go by its statement, which `flush` runs before the page's other writes;
        the rows in memory are judged here. (Barrier where that order would differ from the
        log's: a row the page moved out of the set, or one whose column memory does not know.)"""
        rows = self.rows.get(op.table, {})
        doomed = []
        for key, row in rows.items():
            if row.state is GONE:
                continue
            values = row.values
            if not all(c in values for c in op.key):
                if row.state is PATCH:
                    continue  # the patch leaves those columns as stored: the statement decides
                raise Barrier  # a row inserted with a default memory does not evaluate
            if all(values[c] == v for c, v in op.key.items()):
                doomed.append(key)
            elif row.state is PATCH or (row.state is LOADED and not row.dirty.isdisjoint(op.key)):
                raise Barrier  # the page moved the row out of the set: the stored row may match
        for key in doomed:
            row = rows[key]
            rows[key] = Row(GONE, replaces=row.replaces or row.state is not NEW)
        self.where.append(op)

    def _update_op(self, op: Update) -> None:
        table, key = self._row(op.table, op.key)
        row = table.get(key)
        if row is None:
            table[key] = Row(PATCH, dict(op.values))
            return
        if row.state is GONE:
            return  # UPDATE ... WHERE pk of a row that is not there
        row.values.update(op.values)
        if row.state is PATCH:
            if row.adds:
                for c in op.values:
                    row.adds.pop(c, None)
        elif row.state is LOADED:
            row.dirty.update(op.values)

    def _add_op(self, op: Add) -> None:
        table, key = self._row(op.table, op.key)
        row = table.get(key)
        if row is None:
            row = table[key] = Row(PATCH)
            row.adds.update(op.deltas)
            return
        if row.state is GONE:
            return  # UPDATE ... WHERE pk of a row that is not there
        if row.state is PATCH:  # the usual case: a counter of a stored row
            values, adds = row.values, row.adds
            for c, delta in op.deltas.items():
                if c in values:
                    now = values[c]
                    values[c] = None if now is None else now + delta
                else:
                    adds[c] = adds.get(c, 0) + delta
            return
        added = {}  # every column worked out before any changes: a Barrier leaves the row as it was
        for c, delta in op.deltas.items():
            if c in row.values:
                now = row.values[c]
            elif row.state is NEW:
                now = self._default(op.table, c)
            else:
                raise Barrier
            added[c] = None if now is None else now + delta
        row.values.update(added)
        if row.state is LOADED:
            row.dirty.update(added)

    def _pk(self, table: str, key: Mapping[str, Any], *, row: bool = False) -> Any:
        """The primary key `key` names (of a whole `row`), or Barrier if it names another set."""
        single = PK1.get(table)
        if single is not None and (row or len(key) == 1):
            value = key.get(single, MISSING)
            if value is MISSING:
                raise Barrier
            return memo(value)
        pk = PK.get(table)
        if pk is None or (not row and len(key) != len(pk)) or any(c not in key for c in pk):
            raise Barrier
        return tuple(key[c] for c in pk)

    def _insert(self, table: str, values: dict[str, Any] | None) -> None:
        if values is None:
            return  # the Enqueue found no stage or job row: INSERT ... SELECT inserts nothing
        single = PK1.get(table)
        if single is not None and single in values:
            key = memo(values[single])
        else:
            key = self._pk(table, values, row=True)
        rows = self.rows.get(table)
        if rows is None:
            rows = self.rows[table] = {}
        row = rows.get(key)
        if row is None:
            rows[key] = Row(NEW, values)
            return
        if row.state is NEW or row.state is LOADED:
            raise Barrier  # a duplicate key: let the database raise as the per-event path does
        # on an unknown or patched key the stored row, if any, makes the INSERT fail as it would
        rows[key] = Row(NEW, values, row.replaces)

    def _known(self, table: str, key: Any) -> dict[str, Any] | None:
        """The row of `table` with primary key `key` (None: no such row), read from the
        database when memory has no word of it: then the stored row is the row as it is."""
        row = self.rows.get(table, {}).get(memo(key))
        if row is None:
            if any(op.table == table for op in self.where):
                raise Barrier  # the stored row may be one a pending Delete removes
            self._load(self.cur, table, {key})
            row = self.rows[table][memo(key)]
        if row.state == PATCH:
            raise Barrier  # changed in memory, not known whole
        return row.values if row.state in (NEW, LOADED) else None

    def _enqueued(self, op: Enqueue) -> dict[str, Any] | None:
        stage = self._known(STAGES, op.stage_id)
        if stage is None:
            return None
        job = self._known(JOBS, stage["job_id"])
        if job is None:
            return None
        return queue_row(op.task_id, stage, job, op.seq, op.time, op.not_before, op.turn)

    def forget(self, op: Op) -> None:
        """After `op` ran as SQL: drop what memory holds that the statement may have changed."""
        if isinstance(op, IndexEvent | Gate):
            return
        table = QUEUE if isinstance(op, Enqueue | QueueChange) else op.table
        rows = self.rows.get(table, {})
        if isinstance(op, Enqueue):
            rows.pop(memo(op.task_id), None)
            return
        if isinstance(op, Insert):
            rows.pop(self._pk(table, op.row, row=True), None)
            return
        for key, row in list(rows.items()):
            if row.state == LOADED and all(c in row.values for c in op.key):
                if any(row.values[c] != v for c, v in op.key.items()):
                    continue
                if isinstance(op, Delete):
                    rows[key] = Row(GONE)
                    continue
                if isinstance(op, Update):
                    row.values.update(op.values)
                    continue
            if row.state != GONE:
                del rows[key]

    def _load(self, cur: Cursor | None, table: str, ids: set[Any]) -> list[dict[str, Any]]:
        """Read the stored rows `ids` of `table` into memory (LOADED, or GONE when absent)."""
        assert cur is not None
        if not ids:
            return []
        ordered = sorted(ids, key=str)
        found = self.bulk.load(cur, table, ordered)
        rows = self.rows.setdefault(table, {})
        for key in ordered:
            rows[memo(key)] = Row(GONE)
        for r in found:
            rows[memo(r["id"])] = Row(LOADED, r)
        return found

    # -- writing -------------------------------------------------------------------------------

    def flush(self, cur: Cursor, *, keep: bool) -> None:
        """Write everything folded so far; with `keep`, memory then holds what it still knows
        (whole rows as LOADED, absent ones as GONE), else it is emptied, except for the rows
        carried to the next page (`_carry`)."""
        carry = {} if keep else self._carry()
        for op in self.where:  # before every other write: they came before them in the log
            cur.execute(*self.executor.statement(op))
        self.where.clear()
        for table, rows in self.rows.items():
            doomed = [stored_key(table, k) for k, r in rows.items() if r.replaces]
            if doomed:
                self.bulk.delete(cur, table, doomed)
        for table, rows in self.rows.items():
            shapes: dict[tuple[str, ...], list[dict[str, Any]]] = {}
            for r in rows.values():
                if r.state == NEW:
                    shapes.setdefault(tuple(r.values), []).append(r.values)
            for cols, values in shapes.items():
                self.bulk.insert(cur, table, cols, values)
        for table, rows in self.rows.items():
            patches: dict[tuple[tuple[str, ...], tuple[str, ...]], list[Any]] = {}
            for key, r in rows.items():
                if r.state == PATCH:
                    sets, adds = r.values, r.adds
                elif r.state == LOADED and r.dirty:
                    sets, adds = {c: r.values[c] for c in r.dirty}, {}
                else:
                    continue
                patches.setdefault((tuple(sets), tuple(adds)), []).append(
                    (stored_key(table, key), sets, adds)
                )
            for (set_cols, add_cols), items in patches.items():
                self.bulk.update(cur, table, set_cols, add_cols, items)
        if not keep:
            self.kept = {t: rows for t in KEPT if len(rows := self.rows.get(t, {})) <= KEEP}
            self.rows.clear()
            self.carried = carry
            return
        for table in self.rows:
            self._known_whole(table)

    def _known_whole(self, table: str) -> None:
        """After a flush: memory keeps the rows of `table` it knows whole (LOADED) or absent."""
        rows, columns = self.rows[table], self.bulk.columns[table].keys()
        for key, r in list(rows.items()):
            if r.state == GONE:
                rows[key] = Row(GONE)
            elif r.state != PATCH and r.values.keys() >= columns:
                rows[key] = Row(LOADED, r.values)
            else:  # a patch, or a row inserted with defaults: not known whole
                del rows[key]

    def _retain(self) -> None:
        """Between pages: keep the stage and job rows known whole (a few: KEEP at most per
        table), so that the next pages' Enqueues need not read them back (`_known`), and the
        rows carried to the next page, still to be written."""
        self.rows.update(self.kept)
        self.kept = {}
        for table in self.rows:
            self._known_whole(table)
        self.rows.update(self.carried)
        self.carried = {}

    def _carry(self) -> dict[str, dict[Any, Row]]:
        """Take out of this page's writes the rows it inserted into CARRIED tables: the next
        page's events usually change them (a task's next events, its queue row's removal),
        and folded into them there they are written once. A row is carried once, and the
        caller's empty page (`drain`) writes what the last page carried."""
        carry = {}
        for table in CARRIED:
            rows = self.rows.get(table)
            if not rows:
                continue
            later = {
                k: r for k, r in rows.items() if r.state is NEW and not r.carried and not r.replaces
            }
            for k, r in later.items():
                r.carried = True
                del rows[k]
            if later:
                carry[table] = later
        return carry

    def _default(self, table: str, column: str) -> int | None:
        col = self.bulk.columns.get(table, {}).get(column)
        if col is None or (col.has_default and col.default is None):
            raise Barrier  # unknown column or a default we do not evaluate: let SQL do it
        return col.default
