"""The Schedule aggregate: a job template fired at nominal times, by a cron expression in a time
zone or an interval (timing.py), with its overlap and catch-up policies.

The schedule keeps a cursor: the latest nominal time the clock has dealt with (fired, skipped,
buffered or recorded as missed). Each step of the clock (`step`) deals with the nominal times
after it, up to now, one decision at a time:

- nominal times older than the catch-up window are recorded as missed (one event for the lot);
- with the catch-up policy `latest`, of the times left only the latest runs: the others are
  recorded as missed too; with `all`, each runs, oldest first;
- while the schedule's previous run is still going, the overlap policy decides: `skip` (the fire
  is recorded as skipped), `bufferOne` (it waits for the run to end; a fire while one waits is
  skipped), `allowAll` (it runs beside it), `cancelPrevious` (the previous run is aborted, with
  the schedule as the reason, and it runs).

A trigger and a backfill run at once whatever the overlap policy; neither moves the cursor.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Final, TypeVar
from uuid import UUID, uuid4

from croniter import CroniterError

from jobnik.domain.base import Entity, cause
from jobnik.domain.delays import MAX_DELAY_SECONDS, check_schedule_to_start
from jobnik.domain.errors import InvalidJobTemplate, InvalidRequest, UnknownPolicy
from jobnik.domain.principals import Actor, Principal
from jobnik.domain.statuses import JobMode, Priority
from jobnik.domain.timing import Timing

MAX_TEMPLATE_TASKS: Final = 1000  # in all the stages of a job template, as one request's
MISSED_COUNT_LIMIT: Final = 1000  # missed fires one event counts at most ("1000 or more")
# A catch-up window's bounds, in seconds: at least a minute, so that a fire the sweeper reaches a
# little late (JOBNIK_SWEEP_INTERVAL) is not missed; at most a year.
MIN_CATCHUP_WINDOW: Final = 60
MAX_CATCHUP_WINDOW: Final = 366 * 24 * 3600


class Overlap(StrEnum):
    """What a fire does while the schedule's previous run is still going."""

    SKIP = "skip"
    BUFFER_ONE = "bufferOne"
    ALLOW_ALL = "allowAll"
    CANCEL_PREVIOUS = "cancelPrevious"


class Catchup(StrEnum):
    """Which of the fires missed within the catch-up window run: each, or the latest."""

    ALL = "all"
    LATEST = "latest"


class Trigger(StrEnum):
    """What made a run: the clock, a buffered fire released, a trigger, a backfill."""

    SCHEDULE = "schedule"
    BUFFERED = "buffered"
    TRIGGER = "trigger"
    BACKFILL = "backfill"


E = TypeVar("E", Overlap, Catchup)


def policy(kind: type[E], value: str, what: str) -> E:
    """`value` as a policy of `kind`; UnknownPolicy naming the allowed ones."""
    try:
        return kind(value)
    except ValueError:
        allowed = ", ".join(p.value for p in kind)
        raise UnknownPolicy(f"unknown {what} policy {value!r}: one of {allowed}") from None


# -- the job a fire creates -------------------------------------------------------------------


@dataclass(frozen=True)
class TaskTemplate:
    data: dict[str, Any]
    user_metadata: dict[str, Any] = field(default_factory=dict)
    max_attempts: int = 3


@dataclass(frozen=True)
class StageTemplate:
    type: str
    data: dict[str, Any]
    user_metadata: dict[str, Any] = field(default_factory=dict)
    tasks: tuple[TaskTemplate, ...] = ()
    delay_seconds: int | None = None  # its tasks wait this long after the run starts
    schedule_to_start_seconds: int | None = None  # a task not dequeued within it expires


