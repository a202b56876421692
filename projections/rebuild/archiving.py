"""An archive run's transaction: ended jobs' events leave the log, their archive records enter
it, and the catch-up projections' seeds move, when they must, to where the log then starts to
matter.

The caller wrote and synced each job's archive file first. Here, in one write transaction under
the writer lock: each job's events are checked to be the ones its file holds (a rerun since, or
an archive by another run, and the job is left alone) and removed, and one `JobsArchived`
record of the jobs removed is appended (its inline projection removes their read-model rows).
The batch's events are found in one read of the history index and removed by their positions,
on PostgreSQL in one statement: no round trip per job while every writer waits.
A seed (seeds.py) holds what every event before its position contributed, and every catch-up
projection has folded those events; so jobs whose events all lie before the seeds' position
leave the log as they are. Only when a job's last event is at or after it is every catch-up
projection first brought to the log's head (so each has folded the events about to go) and the
seeds copied again, of the head: with jobs archived a retention period after they end, about
once a period, not once a batch. A
crash before the commit leaves every job fully live (its file is written again by the next run);
after it, fully archived.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from uuid import UUID

from jobnik.domain.archives import ArchiveBatch, ArchiveFile
from jobnik.domain.principals import Principal
from jobnik.projections.catchup.registry import CATCH_UP
from jobnik.projections.rebuild import seeds
from jobnik.projections.rebuild.verify import catch_up_in, in_lock_order
from jobnik.projections.store.base import SqlStore
from jobnik.projections.store.cursor import Cursor
from jobnik.projections.store.eventlog import delete_positions


def positions(cur: Cursor, job_ids: Sequence[UUID]) -> dict[UUID, list[int]]:
    """The log positions of the jobs' events, by job (a job with none is left out), read from
    the history index in one statement."""
    d = cur.dialect
    condition, params = d.one_of("job_id", "j", [d.dump("job_id", j) for j in job_ids])
    found: dict[UUID, list[int]] = {}
    for row in cur.raw_all(f"SELECT job_id, position FROM job_events_v1 WHERE {condition}", params):
        job_id = row["job_id"] if isinstance(row["job_id"], UUID) else UUID(row["job_id"])
        found.setdefault(job_id, []).append(int(row["position"]))
    return found


def commit(
    store: SqlStore, written: Sequence[ArchiveFile], now: datetime, actor: Principal
) -> list[UUID]:
    """Archive the jobs of `written` whose events are still exactly those of their file, in one
    transaction (see the module); the ids of the jobs archived."""
    with store.session(write=True) as s:
        s.lock()
        cur = s.cur
        seeded = seeds.positions(cur)
        at = min(seeded.get(p.name, 0) for p in CATCH_UP)  # (a projection never seeded: 0)
        reseed = any(w.last_position >= at for w in written)
        head = store.log_head(cur)
        if reseed:
            for projection in in_lock_order(CATCH_UP):
                catch_up_in(store, cur, projection, head)
        found = positions(cur, [w.job_id for w in written])
        done = [
            w for w in written if _extent(found.get(w.job_id, [])) == (w.events, w.last_position)
        ]
        # The log's head event goes after the record is appended, so that the record's position
        # lies past it: SQLite gives a new row the largest rowid plus one, and would hand a
        # removed head's position out again, behind every reader of the log.
        last = head if any(w.last_position == head for w in done) else None
        p = cur.dialect.param
        delete_positions(
            cur,
            store.events_table,
            store.position_column,
            [n for w in done for n in found[w.job_id] if n != last],
        )
        if done:
            s.save(ArchiveBatch.record(done, now=now, actor=actor))
        if last is not None:
            cur.execute(
                f"DELETE FROM {store.events_table} WHERE {store.position_column} = {p('last')}",
                {"last": last},
            )
        if done and reseed:
            seeds.refresh(cur, CATCH_UP, head)
    return [w.job_id for w in done]


def _extent(found: list[int]) -> tuple[int, int]:
    """How many events a job has in the log, and the position of its last (0 when none)."""
    return len(found), max(found, default=0)
