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


class Audit:
    """Events as entries, in log order; cursor = the last position seen."""

    def __init__(self, store: SqlStore) -> None:
        self.store = store
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

    def job_history(self, job_id: UUID, after: int = 0, limit: int = 100) -> Page:
        """Events of the job, its stages and tasks after `after`; also once the job is deleted."""
        with self.store.cursor(write=False) as cur:
            self._known(cur, job_id)
            rows = cur.raw_all(
                f"SELECT {self._columns()} FROM job_events_v1 j "
                f"JOIN {self.events} e ON e.{self.position} = j.position "
                f"WHERE j.job_id = {self.p('j')} AND j.position > {self.p('a')} "
                f"ORDER BY j.position LIMIT {int(limit)}",
                {"j": self.store.dialect.dump("job_id", job_id), "a": after},
            )
        items = self._entries(rows)
        return Page(items, items[-1].position if len(items) == limit else None)

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
    ) -> Page:
        """The global log after `after`, optionally only some event types or one job."""
        where = [f"e.{self.position} > {self.p('a')}"]
        params: dict[str, Any] = {"a": after}
        join = ""
        if types:
            names = {f"t{i}": TOPICS[t] for i, t in enumerate(types)}
            where.append(f"e.topic IN ({', '.join(self.p(n) for n in names)})")
            params.update(names)
        if job_id is not None:
            join = f" JOIN job_events_v1 j ON j.position = e.{self.position}"
            where.append(f"j.job_id = {self.p('j')}")
            params["j"] = self.store.dialect.dump("job_id", job_id)
        with self.store.cursor(write=False) as cur:
            rows = cur.raw_all(
                f"SELECT {self._columns()} FROM {self.events} e{join} WHERE "
                f"{' AND '.join(where)} ORDER BY e.{self.position} LIMIT {int(limit)}",
                params,
            )
        items = self._entries(rows)
        return Page(items, items[-1].position if len(items) == limit else None)

    def last_position(self) -> int:
        return self.store.head()
