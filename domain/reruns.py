"""Reruns: an operator runs what failed, or was aborted, again; every earlier event stays.

A rerun is the only command that takes a task, stage or job out of a final status. What it may do
keeps true three things that hold without reruns: a stage that has not ended holds no FAILED or
ABORTED task, a job that has not ended holds no FAILED or ABORTED stage, and a stage that has not
ended holds a running task only while it is IN_PROGRESS. Hence:

- a task rerun takes a FAILED or ABORTED task, the only such task of its stage;
- a stage rerun takes every FAILED and ABORTED task of the stage;
- both reopen the stage and its job, so the stage must be the job's current one: every stage
  before it (in the order stages run: the normal ones, then the completion ones) COMPLETED and
  none after it ended (an aborted job's later stages ended with it: rerun the job);
- a job rerun reopens the job from its first unfinished stage, or from an earlier stage named:
  that stage and every ended stage after it reopen. A reopened stage that had COMPLETED runs all
  its tasks again; any other reruns its FAILED and ABORTED tasks (COMPLETED ones keep their
  results).

Each rerun task gets a fresh attempt budget. Tasks still queued in a FAILED job go back to the
queue as they are, and tasks still running there finish their attempt, nothing cancelled it,
when the stage the job runs from holds them: that stage reopens IN_PROGRESS (it had started; a
completion stage too, in the job's completion phase), so their reports move it as before. A
stage that waits for its turn again (a job rerun from an earlier stage) runs nothing: the rerun
ends the attempts still running in it, as below. In an ABORTED job, a task still running holds
an attempt the abort cancelled (its heartbeat answers `cancelled`, its late report moves
nothing): a rerun that reopens its stage ends that attempt (TaskAborted) and queues the task
with the others, so it runs again under a new attempt and the old one's heartbeat, report or
hand-back is refused as stale. Such a task counts, for a task rerun, as one more ABORTED task of
its stage.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

from jobnik.domain.commands import command
from jobnik.domain.errors import (
    EarlierStageNotCompleted,
    JobNotRerunnable,
    LaterStageEnded,
    OtherTasksFailed,
    RerunSkipsStages,
    StageNotInJob,
    StageNotRerunnable,
    TaskNotRerunnable,
)
from jobnik.domain.jobs import Job
from jobnik.domain.ports import Session
from jobnik.domain.principals import Actor, Principal
from jobnik.domain.stages import Stage
from jobnik.domain.statuses import (
    JOB_RERUNNABLE,
    TASK_FINAL,
    TASK_RERUNNABLE,
    JobStatus,
    StageStatus,
    TaskStatus,
)
from jobnik.domain.tasks import Task
from jobnik.domain.turns import Turns
from jobnik.domain.work import WorkCommands


@dataclass(frozen=True)
class Rerun:
    """What a rerun did: the job (reopened), the stage it ran from (None: none reopened), the
    stages it reopened and how many tasks it put back in the queue."""

    job: Job
    from_stage_id: UUID | None
    stages: tuple[UUID, ...]
    tasks: int


def run_order(stages: Sequence[Stage]) -> list[Stage]:
    """A job's stages in the order they run: the normal ones by order, then the completion ones."""
    return sorted(stages, key=lambda st: (st.completion, st.order))


def _check_rerunnable(job: Job) -> None:
    if job.status not in JOB_RERUNNABLE:
        raise JobNotRerunnable(
            f"job {job.id} is {job.status}: only a FAILED or ABORTED job, its stages and its "
            "tasks are rerun"
        )


def _ended_in(job: Job) -> frozenset[str]:
    """The statuses of the tasks a rerun takes from a stage of `job` that did not complete:
    FAILED and ABORTED, and in an aborted job IN_PROGRESS too (attempts the abort cancelled)."""
    if job.status == JobStatus.ABORTED:
        return TASK_RERUNNABLE | {TaskStatus.IN_PROGRESS}
    return TASK_RERUNNABLE


def _ended_attempt(task: Task, aborted: bool) -> str:
    """Why a rerun ends the running attempt of `task` (of a job that was `aborted` or FAILED)."""
    if aborted:
        return f"the job's abort cancelled attempt {task.attempt}"
    return f"rerun: attempt {task.attempt} ended, its stage waits for its turn again"


