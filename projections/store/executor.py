"""Turns row operations into SQL, batching what commutes (bulk task creation is one executemany)."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from functools import cache
from typing import Any, Final, Protocol

from eventsourcing.domain import DomainEventProtocol

from jobnik.projections.inline.gates import (
    ENDED_PAIRS,
    ENGATE,
    GATE_ROWS,
    GATES_OF_TYPE,
    KEYED_TYPES,
    PAIRS,
    TYPE_PAIRS,
    UNGATE,
    gate_keys,
    gate_room,
    regate_pairs,
)
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
from jobnik.projections.inline.project import project
from jobnik.projections.inline.queue import enqueued_expiry, queue_change
from jobnik.projections.store.dialect import Dialect


class _Cursor(Protocol):
    dialect: Dialect

    def execute(self, sql: str, params: Mapping[str, Any]) -> None: ...

    def executemany(self, sql: str, params: list[dict[str, Any]]) -> None: ...

    def all(self, sql: str, params: Mapping[str, Any]) -> list[dict[str, Any]]: ...


class OpExecutor:
    """Executes `Op`s in one dialect; `rename` maps each statement's table names (a rebuild writes
    the same rows into shadow tables)."""

    def __init__(self, dialect: Dialect, rename: Callable[[str], str] | None = None) -> None:
        self.d = dialect
        self.rename = rename
        self.sql = cache(self._renamed)
        self._text = cache(self._text_of)

    def _renamed(self, kind: type, table: str, keys: tuple[str, ...], cols: tuple[str, ...]) -> str:
        sql = self._sql(kind, table, keys, cols)
        return self.rename(sql) if self.rename is not None else sql

    def _sql(self, kind: type, table: str, keys: tuple[str, ...], cols: tuple[str, ...]) -> str:
        p = self.d.param
        where = " AND ".join(f"{k} = {p('k_' + k)}" for k in keys)
        if kind is Insert:
            return (
                f"INSERT INTO {table} ({', '.join(cols)}) "
                f"VALUES ({', '.join(self.d.value(c, 'v_' + c) for c in cols)})"
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
        if kind is QueueChange:
            return self.d.params(queue_change(cols, keys[0], self.d))
        return self.d.sql("enqueue", expiry=self.d.params(enqueued_expiry(self.d)))  # Enqueue

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
                "time": d.dump("time", op.time),
                "not_before": d.dump("not_before", op.not_before),
                "turn": op.turn,
            }
        if isinstance(op, QueueChange):
            params = d.dump_row(op.key, "k_")
            params.update(d.dump_row(op.values, "v_"))
            params["t"] = d.dump("time", op.time)
            return self.sql(QueueChange, "queue_v1", tuple(op.key), tuple(op.values)), params
        keys = tuple(op.key)
        params = d.dump_row(op.key, "k_")
        if isinstance(op, Update):
            params.update(d.dump_row(op.values, "v_"))
            return self.sql(Update, op.table, keys, tuple(op.values)), params
        if isinstance(op, Add):
            params.update({f"v_{c}": v for c, v in op.deltas.items()})
            return self.sql(Add, op.table, keys, tuple(op.deltas)), params
        assert isinstance(op, Delete), op  # (a `Gate` runs once per command: `regate`)
        return self.sql(Delete, op.table, keys, ()), params

    def run(self, cur: _Cursor, runs: Iterable[list[list[Op]]]) -> None:
        """Each run holds the op lists of events whose ops commute; batch them column-wise. The
        `Gate`s of all of them are worked out once, after everything else."""
        single: list[tuple[str, dict[str, Any]]] = []  # statements not yet sent, in order
        gates: list[Mapping[str, Any]] = []
        for run in runs:
            run = [_ungated(ops, gates) for ops in run]
            if len(run) == 1 or len({len(ops) for ops in run}) != 1:
                single.extend(self.statement(op) for ops in run for op in ops)
                continue
            for column in zip(*run, strict=True):
                self._batch(cur, list(column), single)
        _send(cur, single)
        if gates:
            self.regate(cur, gates)

    def regate(self, cur: _Cursor, keys: Sequence[Mapping[str, Any]]) -> None:
        """Work out again which queued tasks of the gates `keys` name pass their key's limit
        (inline/gates.py): a stage type's rows first given or stripped of their gates, then its
        gates' rows admitted or held."""
        stages, jobs, types, ended = gate_keys(keys)
        for stage_type in types:
            cur.execute(self._text(UNGATE), {"t": stage_type})
            cur.execute(self._text(ENGATE), {"t": stage_type})
        if stages or jobs:
            self._regate(cur, PAIRS, {"stages": ("s.id", stages), "jobs": ("s.job_id", jobs)})
        if ended:
            self._regate(cur, ENDED_PAIRS, {"stages": ("s.id", ended)})
        if types:
            self._regate(cur, TYPE_PAIRS, {"types": ("q.stage_type", types)})

    def _regate(
        self, cur: _Cursor, pairs: str, named: Mapping[str, tuple[str, Sequence[Any]]]
    ) -> None:
        """Flip `held` on the rows whose admission changed, of the gates `pairs` finds (its
        `{slot}`s each a column and its values): in one statement where the backend has LATERAL,
        else a read of the gates, then per gate a read of its room and one of its rows to admit
        and of those admitted, and, if they differ, one statement flipping the rows in one and
        not the other."""
        d = self.d
        if d.laterals:
            kinds = {"stages": "uuid[]", "jobs": "uuid[]", "types": "text[]"}
            where = {k: f"{col} = ANY(%({k})s::{kinds[k]})" for k, (col, _) in named.items()}
            params = {k: list(values) for k, (_, values) in named.items()}
            cur.execute(self._text(regate_pairs(pairs.format(**where))), params)
            return
        where, params = {}, {}
        for k, (col, values) in named.items():
            dumped = [v if k == "types" else d.dump("id", v) for v in values]
            where[k], found = d.one_of(col, k, dumped)
            params.update(found)
        for pair in cur.all(self._text(pairs.format(**where)), params):
            self._regate_gate(cur, pair)

    def _regate_gate(self, cur: _Cursor, gate: dict[str, Any]) -> None:
        """Flip `held` on the rows of `gate` (`t`, `g`) whose admission changed: a read of its
        room, one of its rows to admit and of those admitted, and, if they differ, one statement
        flipping the rows in one and not the other (a backend without LATERAL)."""
        d = self.d
        gate.update(cur.all(self._text(gate_room(d.name)), gate)[0])
        rows = cur.all(self._text(GATE_ROWS), gate)
        first = {r["task_id"] for r in rows if r["admit"]}
        changed = first.symmetric_difference(r["task_id"] for r in rows if not r["admit"])
        if changed:
            ids = [d.dump("task_id", v) for v in sorted(changed, key=str)]
            where_ids, flip = d.one_of("task_id", "f", ids)
            cur.execute(self._text(f"UPDATE queue_v1 SET held = NOT held WHERE {where_ids}"), flip)

    def regate_gates(self, cur: _Cursor, stage_type: str, gates: Sequence[str]) -> None:
        """Work out again which queued tasks of `stage_type`'s `gates` pass their key's limits
        (a claim's, after their keys' buckets gained tokens)."""
        if self.d.laterals:
            cur.execute(self._text(regate_pairs(GATES_OF_TYPE)), {"v": stage_type, "g": gates})
            return
        for gate in gates:
            self._regate_gate(cur, {"t": stage_type, "g": gate})

    def regate_all(self, cur: _Cursor) -> None:
        """`regate` every stage type with a per-key limit: a rebuild's fold skips each event's
        `Gate` and works them all out at its end, which gives the same rows (inline/gates.py)."""
        keyed = cur.all(self._text(KEYED_TYPES), {})
        if keyed:
            self.regate(cur, [{"stage_type": r["stage_type"]} for r in keyed])

    def _text_of(self, template: str) -> str:
        """`template` (a statement of its own, `%(name)s` parameters) in this dialect, renamed."""
        sql = self.d.params(template)
        return self.rename(sql) if self.rename is not None else sql

    def _batch(self, cur: _Cursor, ops: list[Op], single: list[tuple[str, dict[str, Any]]]) -> None:
        if all(isinstance(op, Add) for op in ops):
            ops = _merge_adds(ops)  # type: ignore[arg-type]
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


