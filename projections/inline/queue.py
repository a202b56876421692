"""Which queued task can be dequeued: the rule as the queue read model keeps it.

The rule is the domain's (domain/statuses.py: JOB_DEQUEUEABLE, STAGE_DEQUEUEABLE); everything
that writes or reads the queue takes it from here. A task waits in the queue (`queue_v1`) from
its creation, a retry, a hand-back or its child jobs' end until a worker dequeues it or it ends.
It can be dequeued while its stage and its job are both open: PENDING or IN_PROGRESS (not
paused, waiting, or ended). The queue row keeps the two answers
(`stage_open`, `job_open`), set when the task is queued and changed by the events that move its
stage or job in or out of OPEN; a claim takes the first row with both, by job priority then
queue order (`seq`, the log position that queued it).
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
    task_id: Any, stage: Mapping[str, Any], job: Mapping[str, Any], seq: int
) -> dict[str, Any]:
    """The queue row of task `task_id`, queued at log position `seq`, from its stage's and its
    job's rows."""
    return {
        "task_id": task_id,
        "job_id": stage["job_id"],
        "stage_id": stage["id"],
        "stage_type": stage["type"],
        "priority_rank": job["priority_rank"],
        "seq": seq,
        "stage_open": is_open(stage["status"]),
        "job_open": is_open(job["status"]),
    }


# The next dequeueable task of a stage type (`%(v)s`): priority, then queue order; one probe of
# the queue_v1_next index (WHERE stage_open AND job_open).
NEXT_IN_QUEUE: Final = (
    "SELECT task_id FROM queue_v1 WHERE stage_type = %(v)s AND stage_open AND job_open "
    "ORDER BY priority_rank, seq LIMIT 1"
)
# The next `%(n)s` of them, for a batched claim.
NEXT_BATCH_IN_QUEUE: Final = NEXT_IN_QUEUE.replace("LIMIT 1", "LIMIT %(n)s")
