"""Which queued task can be dequeued: the rule as the queue read model keeps it.

The rule is the domain's (domain/statuses.py: JOB_DEQUEUEABLE, STAGE_DEQUEUEABLE); everything
that writes or reads the queue takes it from here. A task waits in the queue (`queue_v1`) from
its creation, a retry, a hand-back or its child jobs' end until a worker dequeues it or it ends.
It can be dequeued while its stage and its job are both open: PENDING or IN_PROGRESS (not
paused, waiting, or ended). The queue row keeps the two answers
(`stage_open`, `job_open`), set when the task is queued and changed by the events that move its
stage or job in or out of OPEN; a claim takes the first row with both, by job priority then
turn (`turn`: first in, first out or fair turns between jobs, domain/turns.py) then queue
order (`seq`, the log position that queued it), among the rows not held back by their concurrency
key's limit (`held`, inline/gates.py) whose not-before time
(`not_before`: a delayed task's, a retry's due time) is unset or has come and whose expiry
(`expires_at`, below) is unset or still ahead.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Final, Protocol, cast

from jobnik.domain.statuses import JOB_DEQUEUEABLE, STAGE_DEQUEUEABLE

OPEN: Final = frozenset(s.value for s in JOB_DEQUEUEABLE)
# (one set of strings serves both: the queue row's flags are worked out the same way)
assert frozenset(s.value for s in STAGE_DEQUEUEABLE) == OPEN
# The same, for SQL that works the flags out from the stage and job rows (`IN {OPEN_SQL}`).
OPEN_SQL: Final = "(" + ", ".join(f"'{s}'" for s in sorted(OPEN)) + ")"


def is_open(status: str) -> bool:
    """Whether the queued tasks of a job or stage in `status` can be dequeued."""
    return status in OPEN


def queue_row(
    task_id: Any,
    stage: Mapping[str, Any],
    job: Mapping[str, Any],
    seq: int,
    time: datetime,
    not_before: datetime | None = None,
    turn: int = 0,
) -> dict[str, Any]:
    """The queue row of task `task_id`, queued at log position `seq` at `time` (not dequeued
    before `not_before`) at `turn`, from its stage's and its job's rows."""
    row = {
        "task_id": task_id,
        "job_id": stage["job_id"],
        "stage_id": stage["id"],
        "stage_type": stage["type"],
        "priority_rank": job["priority_rank"],
        "turn": turn,
        "seq": seq,
        "stage_open": is_open(stage["status"]),
        "job_open": is_open(job["status"]),
        "not_before": not_before,
        "expire_seconds": stage.get("schedule_to_start_seconds"),
        "expires_at": None,
        "fairness_key": job.get("fairness_key"),
        "gate": None,  # (set, with `held`, by the SQL of inline/gates.py when its type has a
        "held": False,  # per-key limit: a function of the rows, worked out after the events)
    }
    row["expires_at"] = expiry(row, {}, time, restart=True)
    return row


# -- expiry: a stage's schedule-to-start limit ----------------------------------------------------
# A queued task of a stage with a limit (`expire_seconds`) may wait that long to be dequeued,
# counted from the latest of: when it was queued, when its not-before time comes, and when its
# stage and job last became open for dequeue (a task of a later stage starts counting when its
# stage is released; a paused job's tasks start again when it resumes). `expires_at` holds the
# result while the task can be dequeued, NULL otherwise (or without a limit): the claim skips a
# row past it, the sweeper fails it (cause "expired"). Worked out here, once, for the in-memory
# rows, and by `queue_change` in SQL: whole seconds added to a time, exact in both backends.


def expiry(
    row: Mapping[str, Any], values: Mapping[str, Any], time: datetime, *, restart: bool = False
) -> datetime | None:
    """The expiry of queue `row` once `values` are set on it at `time`: unchanged while it stays
    open (unless `restart`, or its not-before time changes), else counted from `time`."""
    new = {**row, **values}
    if not (new["stage_open"] and new["job_open"]) or new["expire_seconds"] is None:
        return None
    if not restart and "not_before" not in values and row["stage_open"] and row["job_open"]:
        return cast(datetime | None, row["expires_at"])
    start = max(time, new["not_before"] or time)
    return start + timedelta(seconds=new["expire_seconds"])


class TimeSql(Protocol):
    """A backend's SQL for times (store/dialect.py)."""

    def greatest(self, a: str, b: str) -> str:
        """The later of two times."""
        ...

    def later_by(self, time: str, seconds: str) -> str:
        """`time` plus a whole number of `seconds`."""
        ...


