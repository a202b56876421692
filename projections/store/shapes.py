"""The shapes of the write path's statements (batch.py): their prepared forms, and the one row of
a `VALUES (...)` list that a batch of rows repeats."""

from __future__ import annotations

import functools
import hashlib
import re
from typing import Final

HOT_ROWS: Final = 16  # statements listing more rows than this (a bulk write's) are not prepared
PLACEHOLDER: Final = re.compile(r"%\((\w+)\)s")
_VALUES: Final = re.compile(r"[ (]VALUES \(")


@functools.lru_cache(maxsize=1024)
def prepared_form(sql: str) -> tuple[str, str, tuple[str, ...]]:
    """A statement with `%(name)s` placeholders as a name for PREPARE, its text with $1, $2...
    and the parameter names in $ order."""
    names: list[str] = []

    def number(m: re.Match[str]) -> str:
        if m.group(1) not in names:
            names.append(m.group(1))
        return f"${names.index(m.group(1)) + 1}"

    text = PLACEHOLDER.sub(number, sql).replace("%%", "%")
    return f"jobnik_{hashlib.sha1(sql.encode()).hexdigest()[:16]}", text, tuple(names)


def values_row(sql: str) -> tuple[int, int] | None:
    """Where the row of the statement's `VALUES (...)` list starts and ends, if it has one."""
    values = _VALUES.search(sql)
    if values is None:
        return None
    start = values.end() - 1
    return start, _closing(sql, start) + 1


def _closing(sql: str, start: int) -> int:
    """The index of the parenthesis closing the one at `start` (SQL we wrote: no quotes)."""
    depth = 0
    for i in range(start, len(sql)):
        depth += {"(": 1, ")": -1}.get(sql[i], 0)
        if depth == 0:
            return i
    raise ValueError(f"unbalanced parentheses in {sql!r}")


@functools.lru_cache(maxsize=256)
def rows_of(sql: str, n: int) -> str:
    """`sql`, which has a `VALUES (...)` list, with its row listed `n` times, the
    placeholders of row i suffixed `_i`."""
    where = values_row(sql)
    assert where is not None
    start, end = where
    rows = [_numbered(sql[start:end], i) for i in range(n)]
    return f"{sql[:start]}{', '.join(rows)}{sql[end:]}"


def _numbered(row: str, i: int) -> str:
    return PLACEHOLDER.sub(lambda m: f"%({m.group(1)}_{i})s", row)