class RerunCommands(WorkCommands):
    """The operator's reruns: the operator and the reason given are recorded on the events of
    the job, stages and tasks each reopens."""

    @command
    def rerun_task(
        self, task_id: UUID, *, by: Principal = Actor.API, reason: str | None = None
    ) -> Rerun:
        """A FAILED or ABORTED task back to the queue with a fresh attempt budget; its stage and
        job reopen."""
        now = self.clock()
        with self._write() as s:
            task = s.task(task_id)
            if task.status not in TASK_RERUNNABLE:
                raise TaskNotRerunnable(
                    f"task {task.id} is {task.status}: only a FAILED or ABORTED task is rerun"
                )
            job, stage = s.job(task.job_id), s.stage(task.stage_id)
            _check_rerunnable(job)
            summary = s.summary(stage.id)
            others = summary.failed + summary.aborted - 1
            if job.status == JobStatus.ABORTED:
                others += summary.in_progress  # attempts the abort cancelled
            if others:
                raise OtherTasksFailed(
                    f"{others} other task(s) of stage {stage.id} FAILED or were ABORTED: "
                    "rerun the stage"
                )
            return self._reopen_current(s, job, stage, [task], now, by, reason)

    @command
    def rerun_stage(
        self, stage_id: UUID, *, by: Principal = Actor.API, reason: str | None = None
    ) -> Rerun:
        """Every FAILED and ABORTED task of the stage back to the queue with a fresh attempt
        budget; the stage and its job reopen."""
        now = self.clock()
        with self._write() as s:
            stage = s.stage(stage_id)
            job = s.job(stage.job_id)
            _check_rerunnable(job)
            tasks = s.tasks_in(stage.id, _ended_in(job))
            if not tasks:
                raise StageNotRerunnable(
                    f"stage {stage.id} is {stage.status} and has no FAILED or ABORTED task"
                )
            return self._reopen_current(s, job, stage, tasks, now, by, reason)

    @command
    def rerun_job(
        self,
        job_id: UUID,
        from_stage_id: UUID | None = None,
        *,
        by: Principal = Actor.API,
        reason: str | None = None,
    ) -> Rerun:
        """The job runs again from its first unfinished stage, or from the earlier stage named."""
        now = self.clock()
        with self._write() as s:
            job = s.job(job_id)
            _check_rerunnable(job)
            order = run_order(s.stages_of(job.id))
            first = next(
                (i for i, st in enumerate(order) if st.status != StageStatus.COMPLETED), len(order)
            )
            at = first
            if from_stage_id is not None:
                at = next((i for i, st in enumerate(order) if st.id == from_stage_id), -1)
                if at < 0:
                    raise StageNotInJob(f"stage {from_stage_id} is not a stage of job {job.id}")
                if at > first:
                    raise RerunSkipsStages(
                        f"stage {from_stage_id} runs after stage {order[first].id}, the job's "
                        "first unfinished stage"
                    )
            tasks = []
            for st in order[at:]:
                if st.is_final:  # (a stage still waiting for its turn holds no ended task)
                    done = st.status == StageStatus.COMPLETED
                    tasks += s.tasks_in(st.id, TASK_FINAL if done else _ended_in(job))
            return self._reopen(s, job, order, at, tasks, now, by, reason)

    def _reopen_current(
        self,
        s: Session,
        job: Job,
        stage: Stage,
        tasks: list[Task],
        now: datetime,
        by: Principal,
        reason: str | None,
    ) -> Rerun:
        """Reopen `stage`, which must be the job's current stage, with `tasks` rerun."""
        order = run_order(s.stages_of(job.id))
        at = next(i for i, st in enumerate(order) if st.id == stage.id)
        if any(st.status != StageStatus.COMPLETED for st in order[:at]):
            raise EarlierStageNotCompleted(
                f"an earlier stage of job {job.id} has not completed: rerun the job"
            )
        if any(st.is_final for st in order[at + 1 :]):
            raise LaterStageEnded(f"later stages of job {job.id} ended with it: rerun the job")
        return self._reopen(s, job, order, at, tasks, now, by, reason)

    def _reopen(
        self,
        s: Session,
        job: Job,
        order: list[Stage],
        at: int,
        tasks: list[Task],
        now: datetime,
        by: Principal,
        reason: str | None,
    ) -> Rerun:
        """Reopen the job from `order[at]` (each stage before it COMPLETED): that stage runs
        (a completion stage only in the job's completion phase; else it waits for it), the
        ended stages after it wait for their turn, and `tasks` are rerun, with the tasks still
        running in a stage that waits (their attempt ends: the stage runs them again in its
        turn). Saved job and stages first: the tasks' queue rows read their eligibility from
        them. (No `Session.hold_queue`: an ended job's queue rows are closed, FAILED, or gone,
        ABORTED, so no dequeue under way holds one.)"""
        start = order[at] if at < len(order) else None
        completing = job.completing and all(st.completion for st in order[at:])
        aborted = job.status == JobStatus.ABORTED
        job.reopen(start.id if start else None, at, completing, now, by, reason)
        reopened = [st for st in order[at:] if st.is_final]
        for st in reopened:
            st.reopen(st is start and (completing or not st.completion), now, by, reason)
        rerun = {t.id for t in tasks}
        waiting = [st for st in reopened if st.status == StageStatus.CREATED]
        running = [t for st in waiting for t in s.tasks_in(st.id, {TaskStatus.IN_PROGRESS})]
        tasks = tasks + [t for t in running if t.id not in rerun]
        turns = Turns(s)
        for task in tasks:
            if task.status == TaskStatus.IN_PROGRESS:
                task.abort(now, Actor.SYSTEM, _ended_attempt(task, aborted))
            task.rerun(now, by, reason, turn=turns.take(task.stage_id))
        s.save(job, *reopened)
        if start is not None and start.completion and completing:
            self._after_phase(s, job, "completing", now)  # it runs, or completes if empty
        s.save(*tasks)
        return Rerun(job, start.id if start else None, tuple(st.id for st in reopened), len(tasks))
