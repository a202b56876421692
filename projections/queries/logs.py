"""A task's log, read in pages of lines. A row of `task_logs_v2` is one append (a TaskLogged
event, keyed by its log position); a page may begin or end inside one."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final
from uuid import UUID

from jobnik.domain.errors import TaskNotFound
from jobnik.projections.inline.tables import LOGS
from jobnik.projections.store.base import SqlStore

CURSOR: Final = re.compile(r"([0-9]{1,19})(?::([0-9]{1,9}))?")


@dataclass(frozen=True)
class LogCursor:
    """Where a read resumes: after the append at log `position`, or after its first `read`
    lines. Written `position` or `position:read`."""

    position: int
    read: int | None = None

    @classmethod
    def parse(cls, text: str) -> LogCursor:
        """ValueError unless `text` is a cursor."""
        found = CURSOR.fullmatch(text)
        if found is None or int(found.group(1)) >= 2**63:  # (a BIGINT)
            raise ValueError("a log position (at most 2^63-1), optionally ':' lines read")
        read = found.group(2)
        return cls(int(found.group(1)), None if read is None else int(read))

    def __str__(self) -> str:
        return str(self.position) if self.read is None else f"{self.position}:{self.read}"


@dataclass(frozen=True)
class LogLine:
    position: int  # of its append (the TaskLogged event) in the log
    time: datetime
    attempt: int
    actor: str
    line: str


@dataclass(frozen=True)
class LogPage:
    lines: list[LogLine]
    next: LogCursor | None  # the cursor after the last line; None when the page is not full


class TaskLogs:
    """Pages of a task's log lines, oldest first."""

    def __init__(self, store: SqlStore) -> None:
        self.store = store
        self.p = store.dialect.param

    def page(self, task_id: UUID, after: LogCursor | None, limit: int) -> LogPage:
        """Up to `limit` lines after `after` (None: from the first); TaskNotFound when there is
        no such task. Reads the lines of the appends the page needs only (each holds a line at
        least, so `limit + 1` rows' counts tell which)."""
        start, skip, since = 0, 0, ">="
        if after is not None:  # (the append at `position`: its unread lines, else the next)
            start, skip = after.position, after.read or 0
            since = ">=" if after.read is not None else ">"  # (no position + 1 past the BIGINT)
        key = {"t": self.store.dialect.dump("task_id", task_id), "s": start}
        where = f"task_id = {self.p('t')} AND position {since} {self.p('s')}"
        with self.store.cursor(write=False) as cur:
            if cur.one(f"SELECT id FROM tasks_v1 WHERE id = {self.p('t')}", key) is None:
                raise TaskNotFound
            counts = cur.all(
                f"SELECT position, line_count FROM {LOGS} WHERE {where} "
                f"ORDER BY position LIMIT {int(limit) + 1}",
                key,
            )
            last = _last_needed(counts, start, skip, limit)
            if last is None:
                return LogPage([], None)
            rows = cur.all(
                f"SELECT position, time, attempt, actor, lines FROM {LOGS} "
                f"WHERE {where} AND position <= {self.p('l')} ORDER BY position",
                {**key, "l": last},
            )
        return _page(rows, start, skip, limit)


def _last_needed(counts: list[dict[str, Any]], start: int, skip: int, limit: int) -> int | None:
    """The position of the last append a page of `limit` lines reads (None: no line)."""
    wanted, last = limit, None
    for row in counts:
        lines = row["line_count"] - (skip if row["position"] == start else 0)
        if lines <= 0:
            continue
        wanted, last = wanted - lines, row["position"]
        if wanted <= 0:
            break
    return last


def _page(rows: list[dict[str, Any]], start: int, skip: int, limit: int) -> LogPage:
    out: list[LogLine] = []
    cursor = None
    for row in rows:
        lines: list[str] = row["lines"]
        first = skip if row["position"] == start else 0
        for i in range(first, min(len(lines), first + limit - len(out))):
            out.append(
                LogLine(row["position"], row["time"], row["attempt"], row["actor"], lines[i])
            )
            cursor = LogCursor(row["position"], None if i + 1 == len(lines) else i + 1)
        if len(out) == limit:
            break
    return LogPage(out, cursor if len(out) == limit else None)
