"""Turns row operations into SQL, batching what commutes (bulk task creation is one executemany).

On a cursor that prepares its statements (PostgreSQL's write sessions), the same SET on several
rows of one table (a batch of tasks dequeued or reported at one time), and a DELETE of several
rows by one key, are each one statement over an array of keys (`= ANY`) instead of one per row:
one statement shape, prepared once, whatever the batch's size."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from functools import cache
from typing import Any, Protocol

from eventsourcing.domain import DomainEventProtocol

from jobnik.projections.inline.ops import Add, Delete, Enqueue, IndexEvent, Insert, Op, Update
from jobnik.projections.inline.project import project
from jobnik.projections.store.dialect import Dialect


class _Cursor(Protocol):
    def execute(self, sql: str, params: Mapping[str, Any]) -> None: ...

    def executemany(self, sql: str, params: list[dict[str, Any]]) -> None: ...


class OpExecutor:
    """Executes `Op`s in one dialect; `rename` maps each statement's table names (a rebuild writes
    the same rows into shadow tables)."""

    def __init__(self, dialect: Dialect, rename: Callable[[str], str] | None = None) -> None:
        self.d = dialect
        self.rename = rename
        self.sql = cache(self._renamed)
        self.by_keys = cache(self._by_keys)

    def _renamed(self, kind: type, table: str, keys: tuple[str, ...], cols: tuple[str, ...]) -> str:
        sql = self._sql(kind, table, keys, cols)
        return self.rename(sql) if self.rename is not None else sql

    def _sql(self, kind: type, table: str, keys: tuple[str, ...], cols: tuple[str, ...]) -> str:
        p = self.d.param
        where = " AND ".join(f"{k} = {p('k_' + k)}" for k in keys)
        if kind is Insert:
            return (
                f"INSERT INTO {table} ({', '.join(cols)}) "
                f"VALUES ({', '.join(p('v_' + c) for c in cols)})"
            )
        if kind is Update:
            sets = ", ".join(f"{c} = {p('v_' + c)}" for c in cols)
            return f"UPDATE {table} SET {sets} WHERE {where}"
        if kind is Add:
            sets = ", ".join(f"{c} = {c} + {p('v_' + c)}" for c in cols)
            return f"UPDATE {table} SET {sets} WHERE {where}"
        if kind is Delete:
            return f"DELETE FROM {table} WHERE {where}"
        if kind is IndexEvent:
            return self.d.sql("file_event")
        return self.d.sql("enqueue")  # Enqueue

    def _by_keys(self, kind: type, table: str, key: str, cols: tuple[str, ...]) -> str:
        """`_sql`'s UPDATE or DELETE for every row whose `key` is in the array `%(keys)s`
        (PostgreSQL)."""
        where = f"{key} = ANY({self.d.param('keys')})"
        if kind is Update:
            sets = ", ".join(f"{c} = {self.d.param('v_' + c)}" for c in cols)
            sql = f"UPDATE {table} SET {sets} WHERE {where}"
        else:
            sql = f"DELETE FROM {table} WHERE {where}"
        return self.rename(sql) if self.rename is not None else sql

    def statement(self, op: Op) -> tuple[str, dict[str, Any]]:
        d = self.d
        if isinstance(op, Insert):
            return self.sql(Insert, op.table, (), tuple(op.row)), d.dump_row(op.row, "v_")
        if isinstance(op, IndexEvent):
            return self.sql(IndexEvent, "job_events_v1", (), ()), {
                "entity_id": d.dump("entity_id", op.originator_id),
                "position": op.position,
            }
        if isinstance(op, Enqueue):
            return self.sql(Enqueue, "queue_v1", (), ()), {
                "task_id": d.dump("task_id", op.task_id),
                "stage_id": d.dump("stage_id", op.stage_id),
                "seq": op.seq,
            }
        keys = tuple(op.key)
        params = d.dump_row(op.key, "k_")
        if isinstance(op, Update):
            params.update(d.dump_row(op.values, "v_"))
            return self.sql(Update, op.table, keys, tuple(op.values)), params
        if isinstance(op, Add):
            params.update({f"v_{c}": v for c, v in op.deltas.items()})
            return self.sql(Add, op.table, keys, tuple(op.deltas)), params
        return self.sql(Delete, op.table, keys, ()), params

    def run(self, cur: _Cursor, runs: Iterable[list[list[Op]]]) -> None:
        """Each run holds the op lists of events whose ops commute; batch them column-wise."""
        single: list[tuple[str, dict[str, Any]]] = []  # statements not yet sent, in order
        for run in runs:
            if len(run) == 1 or len({len(ops) for ops in run}) != 1:
                single.extend(self.statement(op) for ops in run for op in ops)
                continue
            for column in zip(*run, strict=True):
                self._batch(cur, list(column), single)
        _send(cur, single)

    def _batch(self, cur: _Cursor, ops: list[Op], single: list[tuple[str, dict[str, Any]]]) -> None:
        if all(isinstance(op, Add) for op in ops):
            ops = _merge_adds(ops)  # type: ignore[arg-type]
        elif hasattr(cur, "execute_prepared") and self._by_key_arrays(single.append, ops):
            return
        grouped: dict[str, list[dict[str, Any]]] = {}
        for op in ops:
            sql, params = self.statement(op)
            grouped.setdefault(sql, []).append(params)
        for sql, params_list in grouped.items():
            if len(params_list) == 1:
                single.append((sql, params_list[0]))
            else:
                _send(cur, single)
                single.clear()
                cur.executemany(sql, params_list)

    def _by_key_arrays(
        self, add: Callable[[tuple[str, dict[str, Any]]], None], ops: list[Op]
    ) -> bool:
        """`ops`, Updates or Deletes of one table by one key column, as one statement per
        distinct set of values (`_by_keys`), each passed to `add` (the one-row statements, whose
        order it keeps); False, adding nothing, when they are not."""
        first = ops[0]
        if len(ops) < 2 or not isinstance(first, Update | Delete) or len(first.key) != 1:
            return False
        kind: type = type(first)
        table, (key,) = first.table, first.key
        cols = tuple(first.values) if isinstance(first, Update) else ()
        groups: dict[Any, tuple[Mapping[str, Any], list[Any]]] = {}
        for op in ops:
            if (
                not isinstance(op, Update | Delete)
                or type(op) is not kind
                or op.table != table
                or tuple(op.key) != (key,)
            ):
                return False
            values: Mapping[str, Any] = {}
            if isinstance(op, Update):
                if tuple(op.values) != cols:
                    return False
                values = op.values
            # (typed: 1 and True, equal in Python, render differently)
            same: Any = tuple((type(v), v) for v in values.values())
            try:
                hash(same)
            except TypeError:  # a JSON document: a group of its own
                same = id(op)
            groups.setdefault(same, (values, []))[1].append(op.key[key])
        sql = self.by_keys(kind, table, key, cols)
        for values, keys in groups.values():
            params = self.d.dump_row(values, "v_")
            params["keys"] = [self.d.dump(key, k) for k in keys]
            add((sql, params))
        return True


def _send(cur: _Cursor, statements: Sequence[tuple[str, dict[str, Any]]]) -> None:
    """One-row statements, in order: as few as the cursor joins them into (PostgreSQL write
    sessions: store/merge.py), prepared where it prepares, else one by one."""
    if not statements:
        return
    writes = getattr(cur, "execute_writes", None)
    if writes is not None:
        writes(statements)
        return
    for sql, params in statements:
        getattr(cur, "execute_prepared", cur.execute)(sql, params)


def _merge_adds(ops: list[Add]) -> list[Op]:
    merged: dict[tuple[str, tuple[tuple[str, Any], ...]], dict[str, int]] = {}
    for op in ops:
        deltas = merged.setdefault((op.table, tuple(op.key.items())), {})
        for c, v in op.deltas.items():
            deltas[c] = deltas.get(c, 0) + v
    return [Add(table, dict(key), deltas) for (table, key), deltas in merged.items()]


def batches(
    events: Sequence[DomainEventProtocol[Any]], ids: Sequence[Any]
) -> Iterator[list[list[Op]]]:
    """Group consecutive events of one type and distinct aggregates: their ops commute."""
    run: list[list[Op]] = []
    kind: type | None = None
    seen: set[Any] = set()
    for event, position in zip(events, ids, strict=True):
        if run and (type(event) is not kind or event.originator_id in seen):
            yield run
            run, seen = [], set()
        kind = type(event)
        seen.add(event.originator_id)
        run.append(project(event, position))
    if run:
        yield run
