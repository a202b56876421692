"""Schedule commands: create, pause, resume, trigger, backfill, delete, and the clock's step.

Exactly once per nominal time. A run's job is created in the transaction that records its fire
key, (schedule, nominal time): the job's own `JobCreatedBySchedule` event writes the key's row
(inline/schedules.py), whose primary key refuses a second one, and a key already there makes the
fire a no-op. The clock's steps run in the sweeper, in the one process that holds its leader
lock; each step reads the schedule under the writer lock and records where its clock stands in
the same transaction, so a step that did not commit (a crash, a kill) left nothing and the next
step, in whichever process leads then, takes it again.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Final
from uuid import UUID

from jobnik.domain.application import Jobnik, NewStage, NewTask
from jobnik.domain.commands import command
from jobnik.domain.errors import (
    BackfillTooLarge,
    InvalidBackfill,
    JobnikError,
    JobNotFound,
    ScheduleExists,
)
from jobnik.domain.jobs import Job
from jobnik.domain.ports import Session, Store
from jobnik.domain.principals import Actor, Principal
from jobnik.domain.schedules import (
    MICRO,
    Due,
    JobTemplate,
    Overlap,
    Schedule,
    StageTemplate,
    Trigger,
)
from jobnik.domain.statuses import JobStatus
from jobnik.domain.timing import EPOCH, Timing
from jobnik.domain.work import NO_TRACE

MAX_BACKFILL: Final = 100  # nominal times one backfill runs at most
STEPS_PER_SCHEDULE: Final = 100  # a sweep's steps per schedule, at most (the next sweep goes on)
DUE_PER_SWEEP: Final = 200  # schedules a sweep looks at, at most


@dataclass(frozen=True)
class NewSchedule:
    name: str
    timing: Timing
    job: JobTemplate
    overlap: str = Overlap.SKIP.value
    catchup: str = "latest"
    catchup_window_seconds: int = 24 * 3600


@dataclass(frozen=True)
class Run:
    """A run a command started: its schedule, nominal time, and job (None: the nominal time
    already had a run, `existing`)."""

    schedule: Schedule
    nominal_time: datetime
    job: Job | None
    existing: UUID | None = None


@dataclass(frozen=True)
class Backfill:
    schedule: Schedule
    runs: list[Run]


@dataclass
class Sweep:
    """What one sweep of the schedules did; `refused`: the schedules whose step was refused
    (each with its error), which the next sweep tries again."""

    steps: int = 0
    fired: int = 0
    refused: list[tuple[UUID, JobnikError]] = field(default_factory=list)


class ScheduleCommands:
    """The schedules' commands, composed over the application `jobs`: its job, stage and task
    commands create each run, inside the run's transaction."""

    def __init__(self, jobs: Jobnik) -> None:
        self.jobs = jobs
        self.store: Store = jobs.store
        self.clock: Callable[[], datetime] = jobs.clock

    # -- the operator's ----------------------------------------------------------------------

    @command
    def create(self, new: NewSchedule, *, by: Principal = Actor.API) -> Schedule:
        """A schedule whose clock starts now; ScheduleExists when the name is taken."""
        now = self.clock()
        schedule = Schedule.create(
            name=new.name,
            timing=new.timing,
            template=new.job,
            overlap=new.overlap,
            catchup=new.catchup,
            catchup_window=new.catchup_window_seconds,
            now=now,
            actor=by,
        )
        with self.store.session(write=True) as s:
            if s.schedule_named(new.name) is not None:
                raise ScheduleExists(f"a schedule named '{new.name}' exists")
            s.save(schedule)
        return schedule

    @command
    def pause(self, schedule_id: UUID, *, by: Principal, reason: str | None = None) -> Schedule:
        """Nothing fires until resumed; pausing a paused schedule changes nothing."""
        with self.store.session(write=True) as s:
            schedule = s.schedule(schedule_id)
            schedule.pause(self.clock(), by, reason)
            s.save(schedule)
        return schedule

    @command
    def resume(self, schedule_id: UUID, *, by: Principal, reason: str | None = None) -> Schedule:
        """The clock goes on from now: what fell due while paused does not run."""
        with self.store.session(write=True) as s:
            schedule = s.schedule(schedule_id)
            schedule.resume(self.clock(), by, reason)
            s.save(schedule)
        return schedule

    @command
    def delete(self, schedule_id: UUID, *, by: Principal, reason: str | None = None) -> None:
        """The schedule stops and leaves the read models; its runs' jobs and history stay."""
        with self.store.session(write=True) as s:
            schedule = s.schedule(schedule_id)
            schedule.delete(self.clock(), by, reason)
            s.save(schedule)

    @command
    def trigger(self, schedule_id: UUID, *, by: Principal, reason: str | None = None) -> Run:
        """A run now (its nominal time: now), whatever the overlap policy and paused or not."""
        now = self.clock()
        with self.store.session(write=True) as s:
            schedule = s.schedule(schedule_id)
            return self._run(s, schedule, Due(now, Trigger.TRIGGER), now, by, reason)

    @command
    def backfill(
        self,
        schedule_id: UUID,
        start: datetime,
        end: datetime,
        *,
        by: Principal,
        reason: str | None = None,
    ) -> Backfill:
        """A run for each nominal time from `start` to `end` (both included) that has none, at
        once and side by side (whatever the overlap policy); at most MAX_BACKFILL times. The
        range starts no earlier than the Unix epoch: the calendar's edges are out of reach."""
        now = self.clock()
        if start > end or end > now or start < EPOCH:
            raise InvalidBackfill(
                "a backfill's start is at or after 1970-01-01T00:00:00Z and at or before its "
                "end, and its end at or before now"
            )
        with self.store.session(write=True) as s:
            schedule = s.schedule(schedule_id)
            times = list(schedule.timing.between(start - MICRO, end, MAX_BACKFILL + 1))
            if len(times) > MAX_BACKFILL:
                raise BackfillTooLarge(
                    f"more than {MAX_BACKFILL} nominal times from {start.isoformat()} to "
                    f"{end.isoformat()}: backfill a shorter range at a time"
                )
            runs = [self._start(s, schedule, Due(t, Trigger.BACKFILL), now, by) for t in times]
            fired = sum(1 for r in runs if r.job is not None)
            schedule.backfilled(start, end, fired, len(runs) - fired, now, by, reason)
            s.save(schedule)
        return Backfill(schedule, runs)

    # -- the clock's -------------------------------------------------------------------------

    def sweep(self, stopping: Callable[[], bool] = lambda: False) -> Sweep:
        """Step each due schedule's clock until it has nothing more to do now (at most
        STEPS_PER_SCHEDULE steps each): the sweeper's round."""
        done = Sweep()
        with self.store.session(write=False) as r:
            due = r.due_schedules(self.clock(), DUE_PER_SWEEP)
        for schedule_id in due:
            for _ in range(STEPS_PER_SCHEDULE):
                if stopping():
                    return done
                try:
                    run = self.step(schedule_id)
                except JobnikError as e:  # (deleted meanwhile, a conflict run out of tries)
                    done.refused.append((schedule_id, e))
                    break
                if run is None:
                    break
                done.steps += 1
                done.fired += run.job is not None
        return done

    @command
    def step(self, schedule_id: UUID) -> Run | None:
        """One decision of the schedule's clock at now, in one transaction: the runs missed
        recorded, then the next due nominal time run, skipped or buffered (overlap policy).
        Returns the run it started, or one that made no job (skipped, buffered, or the time had
        a run already); None when there is nothing to do now."""
        now = self.clock()
        with self.store.session(write=False) as r:  # which run it may abort (the hold below)
            seen = r.schedule(schedule_id)
        with self.store.session(write=True) as s:
            if seen.overlap == Overlap.CANCEL_PREVIOUS and seen.last_job_id is not None:
                s.hold_queue(seen.last_job_id)  # (an abort changes its queued tasks)
            schedule = s.schedule(schedule_id)
            version = schedule.version
            due = schedule.step(now, self._running(s, schedule.last_job_id))
            if due is None:
                s.save(schedule)  # what it recorded: missed, skipped or buffered fires
                if schedule.version == version:
                    return None
                return Run(schedule, schedule.cursor, None)
            return self._run(s, schedule, due, now, Actor.SYSTEM, None)

    # -- a run -------------------------------------------------------------------------------

    def _running(self, s: Session, job_id: UUID | None) -> UUID | None:
        """`job_id` if that job is still going (not ended, not deleted)."""
        if job_id is None:
            return None
        try:
            job = s.job(job_id)
        except JobNotFound:
            return None
        return None if job.is_final else job_id

    def _run(
        self,
        s: Session,
        schedule: Schedule,
        due: Due,
        now: datetime,
        by: Principal,
        reason: str | None,
    ) -> Run:
        """Start `due`'s run and record it on the schedule, or, when its nominal time had a run
        already, move the schedule's clock past it."""
        if due.cancels is not None:
            self.jobs.set_job_status(
                due.cancels,
                JobStatus.ABORTED,
                by=Actor.SYSTEM,
                reason=f"cancelled by schedule '{schedule.name}': its run for "
                f"{due.nominal_time.isoformat()} started (overlap policy cancelPrevious)",
            )
        run = self._start(s, schedule, due, now, by)
        if run.job is None:
            assert run.existing is not None
            if due.trigger in (Trigger.TRIGGER, Trigger.BACKFILL):
                return run  # the same request twice: its run is the answer, nothing moves
            schedule.already_ran(due, run.existing, now)
        else:
            schedule.fired(due, run.job.id, now, by, reason)
        s.save(schedule)
        return run

    def _start(self, s: Session, schedule: Schedule, due: Due, now: datetime, by: Principal) -> Run:
        """The job of `due`'s run, created from the template with its stages and tasks, unless
        its fire key exists (then `existing` names that run's job)."""
        existing = s.run_at(schedule.id, due.nominal_time)
        if existing is not None:
            return Run(schedule, due.nominal_time, None, existing)
        template = JobTemplate.from_json(schedule.template)
        job = Job.create(
            name=template.name,
            data=template.data,
            priority=template.priority,
            user_metadata=template.user_metadata,
            traceparent=NO_TRACE,
            tracestate=None,
            now=now,
            actor=by,
            mode=template.mode,
        )
        job.run_of(schedule.id, schedule.name, due.nominal_time, str(due.trigger), now, by)
        s.save(job)
        stages = list(template.stages)
        if template.hook is not None:
            hook = {
                "scheduleId": str(schedule.id),
                "scheduleName": schedule.name,
                "nominalTime": due.nominal_time.isoformat(),
                "trigger": str(due.trigger),
            }
            stages = [StageTemplate(template.hook, {})]
        for st in stages:
            held = None if st.delay_seconds is None else now + timedelta(seconds=st.delay_seconds)
            new_stage = NewStage(
                st.type,
                st.data,
                st.user_metadata,
                not_before=held,
                schedule_to_start_seconds=st.schedule_to_start_seconds,
            )
            stage = self.jobs.add_stage(job.id, new_stage, by=by)
            new = [NewTask(t.data, t.user_metadata, t.max_attempts) for t in st.tasks]
            if template.hook is not None:
                new = [NewTask(hook)]
            if new:
                self.jobs.add_tasks(stage.id, new, by=by)
        return Run(schedule, due.nominal_time, job)