@dataclass(frozen=True)
class JobTemplate:
    """What each run creates: a job with these stages and tasks, or with one stage of the hook's
    type holding one task that names the run (its handler fills the job in)."""

    name: str
    data: dict[str, Any]
    priority: Priority = Priority.MEDIUM
    user_metadata: dict[str, Any] = field(default_factory=dict)
    stages: tuple[StageTemplate, ...] = ()
    hook: str | None = None

    def check(self) -> None:
        if bool(self.stages) == (self.hook is not None):
            raise InvalidJobTemplate
        if self.hook == "":
            raise InvalidJobTemplate("a hook's stage type must not be empty")
        for s in self.stages:
            if s.delay_seconds is not None and not 1 <= s.delay_seconds <= MAX_DELAY_SECONDS:
                raise InvalidJobTemplate(
                    f"a stage's delaySeconds is 1 to {MAX_DELAY_SECONDS:g}, not {s.delay_seconds}"
                )
            check_schedule_to_start(s.schedule_to_start_seconds)
        if (tasks := sum(len(s.tasks) for s in self.stages)) > MAX_TEMPLATE_TASKS:
            raise InvalidJobTemplate(
                f"a schedule's job holds at most {MAX_TEMPLATE_TASKS} tasks in all, not {tasks}: "
                "each run creates them at once (a hook stage can add more)"
            )

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "data": self.data,
            "priority": str(self.priority),
            "userMetadata": self.user_metadata,
            "hook": self.hook,
            "stages": [
                {
                    "type": s.type,
                    "data": s.data,
                    "userMetadata": s.user_metadata,
                    "tasks": [
                        {
                            "data": t.data,
                            "userMetadata": t.user_metadata,
                            "maxAttempts": t.max_attempts,
                        }
                        for t in s.tasks
                    ],
                    **({"delaySeconds": s.delay_seconds} if s.delay_seconds is not None else {}),
                    **(
                        {"scheduleToStartSeconds": s.schedule_to_start_seconds}
                        if s.schedule_to_start_seconds is not None
                        else {}
                    ),
                }
                for s in self.stages
            ],
        }

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> JobTemplate:
        return cls(
            name=value["name"],
            data=value["data"],
            priority=Priority(value["priority"]),
            user_metadata=value["userMetadata"],
            hook=value["hook"],
            stages=tuple(
                StageTemplate(
                    s["type"],
                    s["data"],
                    s["userMetadata"],
                    tuple(
                        TaskTemplate(t["data"], t["userMetadata"], t["maxAttempts"])
                        for t in s["tasks"]
                    ),
                    s.get("delaySeconds"),
                    s.get("scheduleToStartSeconds"),
                )
                for s in value["stages"]
            ),
        )

    mode = JobMode.RUN_ONCE  # a run completes with its last stage


# -- what the clock decided --------------------------------------------------------------------


@dataclass(frozen=True)
class Due:
    """A run the clock's step decided: its nominal time, and whether it aborts the previous."""

    nominal_time: datetime
    trigger: Trigger
    cancels: UUID | None = None


