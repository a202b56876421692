"""Statuses, priorities and the transition tables of jobs, stages and tasks, as data."""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Final


class JobStatus(StrEnum):
    CREATED = "CREATED"
    PENDING = "PENDING"
    IN_PROGRESS = "IN_PROGRESS"
    PAUSED = "PAUSED"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    ABORTED = "ABORTED"


class StageStatus(StrEnum):
    CREATED = "CREATED"
    PENDING = "PENDING"
    IN_PROGRESS = "IN_PROGRESS"
    WAITING = "WAITING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    ABORTED = "ABORTED"


class TaskStatus(StrEnum):
    CREATED = "CREATED"
    PENDING = "PENDING"
    IN_PROGRESS = "IN_PROGRESS"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    RETRIED = "RETRIED"
    ABORTED = "ABORTED"
    DELEGATED = "DELEGATED"  # jobnik: waiting for its child jobs (delegation), then re-queued


class JobMode(StrEnum):
    """Job modes. runOnce (Jobnik's semantics): the job completes when its stages
    have; standard: it stays open for new stages until finished (POST /v1/jobs/{id}/finish)."""

    RUN_ONCE = "runOnce"
    STANDARD = "standard"


class Priority(StrEnum):
    VERY_HIGH = "VERY_HIGH"
    HIGH = "HIGH"
    MEDIUM = "MEDIUM"
    LOW = "LOW"
    VERY_LOW = "VERY_LOW"

    @property
    def rank(self) -> int:
        """0 for VERY_HIGH … 4 for VERY_LOW: the dequeue order, lowest first."""
        return PRIORITY_RANK[self]


PRIORITY_RANK: Final[Mapping[Priority, int]] = {p: i for i, p in enumerate(Priority)}

J, S, T = JobStatus, StageStatus, TaskStatus

JOB_TRANSITIONS: Final[Mapping[JobStatus, frozenset[JobStatus]]] = {
    J.CREATED: frozenset({J.PENDING, J.PAUSED, J.ABORTED}),
    # PENDING → COMPLETED: a finished job with no work left (finish).
    J.PENDING: frozenset({J.IN_PROGRESS, J.PAUSED, J.COMPLETED, J.ABORTED}),
    # COMPLETED/FAILED from PAUSED: a paused job still completes.
    J.IN_PROGRESS: frozenset({J.PAUSED, J.COMPLETED, J.FAILED, J.ABORTED}),
    J.PAUSED: frozenset({J.PENDING, J.IN_PROGRESS, J.COMPLETED, J.FAILED, J.ABORTED}),
    J.COMPLETED: frozenset(),
    J.FAILED: frozenset(),
    J.ABORTED: frozenset(),
}

STAGE_TRANSITIONS: Final[Mapping[StageStatus, frozenset[StageStatus]]] = {
    S.CREATED: frozenset({S.PENDING, S.WAITING, S.ABORTED}),
    S.PENDING: frozenset({S.IN_PROGRESS, S.WAITING, S.ABORTED}),
    S.IN_PROGRESS: frozenset({S.WAITING, S.COMPLETED, S.FAILED, S.ABORTED}),
    S.WAITING: frozenset({S.PENDING, S.ABORTED}),
    S.COMPLETED: frozenset(),
    S.FAILED: frozenset(),
    S.ABORTED: frozenset(),
}

TASK_TRANSITIONS: Final[Mapping[TaskStatus, frozenset[TaskStatus]]] = {
    T.CREATED: frozenset({T.PENDING, T.ABORTED}),
    T.PENDING: frozenset({T.IN_PROGRESS, T.ABORTED}),
    # IN_PROGRESS → PENDING: a worker hands an unfinished task back (jobnik's addition)
    # IN_PROGRESS → DELEGATED: the handler created child jobs and waits for them (delegation)
    T.IN_PROGRESS: frozenset({T.PENDING, T.COMPLETED, T.FAILED, T.RETRIED, T.ABORTED, T.DELEGATED}),
    T.RETRIED: frozenset({T.IN_PROGRESS, T.ABORTED}),
    # DELEGATED → PENDING: every child job ended; the task is re-dispatched
    T.DELEGATED: frozenset({T.PENDING, T.ABORTED}),
    T.COMPLETED: frozenset(),
    T.FAILED: frozenset(),
    T.ABORTED: frozenset(),
}

JOB_FINAL: Final = frozenset({J.COMPLETED, J.FAILED, J.ABORTED})
STAGE_FINAL: Final = frozenset({S.COMPLETED, S.FAILED, S.ABORTED})
TASK_FINAL: Final = frozenset({T.COMPLETED, T.FAILED, T.ABORTED})

# A task can be dequeued only while its job and its stage are in one of these: the rule the
# queue read model keeps (projections/inline/queue.py).
JOB_DEQUEUEABLE: Final = frozenset({J.PENDING, J.IN_PROGRESS})
STAGE_DEQUEUEABLE: Final = frozenset({S.PENDING, S.IN_PROGRESS})
TASK_QUEUED: Final = frozenset({T.PENDING, T.RETRIED})
# Tasks a job's abort takes with it at once (IN_PROGRESS ones end with their worker's report).
TASK_ABORTABLE: Final = frozenset({T.PENDING, T.RETRIED, T.DELEGATED})

# A dequeue's lease when the client names none, for clients that never heartbeat.
DEFAULT_LEASE_SECONDS: Final = 30 * 60
MAX_LEASE_SECONDS: Final = 7 * 24 * 3600  # the longest a dequeue (or the server's default) gives
DEFAULT_MAX_BATCH: Final = 100  # tasks one batched dequeue or report takes at most
# Child jobs one task may create (GET /v1/tasks/{taskId}/children lists them all).
DEFAULT_MAX_CHILD_JOBS: Final = 1_000
# Why a task failed or was retried: the run statistics count them apart.
# (expired: still queued when its schedule-to-start limit ran out; never dequeued)
ERROR, TIMEOUT, FATAL, EXPIRED = "error", "timeout", "fatal", "expired"
# Why a job or stage failed without a failed task: its deadline passed. (One whose task
# expired fails with that task's cause, `EXPIRED`.)
DEADLINE: Final = "deadline"
# Reruns: the only way out of a final status (the tables above keep final statuses absorbing).
# An operator reruns a FAILED or ABORTED job, or a FAILED or ABORTED task (alone or with its
# stage); a job rerun also runs the tasks of the COMPLETED stages it reopens again.
JOB_RERUNNABLE: Final = frozenset({J.FAILED, J.ABORTED})
TASK_RERUNNABLE: Final = frozenset({T.FAILED, T.ABORTED})
