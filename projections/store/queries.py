"""Named SQL: the statements in sql/queries.sql (both backends) and sql/queries.<backend>.sql.

A statement follows a `-- name: <name>` line, up to the next one; its comment lines describe it.
Parameters are `%(name)s` (SQLite's statements get `:name`). `{open}`, `{next_in_queue}` and
`{next_batch_in_queue}` (and their `_locked` twins) are the dequeue rule (inline/queue.py, within
the limits of inline/limits.py), `{now}` and `{tokens}` a rate's bucket, `{key_wake}` when a key's
bucket next gains a whole token, `{spend}` a claim's draw from its buckets, `{in_force}` a
limits row with something in force, and `{keyed}` a stage `s` whose type has a per-key limit,
filled in here; any
other `{slot}` is the caller's to fill (a list of placeholders, a table name).
`grep -rn <table> projections/store/sql` lists every statement that names a table; statements
built from row operations (executor.py, bulk.py) and the catch-up projections' own (catchup/)
are the rest.
"""

from __future__ import annotations

import re
from importlib.resources import files
from typing import Final

from jobnik.projections.inline.gates import KEYED
from jobnik.projections.inline.limits import (
    FUNCTIONS,
    IN_FORCE,
    KEY_RATE,
    next_token,
    spend,
    tokens,
    within_limit,
)
from jobnik.projections.inline.queue import (
    LOCKED,
    NEXT_BATCH_IN_QUEUE,
    NEXT_IN_QUEUE,
    OPEN_SQL,
    next_in_queue,
)

SQL: Final = files("jobnik.projections.store") / "sql"
_NAME: Final = re.compile(r"^--\s*name:\s*(\w+)\s*$")
_PARAM: Final = re.compile(r"%\((\w+)\)s")


def rules(backend: str) -> dict[str, str]:
    """The dequeue rule's slots; the claim takes no more than the stage type's concurrency
    limit has room for. (PostgreSQL's claims: the `_locked` twins, each probe's rows locked
    with FOR UPDATE SKIP LOCKED.)"""
    return {
        "open": OPEN_SQL,
        "next_in_queue": within_limit(NEXT_IN_QUEUE, backend),
        "next_batch_in_queue": within_limit(NEXT_BATCH_IN_QUEUE, backend),
        "next_in_queue_locked": within_limit(next_in_queue("1", LOCKED), backend),
        "next_batch_in_queue_locked": within_limit(next_in_queue("%(n)s", LOCKED), backend),
        "now": FUNCTIONS[backend]["now"],
        "tokens": tokens(backend),
        "key_wake": next_token(backend, tokens(backend, "b", KEY_RATE)),
        "spend": spend(backend),
        "in_force": IN_FORCE,
        "keyed": KEYED.replace("%(t)s", "s.type"),
    }


class _Slots(dict[str, str]):
    """format_map's mapping: the rules filled in, every other slot left as it is."""

    def __missing__(self, key: str) -> str:
        return "{" + key + "}"


def sqlite_params(sql: str) -> str:
    """`%(name)s` → `:name`, `%%` → `%` (SQLite's named parameters)."""
    return _PARAM.sub(r":\1", sql).replace("%%", "%")


def load(backend: str) -> dict[str, str]:
    """Every named statement `backend` runs, by name, ready for its driver."""
    named: dict[str, str] = {}
    for file in ("queries.sql", f"queries.{backend}.sql"):
        source = SQL / file
        if not source.is_file():
            continue
        name: str | None = None
        lines: list[str] = []
        for line in [*source.read_text(encoding="utf-8").splitlines(), "-- name: _end"]:
            found = _NAME.match(line)
            if found is None:
                if name is not None and line.strip() and not line.lstrip().startswith("--"):
                    lines.append(line.strip())
                continue
            if name is not None:
                if name in named:
                    raise RuntimeError(f"SQL statement {name!r} is named twice")
                text = " ".join(lines).removesuffix(";").strip()
                text = text.format_map(_Slots(rules(backend)))
                named[name] = sqlite_params(text) if backend == "sqlite" else text
            name, lines = found.group(1), []
    return named
