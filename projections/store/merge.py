"""PostgreSQL: a command's independent row writes as one statement.

A worker's command writes a handful of single rows to the read models (its task's row, its stage
summary's counters, its queue row, the history index). Sent one by one, each costs the server a
parse, an executor start and end and a result of its own, while the writer lock is held. Joined
as `WITH w0 AS (<write>), w1 AS (<write>) <write>` they cost one.

PostgreSQL runs the parts of such a statement on one snapshot, in no defined order: a part does
not see what another writes. So `chunks` joins only writes whose order cannot matter: each part
is an INSERT, UPDATE or DELETE of its own table, and none reads a table an earlier part of its
statement writes. Anything else (a statement of another form, one that would read an earlier
part's table) starts a new statement, in the original order.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Final

Statement = tuple[str, Mapping[str, Any]]

MAX_PARTS: Final = 8  # a joined statement is prepared: keep its shapes few
_WRITE: Final = re.compile(r"(?:INSERT INTO|UPDATE|DELETE FROM) (\w+)\b")
_READ: Final = re.compile(r"\b(?:FROM|JOIN|USING) (\w+)\b")
_PLACEHOLDER: Final = re.compile(r"%\((\w+)\)s")


@functools.lru_cache(maxsize=1024)
def tables(sql: str) -> tuple[str, frozenset[str]] | None:
    """The table `sql` writes and those it reads; None unless it is a plain write of one table
    (a statement of ours: no quoted names, no WITH of its own)."""
    found = _WRITE.match(sql)
    if found is None:
        return None
    return found.group(1), frozenset(_READ.findall(sql, found.end()))


def chunks(statements: Sequence[Statement]) -> Iterator[list[Statement]]:
    """`statements` in order, in runs that can be joined (`joined`); a run may be one."""
    run: list[Statement] = []
    written: set[str] = set()
    for statement in statements:
        shape = tables(statement[0])
        if shape is None:
            if run:
                yield run
            yield [statement]
            run, written = [], set()
            continue
        table, reads = shape
        if run and (table in written or not reads.isdisjoint(written) or len(run) == MAX_PARTS):
            yield run
            run, written = [], set()
        run.append(statement)
        written.add(table)
    if run:
        yield run


@functools.lru_cache(maxsize=1024)
def joined(sqls: tuple[str, ...]) -> str:
    """One statement doing the writes `sqls` (a run of `chunks`), part i's parameters renamed
    `w<i>_<name>` (`parts_of` reads them back)."""
    parts = [_PLACEHOLDER.sub(rf"%(w{i}_\1)s", sql) for i, sql in enumerate(sqls)]
    head = ", ".join(f"w{i} AS ({text})" for i, text in enumerate(parts[:-1]))
    return f"WITH {head} {parts[-1]}"


@functools.lru_cache(maxsize=1024)
def parts_of(names: tuple[str, ...]) -> tuple[tuple[int, str], ...]:
    """The part and the part's own name of each of a joined statement's parameters."""
    return tuple((int(n[1 : n.index("_")]), n[n.index("_") + 1 :]) for n in names)
