"""PostgreSQL: the events of the log dealt to the parts of a parallel rebuild, by job.

Each event's job: a job's own events are the job's; a stage's and a task's are the job their
creation event names (`inline.history.KIND`: the rule the history index files events by). A
token, a schedule or a stage type's limits belong to no job: its events are routed as a job of
their own (its one row is written by them alone; a run's fire key is written by its job's
event). One statement reads the creation events' job ids from the log on the server (split
across its parallel workers: JSON parsing is most of the routing's time); the jobs are then dealt
to the parts largest first (by their number of stages and tasks, in a snake: 0, 1, 1, 0, ...),
so the parts get about equal work even when a log holds a few big jobs. The result is an unlogged
table of routes (originator id → part); each part reads its events through a join with it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Final

from eventsourcing.utils import get_topic

from jobnik.domain.errors import DatabaseError
from jobnik.domain.limits import StageTypeLimits
from jobnik.domain.schedules import Schedule
from jobnik.domain.tokens import Token
from jobnik.projections.inline.history import KIND
from jobnik.projections.store.base import SqlStore
from jobnik.projections.store.cursor import Cursor
from jobnik.projections.store.eventlog import job_in_state

log = logging.getLogger(__name__)

ROUTES: Final = "jobnik_rebuild_routes"
_JOBS: Final = "jobnik_rebuild_jobs"  # (originator id, job): the routing's first step


def _job_hex(job: str, events: str) -> str:
    """SQL: the job of a creation event of `events`, as 32 hex digits (a token, a schedule or
    a limit is its own)."""
    return (
        f"CASE WHEN {events}.topic IN (%(job_topic)s, %(token_topic)s, %(schedule_topic)s, "
        "%(limit_topic)s) "
        f"THEN replace({events}.originator_id::text, '-', '') "
        f"ELSE {job_in_state(job, events)} END"
    )


@contextmanager
def routes(store: SqlStore, parts: int, head: int) -> Iterator[bool]:
    """The routes table for the log up to `head` split in `parts`; True when every event has a
    route (else the parts must not run). Dropped afterwards."""
    creations = {get_topic(cls): kind for cls, kind in KIND.items()}
    job_topic = next(t for t, kind in creations.items() if kind == "job")
    token_topic = get_topic(Token.TokenIssued)
    schedule_topic = get_topic(Schedule.ScheduleCreated)
    creations[token_topic], creations[schedule_topic] = "token", "schedule"
    limit_topic = get_topic(StageTypeLimits.LimitsCreated)
    creations[limit_topic] = "limit"
    params: dict[str, Any] = {
        "head": head,
        "parts": parts,
        "job_topic": job_topic,
        "token_topic": token_topic,
        "schedule_topic": schedule_topic,
        "limit_topic": limit_topic,
    }
    params.update({f"t{i}": t for i, t in enumerate(creations)})
    topics = ", ".join(f"%(t{i})s" for i in range(len(creations)))
    try:
        with store.cursor(write=True, lock=False) as cur:
            cur.execute(f"DROP TABLE IF EXISTS {ROUTES}, {_JOBS}")
            # (the planner does not know the JSON's cost: without these it scans alone)
            cur.execute("SET LOCAL parallel_setup_cost = 0")
            cur.execute("SET LOCAL parallel_tuple_cost = 0")
            cur.execute(
                f"CREATE UNLOGGED TABLE {_JOBS} AS SELECT e.originator_id, "
                f"{_job_hex('job_id', 'e')} AS job FROM {store.events_table} e "
                f"WHERE e.notification_id <= %(head)s AND e.topic IN ({topics})",
                params,
            )
            cur.execute(
                f"CREATE UNLOGGED TABLE {ROUTES} AS SELECT c.originator_id, j.part "
                f"FROM {_JOBS} c JOIN (SELECT job, CASE WHEN rank / %(parts)s %% 2 = 0 "
                "THEN rank %% %(parts)s ELSE %(parts)s - 1 - rank %% %(parts)s END AS part "
                "FROM (SELECT job, row_number() OVER (ORDER BY count(*) DESC, job) - 1 AS rank "
                f"FROM {_JOBS} WHERE job IS NOT NULL GROUP BY job) ranked) j USING (job)",
                params,
            )
            cur.execute(f"DROP TABLE {_JOBS}")
            cur.execute(f"ALTER TABLE {ROUTES} ADD PRIMARY KEY (originator_id)")
            cur.execute(f"ANALYZE {ROUTES}")
            complete = _complete(cur, store, head)
        if not complete:
            log.warning("rebuild: some events have no job route; replaying in one process")
    except DatabaseError as e:  # e.g. a stored form the statement cannot read
        log.warning("rebuild: could not route events to jobs (%s); replaying in one process", e)
        complete = False
    try:
        yield complete
    finally:
        with store.cursor(write=True, lock=False) as cur:
            cur.execute(f"DROP TABLE IF EXISTS {ROUTES}, {_JOBS}")


def _complete(cur: Cursor, store: SqlStore, head: int) -> bool:
    row = cur.one(
        f"SELECT EXISTS (SELECT 1 FROM {store.events_table} e WHERE e.notification_id <= "
        f"%(head)s AND NOT EXISTS (SELECT 1 FROM {ROUTES} r "
        "WHERE r.originator_id = e.originator_id)) AS missing",
        {"head": head},
    )
    return row is not None and not row["missing"]


def join(events: str, part: int) -> tuple[str, dict[str, Any]]:
    """The JOIN that keeps the events (alias `events`) of `part`."""
    return (
        f" JOIN {ROUTES} r ON r.originator_id = {events}.originator_id AND r.part = %(part)s",
        {"part": part},
    )
