"""Reads of the catch-up projections, with a read-your-writes wait.

Every write response carries the log position it reached (`X-Jobnik-Position`). A read given that
position as `min_position` waits until the projection's tracking position has reached it, for at
most `wait_seconds` (JOBNIK_MIN_POSITION_WAIT, default 5), then answers with what the projection
has, never with an error for being behind: the answer says which tracking position it reflects
(`X-Jobnik-Projection-Position`), so a client that must have its write sees whether it has it
(served ≥ min_position) and can ask again. Rows and position are read in one snapshot.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar
from uuid import UUID

from jobnik.domain.errors import ArchiveUnreachable, JobNotFound
from jobnik.projections.catchup import last_status, run_stats, tracking
from jobnik.projections.catchup.runner import wait_for
from jobnik.projections.queries.archives import location_in
from jobnik.projections.store.base import SqlStore
from jobnik.projections.store.cursor import Cursor

T = TypeVar("T")
DEFAULT_WAIT = 5.0


class CatchUpViews:
    """Queries over lastStatus and run statistics; each one a short snapshot read."""

    def __init__(
        self,
        store: SqlStore,
        wait_seconds: float = DEFAULT_WAIT,
        on_served: Callable[[int], None] = lambda _: None,
    ) -> None:
        self.store = store
        self.wait_seconds = wait_seconds
        self.on_served = on_served  # told the tracking position each read answered from

    def _read(self, name: str, min_position: int | None, query: Callable[[Cursor], T]) -> T:
        if min_position:
            wait_for(self.store, name, min_position, self.wait_seconds)
        with self.store.cursor(write=False, snapshot=True) as cur:  # rows and position at once
            entry = tracking.get(cur, name)
            value = query(cur)
        self.on_served(entry.position if entry else 0)
        return value

    def job_definition(
        self, name: str, min_position: int | None = None
    ) -> last_status.JobDefinition:
        """lastStatus and counts of the jobs named `name`; JobNotFound when there is none."""
        found = self._read("last_status", min_position, lambda cur: last_status.read(cur, name))
        if found is None:
            raise JobNotFound(f"no job named {name!r}")
        return found

    def job_statistics(
        self, job_id: UUID, min_position: int | None = None
    ) -> run_stats.JobStatistics:
        """The job's run statistics (also after it was deleted); JobNotFound when unknown,
        ArchiveUnreachable (410 ARCHIVED) once it was archived: its rows left with its events,
        its history is its archive's."""
        found = self._read("run_stats", min_position, lambda cur: _statistics(cur, job_id))
        if isinstance(found, str):
            raise ArchiveUnreachable(
                f"job {job_id} was archived to {found}: its run statistics left the live "
                f"database with it; its history is GET /v1/jobs/{job_id}/history"
            )
        if found is None:
            raise JobNotFound
        return found


def _statistics(cur: Cursor, job_id: UUID) -> run_stats.JobStatistics | str | None:
    """The job's run statistics; its archive's location once it is archived (the archive
    record is inline: the answer does not wait for the projection to remove the rows)."""
    archived = location_in(cur, job_id)
    return archived if archived is not None else run_stats.read(cur, job_id)
