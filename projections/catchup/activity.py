"""Task activity minute by minute, for the console's charts and `GET /v1/activity`: per stage
type and minute the tasks queued, dequeued, completed, retried and failed and how the number of
queued tasks changed; per job and minute the tasks completed.

Tables:
- activity_v1_stages: each stage of a job not deleted: its job, its type and its queued tasks
  (task events name their stage, not its type; a deleted job's queued tasks leave its types');
- activity_v1_types: per stage type, its queued tasks now, counted as `GET /v1/queues` counts
  them (PENDING or RETRIED, in paused jobs and stages not released yet too; a deleted job's not);
- activity_v1_minutes: per stage type and minute (`epoch_minute`: minutes since 1970-01-01 UTC
  of the events' times) the counts, and `queued_change`, the net change of its queued tasks;
- activity_v1_job_minutes: per job and minute, the tasks completed.

An archived job's stages and minutes rows leave with it on its archive record (it has ended: no
task event of it comes again); its stage types' minutes keep what it added, and their queued
tasks lose the job's, as when a job is deleted (a job that FAILED may have left tasks queued,
which no worker takes now and `GET /v1/queues` no longer counts).

Queued depth over time is derived, not sampled: at the end of minute m a type had its queued
tasks now minus the `queued_change` of every later minute (queries/activity.py). Both are
written in the same transaction, so the curve is exact at the projection's position.

The minute rows are kept for `WINDOW_MINUTES` before the newest minute an event fell in, not
before the wall clock: a replay of old events (a rebuild) computes the same horizon at the same
point of the log, so it keeps and drops the same rows (docs/design.md, "Activity charts").
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final
from uuid import UUID

from jobnik.domain.archives import ARCHIVED
from jobnik.domain.jobs import Job
from jobnik.domain.stages import Stage
from jobnik.domain.statuses import TASK_QUEUED
from jobnik.domain.tasks import Task
from jobnik.projections.catchup.projection import (
    Batch,
    CatchUpProjection,
    Replay,
    Rows,
    Run,
    Sql,
    archived_in,
    runner,
    select_in,
)
from jobnik.projections.store.cursor import Cursor

STAGES, TYPES, MINUTES, JOB_MINUTES = (
    "activity_v1_stages",
    "activity_v1_types",
    "activity_v1_minutes",
    "activity_v1_job_minutes",
)
WINDOW_MINUTES: Final = 24 * 60  # minute rows kept before the newest minute
COUNTERS: Final = ("enqueued", "dequeued", "completed", "retried", "failed", "queued_change")


def epoch_minute(event: Any) -> int:
    """The minute the event happened in, counted from 1970-01-01 UTC."""
    return int(event.timestamp.timestamp() // 60)


@dataclass
class StageRow:
    job_id: UUID
    stage_type: str
    queued: int


@dataclass
class State:
    """The rows a batch reads and changes, in memory: the fold updates them."""

    stages: dict[UUID, StageRow]  # the batch's stages as they stand (loaded or added)
    added: set[UUID] = field(default_factory=set)
    deleted: set[UUID] = field(default_factory=set)
    new_types: set[str] = field(default_factory=set)
    queued: Counter[str] = field(default_factory=Counter)  # change per stage type
    minutes: dict[tuple[str, int], Counter[str]] = field(default_factory=dict)
    job_minutes: Counter[tuple[UUID, int]] = field(default_factory=Counter)
    newest: int | None = None  # the newest minute a row was touched for

    def touch(self, stage_type: str, minute: int, **deltas: int) -> None:
        """Counts added to the type's row of `minute`, which exists from now on (even when
        the changes add up to nothing: a row is there or not whatever the batches)."""
        row = self.minutes.setdefault((stage_type, minute), Counter())
        row.update(deltas)
        if self.newest is None or minute > self.newest:
            self.newest = minute


def _task(state: State, e: Any, counters: tuple[str, ...], queued: int) -> None:
    """A task event of the stage `e` names: `counters` counted, the queued tasks changed."""
    stage = state.stages.get(e.stage_id)
    if stage is None:  # (a stage the log never added: nothing to count it under)
        return
    minute = epoch_minute(e)
    deltas = dict.fromkeys(counters, 1)
    if queued:
        stage.queued += queued
        state.queued[stage.stage_type] += queued
        deltas["queued_change"] = queued
    state.touch(stage.stage_type, minute, **deltas)
    if "completed" in counters:
        state.job_minutes[stage.job_id, minute] += 1


def _counts(*counters: str, queued: int = 0) -> Callable[[State, Any], None]:
    return lambda state, e: _task(state, e, counters, queued)


def _stage_added(state: State, e: Any) -> None:
    state.stages[e.originator_id] = StageRow(e.job_id, e.type, 0)
    state.added.add(e.originator_id)
    state.new_types.add(e.type)


def _job_deleted(state: State, e: Any) -> None:
    """The job's stages go, and their queued tasks leave their types' counts."""
    _leave(state, {e.originator_id}, epoch_minute(e))


def _jobs_archived(state: State, e: Any) -> None:
    """An archive record: its jobs' stages go as a deleted job's do (a job that FAILED may
    leave queued tasks that no worker will take now)."""
    _leave(state, {f.job_id for f in e.files}, epoch_minute(e))


def _leave(state: State, jobs: set[UUID], minute: int) -> None:
    for stage_id, stage in sorted(state.stages.items(), key=lambda s: str(s[0])):
        if stage.job_id not in jobs:
            continue
        if stage.queued:
            state.queued[stage.stage_type] -= stage.queued
            state.touch(stage.stage_type, minute, queued_change=-stage.queued)
        del state.stages[stage_id]
        state.deleted.add(stage_id)


def _aborted(state: State, e: Any) -> None:
    """An aborted task leaves the queue if it was in it (not when a worker held it)."""
    _task(state, e, (), -1 if e.previous in TASK_QUEUED else 0)


# What each event does; the events that put a task in the queue count as `enqueued`.
STEP: Final[dict[type, Callable[[State, Any], None]]] = {
    Stage.StageAdded: _stage_added,
    Job.JobDeleted: _job_deleted,
    **dict.fromkeys(ARCHIVED, _jobs_archived),
    Task.TaskCreated: _counts("enqueued", queued=1),
    Task.TaskReturned: _counts("enqueued", queued=1),
    Task.TaskRedispatched: _counts("enqueued", queued=1),
    Task.TaskRerun: _counts("enqueued", queued=1),
    Task.TaskRetried: _counts("retried", "enqueued", queued=1),  # a failed attempt, queued again
    Task.TaskDequeued: _counts("dequeued", queued=-1),
    Task.TaskCompleted: _counts("completed"),
    Task.TaskFailed: _counts("failed"),
    Task.TaskAborted: _aborted,
}


def step(state: State, event: Any) -> None:
    """Fold one event into `state`. Pure: no I/O, no clock."""
    handler = STEP.get(type(event))
    if handler is not None:
        handler(state, event)


def fold(batch: Batch, stages: dict[UUID, StageRow]) -> State:
    """The batch (in log order) folded over the stored rows of its stages. Pure."""
    state = State(stages)
    for _, event in batch:
        step(state, event)
    return state


def horizon(stored_newest: int | None, state: State) -> int | None:
    """The first minute kept after the batch: `WINDOW_MINUTES` before the newest minute any
    event fell in so far (None: no minute yet)."""
    newest = max((m for m in (stored_newest, state.newest) if m is not None), default=None)
    return None if newest is None else newest - WINDOW_MINUTES


INSERT_STAGE: Final = (
    "INSERT INTO activity_v1_stages (stage_id, job_id, stage_type, queued) "
    "VALUES (%(stage_id)s, %(job_id)s, %(stage_type)s, %(queued)s)"
)
SET_STAGE: Final = "UPDATE activity_v1_stages SET queued = %(queued)s WHERE stage_id = %(stage_id)s"
DELETE_STAGE: Final = "DELETE FROM activity_v1_stages WHERE stage_id = %(stage_id)s"
ADD_TYPE: Final = (
    "INSERT INTO activity_v1_types (stage_type, queued) VALUES (%(stage_type)s, %(queued)s) "
    "ON CONFLICT (stage_type) DO UPDATE SET queued = activity_v1_types.queued + EXCLUDED.queued"
)
ADD_MINUTE: Final = (
    f"INSERT INTO activity_v1_minutes (stage_type, epoch_minute, {', '.join(COUNTERS)}) "
    f"VALUES (%(stage_type)s, %(epoch_minute)s, {', '.join(f'%({c})s' for c in COUNTERS)}) "
    "ON CONFLICT (stage_type, epoch_minute) DO UPDATE SET "
    + ", ".join(f"{c} = activity_v1_minutes.{c} + EXCLUDED.{c}" for c in COUNTERS)
)
ADD_JOB_MINUTE: Final = (
    "INSERT INTO activity_v1_job_minutes (job_id, epoch_minute, completed) "
    "VALUES (%(job_id)s, %(epoch_minute)s, %(completed)s) "
    "ON CONFLICT (job_id, epoch_minute) DO UPDATE "
    "SET completed = activity_v1_job_minutes.completed + EXCLUDED.completed"
)
NEWEST: Final = "SELECT MAX(epoch_minute) AS newest FROM activity_v1_minutes"
PRUNE: Final = (
    "DELETE FROM activity_v1_minutes WHERE epoch_minute < %(horizon)s",
    "DELETE FROM activity_v1_job_minutes WHERE epoch_minute < %(horizon)s",
)


def _by_job(item: tuple[tuple[UUID, int], int]) -> tuple[str, int]:
    (job_id, minute), _ = item
    return str(job_id), minute


class Activity(CatchUpProjection):
    """Tasks queued, dequeued, completed, retried and failed per stage type and minute, tasks
    completed per job and minute, and each stage type's queued tasks now."""

    name = "activity"
    version = 3  # 2: archived jobs' stages and minutes leave; 3: and their queued tasks
    tables = (STAGES, TYPES, MINUTES, JOB_MINUTES)
    keys = {
        STAGES: ("stage_id",),
        TYPES: ("stage_type",),
        MINUTES: ("stage_type", "epoch_minute"),
        JOB_MINUTES: ("job_id", "epoch_minute"),
    }
    events = tuple(STEP)
    leave_with_job = ((STAGES, "job_id IN ({jobs})"), (JOB_MINUTES, "job_id IN ({jobs})"))
    # Rows of one job or stage; the counts per type and minute are totals over jobs, and the
    # window follows the newest minute of any job: a rebuild's `Totals`.
    per_job = True
    ddl = f"""
    CREATE TABLE IF NOT EXISTS activity_v1_stages (
        stage_id {{uuid}} PRIMARY KEY,
        job_id {{uuid}} NOT NULL,
        stage_type TEXT NOT NULL,
        queued INTEGER NOT NULL
    );
    CREATE INDEX IF NOT EXISTS activity_v1_stages_job ON activity_v1_stages (job_id);
    CREATE TABLE IF NOT EXISTS activity_v1_types (
        stage_type TEXT PRIMARY KEY,
        queued BIGINT NOT NULL
    );
    CREATE TABLE IF NOT EXISTS activity_v1_minutes (
        stage_type TEXT NOT NULL,
        epoch_minute BIGINT NOT NULL,
        {" ".join(f"{c} INTEGER NOT NULL," for c in COUNTERS)}
        PRIMARY KEY (stage_type, epoch_minute)
    );
    CREATE INDEX IF NOT EXISTS activity_v1_minutes_minute ON activity_v1_minutes (epoch_minute);
    CREATE TABLE IF NOT EXISTS activity_v1_job_minutes (
        job_id {{uuid}} NOT NULL,
        epoch_minute BIGINT NOT NULL,
        completed INTEGER NOT NULL,
        PRIMARY KEY (job_id, epoch_minute)
    );
    CREATE INDEX IF NOT EXISTS activity_v1_job_minutes_minute
        ON activity_v1_job_minutes (epoch_minute)
    """

    def apply(self, cur: Cursor, batch: Batch, sql: Sql, prepared: Any = None) -> None:
        stored_newest = _newest(cur, sql)
        state = fold(batch, self.stored_stages(cur, batch, sql))
        keep_from = horizon(stored_newest, state)
        run = runner(cur, sql)
        _write_stages(run, state)
        run(ADD_TYPE, _type_rows(state.new_types, state.queued))
        if keep_from is not None:
            run(ADD_MINUTE, _minute_rows(state.minutes, keep_from))
            run(ADD_JOB_MINUTE, _job_minute_rows(state.job_minutes, keep_from))
            if stored_newest is not None and keep_from > stored_newest - WINDOW_MINUTES:
                _prune(cur, sql, keep_from)
        self.forget(cur, sql, archived_in(batch))

    def replay(self, sql: Sql) -> Replay:
        return Totals(sql, self)

    def stored_stages(self, cur: Cursor, batch: Batch, sql: Sql) -> dict[UUID, StageRow]:
        """The stored rows of the stages the batch's task events name, and of the stages of the
        jobs it deletes or archives."""
        stage_ids = {e.stage_id for _, e in batch if hasattr(e, "stage_id")}
        deleted = {e.originator_id for _, e in batch if isinstance(e, Job.JobDeleted)}
        deleted |= archived_in(batch)
        select = "SELECT * FROM activity_v1_stages"
        rows = select_in(cur, sql, select, "stage_id", stage_ids)
        rows += select_in(cur, sql, select, "job_id", deleted)
        return {r["stage_id"]: StageRow(r["job_id"], r["stage_type"], r["queued"]) for r in rows}


