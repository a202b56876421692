"""Reading the event log: a job's history (through the history index) and the global feed."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final
from uuid import UUID

from eventsourcing.utils import get_topic

from jobnik.domain.errors import JobNotFound
from jobnik.domain.jobs import Job
from jobnik.projections.inline.project import PROJECT
from jobnik.projections.store.base import SqlStore
from jobnik.projections.store.cursor import Cursor
from jobnik.projections.store.eventlog import COLUMNS, stored_event

# Fields every event has; the rest is its payload (but for a token's secret hash, never shown).
STANDARD: Final = frozenset(
    {"originator_id", "originator_version", "timestamp", "actor", "actor_role", "reason"}
    | {"trace_id"}
    | {"originator_topic", "secret_hash"}
)
TOPICS: Final[Mapping[str, str]] = {cls.__name__: get_topic(cls) for cls in PROJECT}
TERMINAL: Final = frozenset({Job.JobCompleted, Job.JobFailed, Job.JobAborted})
DEFAULT_PAGE_BYTES: Final = 1024 * 1024


@dataclass(frozen=True)
class Entry:
    """One event as the audit shows it."""

    position: int
    type: str
    entity: str
    entity_id: UUID
    version: int
    time: datetime
    actor: str
    reason: str | None
    payload: dict[str, Any] = field(default_factory=dict)
    actor_role: str | None = None  # the token's role; None for the built-in actors
    trace_id: str | None = None  # the trace of the request that caused it
    event: Any = None

    @property
    def terminal(self) -> bool:
        """A job's terminal event (COMPLETED, FAILED, ABORTED): its stream ends here."""
        return type(self.event) in TERMINAL


@dataclass(frozen=True)
class Page:
    items: list[Entry]
    next: int | None  # pass as `after` for the next page; None at the end (for now)


# A page's events: at most `limit` of them, and only those that start within `max_bytes` of
# stored events (so at least one, however large). The positions and sizes are chosen first (the
# sizes are read from the rows' headers, not their contents), then only the chosen events are
# read whole: no more than the bound leaves the database, or SQLite's memory. `upto` is the
# stored size of the page's events up to and with each one.
_BOUNDED: Final = (
    "SELECT {columns}, k.upto FROM {events} e JOIN (SELECT p, upto FROM (SELECT p, size, "
    "SUM(size) OVER (ORDER BY p ROWS UNBOUNDED PRECEDING) AS upto FROM (SELECT {order} AS p, "
    "LENGTH(e.state) AS size FROM {source} WHERE {where} ORDER BY {order} LIMIT {limit}) l) w "
    "WHERE upto - size < {max_bytes}) k ON e.{position} = k.p ORDER BY e.{position}"
)


