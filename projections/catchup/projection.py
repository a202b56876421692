"""What a catch-up projection is: its tables, the events it reads, how it applies a batch."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager
from functools import cache, cached_property
from typing import Any, ClassVar, Final
from uuid import UUID

from eventsourcing.utils import get_topic

from jobnik.domain.archives import ARCHIVED
from jobnik.projections.inline.tables import ARCHIVES
from jobnik.projections.store.cursor import Cursor
from jobnik.projections.store.dialect import Dialect
from jobnik.projections.store.names import identity

Batch = Sequence[tuple[int, Any]]  # (log position, decoded domain event), in log order
# A rebuild pass's writer of one projection: (cursor, batch, what `prepare` made of it); an
# empty batch ends the pass (`CatchUpProjection.replay`).
Replay = Callable[[Cursor, Batch, Any], None]
REPLAYED: Final = "jobnik_archives_replayed"  # (a seed's planting: jobs its replay archives)


class Sql:
    """SQL text for one dialect (its parameters' style: `Dialect.params`), table names mapped by
    `rename` (identity for the live tables, shadow names during a rebuild)."""

    def __init__(self, dialect: Dialect, rename: Callable[[str], str] = identity) -> None:
        self.dialect = dialect
        self.rename = rename
        self._cached = cache(self._text)

    def _text(self, template: str) -> str:
        text = self.rename(template)
        return self.dialect.params(text)

    def __call__(self, template: str) -> str:
        return self._cached(template)


class CatchUpProjection(ABC):
    """A derived view: name, version, tables, the events it reads, and how it applies them."""

    name: ClassVar[str]
    version: ClassVar[int]
    tables: ClassVar[tuple[str, ...]]
    keys: ClassVar[dict[str, tuple[str, ...]]]  # primary key of each table (verify pairs rows)
    events: ClassVar[tuple[type, ...]]  # the event classes it reads
    ddl: ClassVar[str]  # CREATE statements with {uuid}/{json}/{time}/{bool} placeholders
    # Every row belongs to one job and only its events write it, or is a total over jobs that
    # `replay` adds up in memory and writes once at the end of a pass: a rebuild may replay
    # the events of different jobs in different processes (rebuild/parallel.py).
    per_job: ClassVar[bool] = False
    # Indexes a rebuild may build after the bulk of its replay (no replay statement uses them).
    late_indexes: ClassVar[frozenset[str]] = frozenset()
    # The rows that leave with an archived job, removed in this order on its archive record:
    # (table, condition), `{jobs}` in the condition standing for SQL that lists job ids.
    leave_with_job: ClassVar[tuple[tuple[str, str], ...]] = ()

    @cached_property
    def topics(self) -> tuple[str, ...]:
        return tuple(get_topic(cls) for cls in self.events)

    @cached_property
    def topic_set(self) -> frozenset[str]:
        return frozenset(self.topics)

    def create(self, dialect: Dialect) -> list[str]:
        """The statements that create the projection's (live) tables."""
        return [s.strip() for s in self.ddl.format(**dialect.types).split(";") if s.strip()]

    @abstractmethod
    def apply(self, cur: Cursor, batch: Batch, sql: Sql, prepared: Any = None) -> None:
        """Apply `batch` (its events in log order) to the tables `sql` names; `prepared`: what
        `prepare` made of the same batch beforehand, if anything."""

    def replay(self, sql: Sql) -> Replay:
        """How one rebuild pass writes its pages to the shadow tables `sql` names: `apply` each
        (`batch_by_batch`). A projection may keep rows in memory over the pass instead and write
        them when it ends (the empty batch)."""
        return batch_by_batch(self, sql)

    def removals(self, jobs: str) -> list[str]:
        """The statements removing the rows of the jobs `jobs` (SQL listing job ids) lists."""
        return [f"DELETE FROM {t} WHERE {w.format(jobs=jobs)}" for t, w in self.leave_with_job]

    def forget(self, cur: Cursor, sql: Sql, jobs: Collection[UUID]) -> None:
        """Remove from the tables `sql` names the rows of the archived `jobs`
        (`leave_with_job`); a projection calls it after the rest of the batch's writes."""
        if not jobs or not self.leave_with_job:
            return
        gone = [{"job_id": cur.dialect.dump("job_id", j)} for j in sorted(jobs, key=str)]
        for statement in self.removals("%(job_id)s"):
            cur.executemany(sql(statement), gone)

    def forget_archived(self, cur: Cursor, sql: Sql, replayed: Collection[UUID] = ()) -> None:
        """Remove from the tables `sql` names the rows of every job already archived (a seed
        copied by an older version may hold them), but those of the `replayed` jobs, whose
        archive records lie after the seed: the replay of each record removes its jobs' rows
        as the live projection did, which may read them first (activity)."""
        if not self.leave_with_job:
            return
        jobs = f"SELECT job_id FROM {ARCHIVES}"
        if replayed:
            cur.execute(f"CREATE TEMP TABLE {REPLAYED} (job_id {cur.dialect.types['uuid']})")
            cur.executemany(
                f"INSERT INTO {REPLAYED} (job_id) VALUES ({cur.dialect.param('j')})",
                [{"j": cur.dialect.dump("job_id", j)} for j in sorted(replayed, key=str)],
            )
            jobs += f" WHERE job_id NOT IN (SELECT job_id FROM {REPLAYED})"
        for statement in self.removals(jobs):
            cur.execute(sql(statement))
        if replayed:
            cur.execute(f"DROP TABLE {REPLAYED}")

    def prepare(self, batch: Batch) -> Any:
        """The pure part of `apply` (no database), which a rebuild runs on another thread;
        None: `apply` does it all."""
        return None


def archived_in(batch: Batch) -> set[UUID]:
    """The jobs an archive record in `batch` names."""
    return {f.job_id for _, e in batch if type(e) in ARCHIVED for f in e.files}


def batch_by_batch(projection: CatchUpProjection, sql: Sql) -> Replay:
    """Each batch applied as the catch-up runner applies it; nothing kept between them."""

    def apply(cur: Cursor, batch: Batch, prepared: Any) -> None:
        if batch:
            projection.apply(cur, batch, sql, prepared)

    return apply


Rows = list[dict[str, Any]]
Run = Callable[[str, Rows], None]  # (statement, its rows): `runner`


def runner(cur: Cursor, sql: Sql) -> Run:
    """A function running a statement once per row (none: nothing sent), its values dumped for
    `cur`'s dialect and its tables named by `sql`."""

    def run(statement: str, rows: Rows) -> None:
        if rows:
            cur.executemany(sql(statement), [cur.dialect.dump_row(r) for r in rows])

    return run


def select_in(
    cur: Cursor, sql: Sql, select: str, column: str, values: set[Any]
) -> list[dict[str, Any]]:
    """The rows of `select` whose `column` is one of `values`, 500 values a statement."""
    out: list[dict[str, Any]] = []
    ordered = sorted(values, key=str)
    for start in range(0, len(ordered), 500):
        part = ordered[start : start + 500]
        params = {f"v{i}": cur.dialect.dump(column, v) for i, v in enumerate(part)}
        marks = ", ".join(f"%({k})s" for k in params)
        out += cur.all(sql(f"{select} WHERE {column} IN ({marks})"), params)
    return out


@contextmanager
def pipelined(cur: Cursor) -> Iterator[None]:
    """Pipeline mode for a run of statements, where the driver has it (`Dialect.pipeline`): sent
    without waiting for each answer (a read, or the block's end, waits for them all). A
    projection batch is hundreds of small writes: this saves a round trip per statement."""
    # (A rebuild's deferred cursor, store/pagewriter.py, has no raw cursor: its thread waits.)
    if cur.raw is None:
        yield
        return
    with cur.dialect.pipeline(cur.raw):
        yield