class Totals:
    """A rebuild pass's replay (`CatchUpProjection.replay`): each page's stage rows as `apply`
    writes them; the counts per stage type, per type and minute and per job and minute added up
    in memory over the pass (minutes before the window of the newest minute seen dropped as it
    moves) and added to their rows when it ends, each row once, in key order; then the rows
    before the window of the tables' newest minute are removed.

    The rows are those `apply` writes batch by batch: a minute's row holds every event of that
    minute, and the minutes kept are those within the window of the newest minute of the log,
    whatever the batches. Processes that replay different jobs into the same tables
    (rebuild/parallel.py) each keep the minutes within the window of their own jobs' newest
    minute, a superset; the rebuilding process's last pass ends after theirs and removes the
    rest."""

    def __init__(self, sql: Sql, projection: Activity) -> None:
        self.sql, self.projection = sql, projection
        self._reset()

    def _reset(self) -> None:
        self.started = False
        self.newest: int | None = None  # the stored rows' newest minute, then this pass's
        self.types: Counter[str] = Counter()
        self.minutes: dict[tuple[str, int], Counter[str]] = {}
        self.job_minutes: Counter[tuple[UUID, int]] = Counter()

    def __call__(self, cur: Cursor, batch: Batch, prepared: Any) -> None:
        run = runner(cur, self.sql)
        if not self.started:
            self.newest, self.started = _newest(cur, self.sql), True
        if not batch:
            self._write(cur, run)
            return
        state = fold(batch, self.projection.stored_stages(cur, batch, self.sql))
        _write_stages(run, state)
        for t in state.new_types:
            self.types[t] += 0  # (a type's row is there once a stage of it was added)
        self.types.update(state.queued)
        for key, counts in state.minutes.items():
            self.minutes.setdefault(key, Counter()).update(counts)
        self.job_minutes.update(state.job_minutes)
        archived = archived_in(batch)
        if archived:
            self.job_minutes = Counter(
                {k: n for k, n in self.job_minutes.items() if k[0] not in archived}
            )
        self.projection.forget(cur, self.sql, archived)
        if state.newest is not None and (self.newest is None or state.newest > self.newest):
            self.newest = state.newest
            keep_from = state.newest - WINDOW_MINUTES
            self.minutes = {k: n for k, n in self.minutes.items() if k[1] >= keep_from}
            self.job_minutes = Counter(
                {k: n for k, n in self.job_minutes.items() if k[1] >= keep_from}
            )

    def _write(self, cur: Cursor, run: Run) -> None:
        run(ADD_TYPE, _type_rows((), self.types))
        if self.newest is not None:  # (a late event's minute may lie before the window)
            run(ADD_MINUTE, _minute_rows(self.minutes, self.newest - WINDOW_MINUTES))
            run(ADD_JOB_MINUTE, _job_minute_rows(self.job_minutes, self.newest - WINDOW_MINUTES))
        newest = _newest(cur, self.sql)
        if newest is not None:
            _prune(cur, self.sql, newest - WINDOW_MINUTES)
        self._reset()