class Audit:
    """Events as entries, in log order; cursor = the last position seen. A page holds at most
    `limit` events and, but for its first, `max_bytes` of stored events."""

    def __init__(self, store: SqlStore, max_bytes: int = DEFAULT_PAGE_BYTES) -> None:
        self.store, self.max_bytes = store, max_bytes
        self.p = store.dialect.param
        self.events = store.events_table
        self.position = store.position_column

    def _entries(self, rows: Iterable[Mapping[str, Any]]) -> list[Entry]:
        out = []
        for r in rows:
            stored = stored_event(r)
            entity_id = UUID(str(stored.originator_id))
            event: Any = self.store.decode(stored)
            qualname = r["topic"].split(":", 1)[1]
            out.append(
                Entry(
                    position=r["position"],
                    type=qualname.rsplit(".", 1)[-1],
                    entity=qualname.split(".", 1)[0].lower(),
                    entity_id=entity_id,
                    version=stored.originator_version,
                    time=event.timestamp,
                    actor=getattr(event, "actor", "system"),
                    reason=getattr(event, "reason", None),
                    payload={k: v for k, v in vars(event).items() if k not in STANDARD},
                    event=event,
                    actor_role=getattr(event, "actor_role", None),
                    trace_id=getattr(event, "trace_id", None),
                )
            )
        return out

    def _columns(self) -> str:
        return f"e.{self.position} AS position, {COLUMNS}"

    def _known(self, cur: Cursor, job_id: UUID) -> None:
        row = cur.one(
            f"SELECT job_id FROM entity_jobs_v1 WHERE entity_id = {self.p('j')}",
            {"j": self.store.dialect.dump("job_id", job_id)},
        )
        if row is None:
            raise JobNotFound

    def job_history(
        self, job_id: UUID, after: int = 0, limit: int = 100, max_bytes: int | None = None
    ) -> Page:
        """Events of the job, its stages and tasks after `after`; also once the job is deleted.
        (`max_bytes`: a smaller bound in bytes than the audit's, for this page.)"""
        with self.store.cursor(write=False) as cur:
            self._known(cur, job_id)
            return self._page(
                cur,
                f"job_events_v1 j JOIN {self.events} e ON e.{self.position} = j.position",
                [f"j.job_id = {self.p('j')}", f"j.position > {self.p('a')}"],
                {"j": self.store.dialect.dump("job_id", job_id), "a": after},
                limit,
                max_bytes,
                order="j.position",
            )

    def terminal_position(self, job_id: UUID) -> int | None:
        """The log position of the job's latest terminal event while the job is ended; None
        while it runs (it never ended, or a rerun reopened it after its last end)."""
        ends = {f"t{i}": get_topic(cls) for i, cls in enumerate(TERMINAL)}
        reopened = get_topic(Job.JobReopened)
        with self.store.cursor(write=False) as cur:
            rows = cur.raw_all(
                "SELECT MAX(CASE WHEN e.topic = "
                f"{self.p('r')} THEN 0 ELSE j.position END) AS ended, "
                f"MAX(CASE WHEN e.topic = {self.p('r')} THEN j.position ELSE 0 END) AS reopened "
                f"FROM job_events_v1 j JOIN {self.events} e ON e.{self.position} = j.position "
                f"WHERE j.job_id = {self.p('j')} "
                f"AND e.topic IN ({', '.join(self.p(n) for n in [*ends, 'r'])})",
                {"j": self.store.dialect.dump("job_id", job_id), "r": reopened, **ends},
            )
        ended = rows[0]["ended"] if rows else None
        if not ended or int(ended) < int(rows[0]["reopened"] or 0):
            return None
        return int(ended)

    def feed(
        self,
        after: int = 0,
        limit: int = 100,
        types: Sequence[str] = (),
        job_id: UUID | None = None,
        max_bytes: int | None = None,
    ) -> Page:
        """The global log after `after`, optionally only some event types or one job (and
        `max_bytes` as for `job_history`)."""
        where = [f"e.{self.position} > {self.p('a')}"]
        params: dict[str, Any] = {"a": after}
        source = f"{self.events} e"
        if types:
            names = {f"t{i}": TOPICS[t] for i, t in enumerate(types)}
            where.append(f"e.topic IN ({', '.join(self.p(n) for n in names)})")
            params.update(names)
        if job_id is not None:
            source += f" JOIN job_events_v1 j ON j.position = e.{self.position}"
            where.append(f"j.job_id = {self.p('j')}")
            params["j"] = self.store.dialect.dump("job_id", job_id)
        with self.store.cursor(write=False) as cur:
            return self._page(cur, source, where, params, limit, max_bytes)

    def _page(
        self,
        cur: Cursor,
        source: str,
        where: list[str],
        params: dict[str, Any],
        limit: int,
        max_bytes: int | None = None,
        order: str | None = None,
    ) -> Page:
        """The events of `source` (the events table as `e`, maybe joined) matching `where`, in
        log order (`order`: the position column to sort by, the events' by default): a page
        (see the class)."""
        bound = self.max_bytes if max_bytes is None else min(max_bytes, self.max_bytes)
        sql = _BOUNDED.format(
            columns=self._columns(),
            events=self.events,
            position=self.position,
            order=order or f"e.{self.position}",
            source=source,
            where=" AND ".join(where),
            limit=int(limit),
            max_bytes=int(bound),
        )
        rows = cur.raw_all(sql, params)
        items = self._entries(rows)
        full = len(items) == limit or (bool(rows) and int(rows[-1]["upto"]) >= bound)
        return Page(items, items[-1].position if full else None)

    def last_position(self) -> int:
        return self.store.head()