def enqueued_expiry(sql: TimeSql) -> str:
    """The expiry of a task queued open, in the enqueue statement (sql/queries.<backend>.sql:
    `v.time`, `v.not_before`, the stage row `s`), as `expiry` works it out."""
    start = sql.greatest("v.time", "COALESCE(v.not_before, v.time)")
    return sql.later_by(start, "s.schedule_to_start_seconds")


def queue_change(cols: Sequence[str], key: str, sql: TimeSql) -> str:
    """The SQL of a `QueueChange` setting `cols` on the rows whose `key` is `%(k_<key>)s`, at
    `%(t)s`, as `expiry` works it out (`%(name)s` parameters)."""
    new = {c: f"%(v_{c})s" if c in cols else c for c in ("stage_open", "job_open", "not_before")}
    keep = "FALSE" if "not_before" in cols else "stage_open AND job_open"
    start = sql.greatest("%(t)s", f"COALESCE({new['not_before']}, %(t)s)")
    sets = ", ".join(f"{c} = %(v_{c})s" for c in cols)
    return (
        f"UPDATE queue_v1 SET {sets}, expires_at = CASE "
        f"WHEN NOT ({new['stage_open']} AND {new['job_open']}) OR expire_seconds IS NULL THEN NULL "
        f"WHEN {keep} THEN expires_at ELSE {sql.later_by(start, 'expire_seconds')} END "
        f"WHERE {key} = %(k_{key})s"
    )


# The next dequeueable tasks of a stage type (`%(v)s`) at `%(now)s`: two probes, each one index
# probe, merged by priority, turn, then queue order. Ready rows (no not-before time) come from
# queue_v1_next, in that order, as before delayed work existed; delayed rows
# whose time has come from queue_v1_due, earliest due first. A delayed row is never in the
# first index, so however many tasks wait for their time, the ready probe never walks past
# them, and the due probe stops at the first row not due yet. `{lock}` is PostgreSQL's
# FOR UPDATE SKIP LOCKED (each probe locks the rows it returns; the merge may leave one unused,
# locked until the claim's transaction ends), empty on SQLite.
_READY: Final = (
    "SELECT task_id, priority_rank, turn, seq FROM queue_v1 WHERE stage_type = %(v)s "
    "AND stage_open AND job_open AND not_before IS NULL AND NOT held "
    "AND (expires_at IS NULL OR expires_at > %(now)s) "
    "ORDER BY priority_rank, turn, seq LIMIT {n}{lock}"
)
_DUE: Final = (
    "SELECT task_id, priority_rank, turn, seq FROM queue_v1 WHERE stage_type = %(v)s "
    "AND stage_open AND job_open AND not_before IS NOT NULL AND NOT held "
    "AND not_before <= %(now)s "
    "AND (expires_at IS NULL OR expires_at > %(now)s) ORDER BY not_before, seq LIMIT {n}{lock}"
)


def next_in_queue(n: str, lock: str = "") -> str:
    """The ids of the next `n` (a literal or a parameter) dequeueable tasks, in claim order."""
    ready, due = _READY.format(n=n, lock=lock), _DUE.format(n=n, lock=lock)
    return (
        f"SELECT c.task_id FROM (SELECT * FROM ({ready}) r UNION ALL SELECT * FROM ({due}) d) c "
        f"ORDER BY c.priority_rank, c.turn, c.seq LIMIT {n}"
    )


LOCKED: Final = " FOR UPDATE SKIP LOCKED"
NEXT_IN_QUEUE: Final = next_in_queue("1")
# The next `%(n)s` of them, for a batched claim.
NEXT_BATCH_IN_QUEUE: Final = next_in_queue("%(n)s")