def _ungated(ops: list[Op], gates: list[Mapping[str, Any]]) -> list[Op]:
    """`ops` without their `Gate`s, whose keys go to `gates`."""
    kept = [op for op in ops if type(op) is not Gate]
    if len(kept) != len(ops):
        gates.extend(op.key for op in ops if isinstance(op, Gate))
    return kept


def _send(cur: _Cursor, statements: Sequence[tuple[str, dict[str, Any]]]) -> None:
    """One-row statements, in order: on a dialect that joins writes, each run that may be
    joined as one statement (`joinable`)."""
    if not statements:
        return
    joins = cur.dialect.joins_writes
    for run in joinable(statements) if joins else ([s] for s in statements):
        if len(run) == 1:
            cur.execute(*run[0])
        else:
            sql = joined(tuple(sql for sql, _ in run))
            cur.execute(sql, {f"w{i}_{k}": v for i, (_, p) in enumerate(run) for k, v in p.items()})


# PostgreSQL runs the parts of one statement (`WITH w0 AS (<write>), w1 AS (<write>) <write>`)
# on one snapshot, in no defined order: a part does not see what another writes. So only writes
# whose order cannot matter are joined: each an INSERT, UPDATE or DELETE of its own table, none
# reading a table an earlier part of its statement writes. Joined, they cost the server one
# statement's start, end and result, and the client one statement to send.
MAX_PARTS: Final = 8  # (each shape is prepared: keep them few)
_WRITE: Final = re.compile(r"(?:INSERT INTO|UPDATE|DELETE FROM) (\w+)\b")
_READ: Final = re.compile(r"\b(?:FROM|JOIN|USING) (\w+)\b")
_PLACEHOLDER: Final = re.compile(r"%\((\w+)\)s")


