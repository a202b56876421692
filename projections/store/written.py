"""What this process's write sessions last committed, by task (PostgreSQL).

A worker reports on the task it has just dequeued, usually through the same process: the rows
that report reads (the task, its stage and job, the stage's summary counts) are the ones the
dequeue wrote, or a later command here. A write session that finds its task here starts from
these snapshots instead of reading the rows again, which saves the command its first round
trip: its reads, checks and writes then travel as one string.

Nothing here is trusted. The session records each snapshot's version as read before the writer
lock, and under the lock checks them, as it checks rows it read itself: a row that changed
meanwhile (another process's command, a sweeper) fails the command with ConcurrencyConflict and
it runs again, reading the rows. The summary counts only feed the stage-completion prediction,
which the session checks at commit either way. A task's entry is taken when used, so a run
again never starts from it; each map is bounded (entries of tasks that are never reported, say
after a worker died, go oldest first).

Snapshots hold the aggregates' state dicts: restored aggregates replace attributes, never
mutate the values (as with the stage and job rows of `ParentRows`).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final
from uuid import UUID

from jobnik.domain.base import Entity
from jobnik.domain.jobs import Job
from jobnik.domain.stages import Stage
from jobnik.domain.statuses import TaskStatus
from jobnik.domain.tasks import Task
from jobnik.projections.inline.tables import JOBS, STAGES, TASKS

TABLES: Final[dict[type[Entity], str]] = {Task: TASKS, Stage: STAGES, Job: JOBS}


@dataclass(frozen=True, slots=True)
class Snapshot:
    """An aggregate's state at `version`, as committed: its read-model row, in memory."""

    kind: type[Entity]
    id: UUID
    version: int
    created_on: datetime
    modified_on: datetime
    state: dict[str, Any]

    @classmethod
    def of(cls, aggregate: Entity) -> Snapshot:
        return cls(
            type(aggregate),
            aggregate.id,
            aggregate.version,
            aggregate.created_on,
            aggregate.modified_on,
            aggregate.state(),
        )

    @property
    def table(self) -> str:
        return TABLES[self.kind]

    def restore(self) -> Entity:
        return self.kind.restore(
            self.id, self.version, self.created_on, self.modified_on, dict(self.state)
        )


@dataclass(frozen=True, slots=True)
class Written:
    """A task as a command here last committed it, its stage and job as the latest command here
    committed them, and the stage summary's counts (`completed`, `total`) as the latest command
    here that read them left them, when one did."""

    task: Snapshot
    stage: Snapshot
    job: Snapshot
    summary: Mapping[str, int] | None


class RecentWrites:
    """Snapshots by id: of tasks leased to a worker (IN_PROGRESS, which a report, heartbeat or
    give-back comes for next), of stages and jobs, at most LIMIT of each; thread-safe (a
    process's sessions share it). A process holds as many leased tasks as its workers have in
    hand, far fewer than LIMIT; past it the oldest go (their reports read the rows), which
    also bounds the memory that large task payloads can hold here."""

    LIMIT: Final = 1024

    def __init__(self) -> None:
        self._tasks: dict[UUID, Snapshot] = {}
        self._parents: dict[UUID, Snapshot] = {}
        self._counts: dict[UUID, Mapping[str, int]] = {}
        self._lock = threading.Lock()

    def note(
        self, loaded: Mapping[UUID, Entity], summaries: Mapping[UUID, Mapping[str, int]]
    ) -> None:
        """After a commit: what the session held, and the summaries' counts it knows."""
        leased: list[Snapshot] = []
        parents: list[Snapshot] = []
        done: list[UUID] = []  # tasks no longer leased: no report comes for them
        used: list[UUID] = []  # stages and jobs held as they are: only their turn moves
        for key, a in loaded.items():
            if isinstance(a, Task):
                if a.status == TaskStatus.IN_PROGRESS:
                    leased.append(Snapshot.of(a))
                else:
                    done.append(key)
            elif isinstance(a, Stage | Job):
                if self._holds(key, a.version):
                    used.append(key)
                else:
                    parents.append(Snapshot.of(a))
        with self._lock:
            for key in done:
                self._tasks.pop(key, None)
            _keep_latest(self._tasks, leased)
            for key in used:  # (the latest used go last, as `_keep_latest` puts them)
                if key in self._parents:
                    self._parents[key] = self._parents.pop(key)
            _keep_latest(self._parents, parents)
            for key, counts in summaries.items():
                self._counts.pop(key, None)
                self._counts[key] = counts
            for held in (self._tasks, self._parents, self._counts):
                while len(held) > self.LIMIT:
                    del held[next(iter(held))]

    def _holds(self, key: UUID, version: int) -> bool:
        """Whether the snapshot held of `key` is at `version` already (most commands leave their
        stage and job as they found them: no copy of their state to make)."""
        held = self._parents.get(key)
        return held is not None and held.version == version

    def take(self, task_id: UUID) -> Written | None:
        """The task's entry, removed (a session uses it once); None unless its stage and job
        are held too (else reading all three at once costs less)."""
        with self._lock:
            task = self._tasks.pop(task_id, None)
            if task is None:
                return None
            stage_id, job_id = task.state["stage_id"], task.state["job_id"]
            stage, job = self._parents.get(stage_id), self._parents.get(job_id)
            if stage is None or job is None:
                return None
            return Written(task, stage, job, self._counts.get(stage_id))

    def __len__(self) -> int:
        return len(self._tasks)


def _keep_latest(held: dict[UUID, Snapshot], snapshots: Iterable[Snapshot]) -> None:
    """Hold each snapshot, newest last, unless a later version is held (a slower commit)."""
    for snapshot in snapshots:
        was = held.pop(snapshot.id, None)
        held[snapshot.id] = snapshot if was is None or was.version <= snapshot.version else was