def _newest(cur: Cursor, sql: Sql) -> int | None:
    stored = cur.one(sql(NEWEST))
    return None if stored is None else stored["newest"]


def _prune(cur: Cursor, sql: Sql, keep_from: int) -> None:
    for statement in PRUNE:
        cur.execute(sql(statement), {"horizon": keep_from})


def _write_stages(run: Run, state: State) -> None:
    """The batch's stage rows: added, their queued tasks changed, removed."""
    loaded = set(state.deleted | state.stages.keys()) - state.added
    added = sorted(state.added - state.deleted, key=str)
    run(INSERT_STAGE, [{"stage_id": s, **vars(state.stages[s])} for s in added])
    changed = sorted(loaded - state.deleted, key=str)
    run(SET_STAGE, [{"stage_id": s, "queued": state.stages[s].queued} for s in changed])
    run(DELETE_STAGE, [{"stage_id": s} for s in sorted(loaded & state.deleted, key=str)])


def _type_rows(new_types: Iterable[str], queued: Mapping[str, int]) -> Rows:
    return [{"stage_type": t, "queued": queued.get(t, 0)} for t in sorted({*new_types, *queued})]


def _minute_rows(minutes: Mapping[tuple[str, int], Counter[str]], keep_from: int) -> Rows:
    return [
        {"stage_type": t, "epoch_minute": m, **{c: n[c] for c in COUNTERS}}
        for (t, m), n in sorted(minutes.items())
        if m >= keep_from
    ]


def _job_minute_rows(job_minutes: Mapping[tuple[UUID, int], int], keep_from: int) -> Rows:
    return [
        {"job_id": j, "epoch_minute": m, "completed": n}
        for (j, m), n in sorted(job_minutes.items(), key=_by_job)
        if m >= keep_from
    ]
