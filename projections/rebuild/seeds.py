"""Seeds: where a rebuild of a catch-up projection starts once events have left the log.

An archive run removes ended jobs' events from the log. The catch-up projections span jobs (the
lastStatus and counts of a job name, the counters per stage type and event type, the run
statistics): their rows keep what the removed events contributed, and a replay of the log alone
could not give those rows again. So each archive run, in the transaction that removes the
events, first brings every catch-up projection to the log's head and then copies its tables as
they are into `<table>_seed`, recording the position the copy is of (`archive_seeds_v1`). A
rebuild or verify of a catch-up projection then starts from its seed's rows and replays only
the events after the seed's position, which are all still in the log: it ends with the rows the
projection had, archived jobs' contributions included. Without a seed (nothing was ever
archived) it starts from empty tables at position 0, as before.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import Any, Final
from uuid import UUID

from eventsourcing.utils import get_topic

from jobnik.domain.archives import ARCHIVED
from jobnik.projections.catchup.projection import CatchUpProjection, Sql
from jobnik.projections.store.base import SqlStore
from jobnik.projections.store.cursor import Cursor

SEEDS: Final = "archive_seeds_v1"


def seed_of(table: str) -> str:
    """The name of `table`'s seed copy."""
    return f"{table}_seed"


def positions(cur: Cursor) -> dict[str, int]:
    """The position each seeded catch-up projection's seed is of, by projection name."""
    return {r["projection"]: int(r["position"]) for r in cur.all(f"SELECT * FROM {SEEDS}")}


def refresh(cur: Cursor, projections: Sequence[CatchUpProjection], position: int) -> None:
    """Copy the tables of `projections` (each at log `position`) into their seeds, in `cur`'s
    transaction."""
    p = cur.dialect.param
    for projection in projections:
        for table in projection.tables:
            cur.execute(f"DROP TABLE IF EXISTS {seed_of(table)}")
            cur.execute(f"CREATE TABLE {seed_of(table)} AS SELECT * FROM {table}")
        cur.execute(f"DELETE FROM {SEEDS} WHERE projection = {p('n')}", {"n": projection.name})
        cur.execute(
            f"INSERT INTO {SEEDS} (projection, position) VALUES ({p('n')}, {p('p')})",
            {"n": projection.name, "p": position},
        )


def plant(
    cur: Cursor,
    projection: CatchUpProjection,
    rename: Callable[[str], str],
    replayed: Collection[UUID] = (),
) -> None:
    """Fill the empty shadows of `projection`'s tables (`rename`: SQL naming the live tables
    made to name them) with its seed, column by name: a seed copied before a new version added a
    column (with its default) fills the columns it has. `replayed`: the jobs whose archive
    records the replay after the seed reads (`archived_after`)."""
    for table in projection.tables:
        cols = ", ".join(cur.columns(seed_of(table)))
        cur.execute(f"INSERT INTO {rename(table)} ({cols}) SELECT {cols} FROM {seed_of(table)}")
    projection.forget_archived(cur, Sql(cur.dialect, rename), replayed)


def archived_after(store: SqlStore, position: int, page: int = 500) -> set[UUID]:
    """The jobs whose archive records lie after log `position`."""
    topics = [get_topic(cls) for cls in ARCHIVED]
    jobs: set[UUID] = set()
    while batch := store.notifications(position, page, topics=topics):
        records: list[Any] = [store.decode(n) for n in batch]  # (each of ARCHIVED)
        jobs.update(f.job_id for record in records for f in record.files)
        position = batch[-1].id
    return jobs