@functools.lru_cache(maxsize=1024)
def _tables(sql: str) -> tuple[str, frozenset[str]]:
    """The table `sql` writes and those it reads (the executor's statements: plain writes of
    one table)."""
    found = _WRITE.match(sql)
    assert found is not None, sql
    return found.group(1), frozenset(_READ.findall(sql, found.end()))


def joinable(
    statements: Sequence[tuple[str, dict[str, Any]]],
) -> Iterator[list[tuple[str, dict[str, Any]]]]:
    """`statements` in order, in runs that can be joined (`joined`); a run may be one."""
    run: list[tuple[str, dict[str, Any]]] = []
    written: set[str] = set()
    for statement in statements:
        table, reads = _tables(statement[0])
        if run and (table in written or not reads.isdisjoint(written) or len(run) == MAX_PARTS):
            yield run
            run, written = [], set()
        run.append(statement)
        written.add(table)
    if run:
        yield run


@functools.lru_cache(maxsize=1024)
def joined(sqls: tuple[str, ...]) -> str:
    """One statement doing the writes `sqls` (a run of `joinable`), part i's parameters renamed
    `w<i>_<name>`."""
    parts = [_PLACEHOLDER.sub(rf"%(w{i}_\1)s", sql) for i, sql in enumerate(sqls)]
    head = ", ".join(f"w{i} AS ({text})" for i, text in enumerate(parts[:-1]))
    return f"WITH {head} {parts[-1]}"


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
