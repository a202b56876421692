"""Which queued task can be dequeued: the rule as the queue read model keeps it.

The rule is the domain's (domain/statuses.py: JOB_DEQUEUEABLE, STAGE_DEQUEUEABLE); everything
that writes or reads the queue takes it from here. A task waits in the queue (`queue_v1`) from
its creation, a retry, a hand-back or its child jobs' end until a worker dequeues it or it ends.
It can be dequeued while its stage and its job are both open: PENDING or IN_PROGRESS (not
paused, waiting, or ended). The queue row keeps the two answers
(`stage_open`, `job_open`), set when the task is queued and changed by the events that move its
stage or job in or out of OPEN; a claim takes the first row with both, by job priority then
queue order (`seq`, the log position that queued it), among the rows whose not-before time
(`not_before`: a delayed task's, a retry's due time) is unset or has come.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

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
    not_before: Any = None,
) -> dict[str, Any]:
    """The queue row of task `task_id`, queued at log position `seq` (not dequeued before
    `not_before`), from its stage's and its job's rows."""
    return {
        "task_id": task_id,
        "job_id": stage["job_id"],
        "stage_id": stage["id"],
        "stage_type": stage["type"],
        "priority_rank": job["priority_rank"],
        "seq": seq,
        "stage_open": is_open(stage["status"]),
        "job_open": is_open(job["status"]),
        "not_before": not_before,
    }


# The next dequeueable tasks of a stage type (`%(v)s`) at `%(now)s`: two probes, each one index
# probe, merged by priority then queue order. Ready rows (no not-before time) come from
# queue_v1_next, in priority and queue order, as before delayed work existed; delayed rows
# whose time has come from queue_v1_due, earliest due first. A delayed row is never in the
# first index, so however many tasks wait for their time, the ready probe never walks past
# them, and the due probe stops at the first row not due yet. `{lock}` is PostgreSQL's
# FOR UPDATE SKIP LOCKED (each probe locks the rows it returns; the merge may leave one unused,
# locked until the claim's transaction ends), empty on SQLite.
_READY: Final = (
    "SELECT task_id, priority_rank, seq FROM queue_v1 WHERE stage_type = %(v)s AND stage_open "
    "AND job_open AND not_before IS NULL ORDER BY priority_rank, seq LIMIT {n}{lock}"
)
_DUE: Final = (
    "SELECT task_id, priority_rank, seq FROM queue_v1 WHERE stage_type = %(v)s AND stage_open "
    "AND job_open AND not_before IS NOT NULL AND not_before <= %(now)s "
    "ORDER BY not_before, seq LIMIT {n}{lock}"
)


def next_in_queue(n: str, lock: str = "") -> str:
    """The ids of the next `n` (a literal or a parameter) dequeueable tasks, in claim order."""
    ready, due = _READY.format(n=n, lock=lock), _DUE.format(n=n, lock=lock)
    return (
        f"SELECT c.task_id FROM (SELECT * FROM ({ready}) r UNION ALL SELECT * FROM ({due}) d) c "
        f"ORDER BY c.priority_rank, c.seq LIMIT {n}"
    )


LOCKED: Final = " FOR UPDATE SKIP LOCKED"
NEXT_IN_QUEUE: Final = next_in_queue("1")
# The next `%(n)s` of them, for a batched claim.
NEXT_BATCH_IN_QUEUE: Final = next_in_queue("%(n)s")