class Schedule(Entity):
    """A schedule: its timing, job template, policies, pause, and where its clock stands."""

    if TYPE_CHECKING:  # set by the events' apply()
        name: str
        cron: str | None
        timezone: str
        interval_seconds: int | None
        template: dict[str, Any]
        overlap: str
        catchup: str
        catchup_window: int
        paused: bool
        pause_reason: str | None
        cursor: datetime
        next_fire_at: datetime | None
        last_job_id: UUID | None
        last_fire_time: datetime | None
        buffered_time: datetime | None
        deleted: bool

    class Moved(Entity.Event):
        """An event after which the clock stands elsewhere: the cursor, the next fire, and the
        fire waiting for the previous run to end (bufferOne)."""

        cursor: datetime
        next_fire_at: datetime | None
        buffered_time: datetime | None

        def apply(self, schedule: Schedule) -> None:
            schedule.cursor, schedule.next_fire_at = self.cursor, self.next_fire_at
            schedule.buffered_time = self.buffered_time

    class ScheduleCreated(Entity.Created):
        name: str
        cron: str | None
        timezone: str
        interval_seconds: int | None
        template: dict[str, Any]
        overlap: str
        catchup: str
        catchup_window: int
        cursor: datetime
        next_fire_at: datetime | None

        def apply(self, s: Schedule) -> None:
            s.name, s.cron, s.timezone = self.name, self.cron, self.timezone
            s.interval_seconds, s.template = self.interval_seconds, self.template
            s.overlap, s.catchup, s.catchup_window = self.overlap, self.catchup, self.catchup_window
            s.cursor, s.next_fire_at = self.cursor, self.next_fire_at
            s.paused, s.pause_reason, s.deleted = False, None, False
            s.last_job_id = s.last_fire_time = s.buffered_time = None

    class SchedulePaused(Entity.Event):
        def apply(self, schedule: Schedule) -> None:
            schedule.paused, schedule.pause_reason = True, self.reason

    class ScheduleResumed(Moved):
        """Resumed: the clock goes on from now (what fell due while paused does not run)."""

        def apply(self, schedule: Schedule) -> None:
            super().apply(schedule)
            schedule.paused, schedule.pause_reason = False, None

    class ScheduleFired(Moved):
        """A run started (by the clock, a buffered fire or a trigger; a backfill's runs are
        one ScheduleBackfilled): `job_id` for `nominal_time`; `cancelled_job_id`: the previous
        run, aborted (overlap policy cancelPrevious)."""

        nominal_time: datetime
        job_id: UUID
        trigger: str
        cancelled_job_id: UUID | None

        def apply(self, schedule: Schedule) -> None:
            super().apply(schedule)
            schedule.last_job_id, schedule.last_fire_time = self.job_id, self.nominal_time

    class ScheduleFireSkipped(Moved):
        """`nominal_time` did not run: `because` "overlap" (the previous run, `job_id`, was
        still going) or "alreadyRan" (a trigger or backfill ran it: `job_id`)."""

        nominal_time: datetime
        job_id: UUID
        because: str

    class ScheduleFireBuffered(Moved):
        """The previous run, `job_id`, was still going: `nominal_time` runs once it has ended."""

        nominal_time: datetime
        job_id: UUID

    class ScheduleFiresMissed(Moved):
        """`count` nominal times from `first` to `last` did not run (the reason says why);
        counted up to MISSED_COUNT_LIMIT."""

        first: datetime
        last: datetime
        count: int

    class ScheduleBackfilled(Entity.Event):
        """The nominal times from `start` to `end` ran: `fired` new runs, `already` had one."""

        start: datetime
        end: datetime
        fired: int
        already: int

    class ScheduleDeleted(Entity.Event):
        def apply(self, schedule: Schedule) -> None:
            schedule.deleted = True

    # -- commands ---------------------------------------------------------------------------

    @classmethod
    def create(
        cls,
        *,
        name: str,
        timing: Timing,
        template: JobTemplate,
        overlap: str,
        catchup: str,
        catchup_window: int,
        now: datetime,
        actor: Principal,
    ) -> Schedule:
        """A schedule whose clock starts at `now` (its first run is its first nominal time
        after `now`); refused with a named InvalidRequest."""
        timing.check(now)
        template.check()
        overlap = policy(Overlap, overlap, "overlap")
        catchup = policy(Catchup, catchup, "catch-up")
        if not MIN_CATCHUP_WINDOW <= catchup_window <= MAX_CATCHUP_WINDOW:
            raise InvalidRequest(
                f"catchupWindowSeconds must be {MIN_CATCHUP_WINDOW} to {MAX_CATCHUP_WINDOW}, "
                f"not {catchup_window}"
            )
        return cls._create(
            cls.ScheduleCreated,
            id=uuid4(),
            timestamp=now,
            reason=None,
            **cause(actor),
            name=name,
            cron=timing.cron.strip() if timing.cron is not None else None,
            timezone=timing.timezone,
            interval_seconds=timing.interval_seconds,
            template=template.to_json(),
            overlap=str(overlap),
            catchup=str(catchup),
            catchup_window=catchup_window,
            cursor=now,
            next_fire_at=_next(timing, now),
        )

    @property
    def timing(self) -> Timing:
        return Timing(self.cron, self.timezone, self.interval_seconds)

    def pause(self, now: datetime, actor: Principal, reason: str | None) -> bool:
        """False (no event) when already paused."""
        if self.paused:
            return False
        self._emit(self.SchedulePaused, now, actor, reason)
        return True

    def resume(self, now: datetime, actor: Principal, reason: str | None) -> bool:
        """False (no event) when not paused. The clock goes on from `now`."""
        if not self.paused:
            return False
        self._emit(self.ScheduleResumed, now, actor, reason, **self._moved(max(self.cursor, now)))
        return True

    def delete(self, now: datetime, actor: Principal, reason: str | None) -> None:
        self._emit(self.ScheduleDeleted, now, actor, reason)

    def step(self, now: datetime, running: UUID | None) -> Due | None:
        """The clock's next decision at `now` (see the module), recorded as events; the run to
        start, if any (the caller starts it and records it with `fired`). `running`: the
        previous run, if it is still going."""
        if self.paused:
            return None
        if self.buffered_time is not None and running is None:
            return Due(self.buffered_time, Trigger.BUFFERED)
        if self.next_fire_at is None or self.next_fire_at > now:
            return None
        window = timedelta(seconds=self.catchup_window)
        self._miss_before(now - window, now, "older than the catch-up window")
        if self.catchup == Catchup.LATEST:
            latest = self.timing.last_at_or_before(now)
            if latest is not None:
                self._miss_before(latest, now, "catch-up policy latest: only the latest runs")
        due = self.next_fire_at
        if due is None or due > now:  # every due time was older than the window
            return None
        if running is None or self.overlap == Overlap.ALLOW_ALL:
            return Due(due, Trigger.SCHEDULE)
        if self.overlap == Overlap.CANCEL_PREVIOUS:
            return Due(due, Trigger.SCHEDULE, cancels=running)
        if self.overlap == Overlap.BUFFER_ONE and self.buffered_time is None:
            self._emit(
                self.ScheduleFireBuffered,
                now,
                Actor.SYSTEM,
                f"the previous run ({running}) is still going: runs once it has ended",
                nominal_time=due,
                job_id=running,
                **self._moved(due, buffered=due),
            )
            return None
        why = " and a fire already waits for it" if self.overlap == Overlap.BUFFER_ONE else ""
        self._emit(
            self.ScheduleFireSkipped,
            now,
            Actor.SYSTEM,
            f"overlap policy {self.overlap}: the previous run ({running}) is still going{why}",
            nominal_time=due,
            job_id=running,
            because=OVERLAP,
            **self._moved(due),
        )
        return None

    def _moved(self, cursor: datetime, buffered: datetime | None = None) -> dict[str, Any]:
        """The clock's fields after dealing with the nominal times up to `cursor` (an event
        that leaves the cursor where it is keeps the next fire)."""
        if cursor > self.cursor:
            following = _next(self.timing, cursor)
        else:
            cursor, following = self.cursor, self.next_fire_at
        return {
            "cursor": cursor,
            "next_fire_at": following,
            "buffered_time": buffered if buffered is not None else self.buffered_time,
        }

    def already_ran(self, due: Due, job_id: UUID, now: datetime) -> None:
        """`due`'s nominal time already has a run, `job_id` (a trigger or a backfill made it):
        the clock moves past it without another."""
        self._emit(
            self.ScheduleFireSkipped,
            now,
            Actor.SYSTEM,
            f"this nominal time already ran ({job_id})",
            nominal_time=due.nominal_time,
            job_id=job_id,
            because=ALREADY_RAN,
            **self._clock_after(due),
        )

    def _clock_after(self, due: Due) -> dict[str, Any]:
        """The clock's fields once `due` is dealt with: a clock's fire moves the cursor to its
        time, a buffered one leaves none waiting, a trigger or backfill moves nothing."""
        if due.trigger == Trigger.SCHEDULE:
            return self._moved(due.nominal_time)
        moved = self._moved(self.cursor)
        if due.trigger == Trigger.BUFFERED:
            moved["buffered_time"] = None
        return moved

    def _miss_before(self, limit: datetime, now: datetime, reason: str) -> None:
        """Record the due nominal times before `limit` as missed, if there are any."""
        first = self.next_fire_at
        if first is None or first >= limit:
            return
        last = self.timing.last_at_or_before(limit - MICRO) or first
        count = self.timing.count(self.cursor, last, MISSED_COUNT_LIMIT)
        self._emit(
            self.ScheduleFiresMissed,
            now,
            Actor.SYSTEM,
            reason,
            first=first,
            last=last,
            count=count,
            **self._moved(last),
        )

    def fired(
        self,
        due: Due,
        job_id: UUID,
        now: datetime,
        actor: Principal,
        reason: str | None = None,
    ) -> None:
        """Record the run `job_id` of `due` (`_clock_after` says where the clock goes)."""
        self._emit(
            self.ScheduleFired,
            now,
            actor,
            reason,
            nominal_time=due.nominal_time,
            job_id=job_id,
            trigger=str(due.trigger),
            cancelled_job_id=due.cancels,
            **self._clock_after(due),
        )

    def backfilled(
        self,
        start: datetime,
        end: datetime,
        fired: int,
        already: int,
        now: datetime,
        actor: Principal,
        reason: str | None,
    ) -> None:
        self._emit(
            self.ScheduleBackfilled,
            now,
            actor,
            reason,
            start=start,
            end=end,
            fired=fired,
            already=already,
        )


MICRO: Final = timedelta(microseconds=1)
OVERLAP: Final = "overlap"
ALREADY_RAN: Final = "alreadyRan"


def _next(timing: Timing, after: datetime) -> datetime | None:
    """The first nominal time after `after`; None if the expression has no later date."""
    try:
        return timing.next_after(after)
    except CroniterError:
        return None
