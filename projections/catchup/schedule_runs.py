"""How each schedule's runs went: per run (a job a schedule created) its job's status, and per
schedule how many runs completed, failed and were aborted, and how many of its latest ended runs
failed in a row (`failing`: a schedule whose runs keep failing is stuck work, GET /v1/stuck).

A run is known from its job's `JobCreatedBySchedule`; its job's status events then move it. A
completed run ends a failing streak; an aborted one (a cancelPrevious overlap, an operator)
neither ends nor extends it. A rerun (JobReopened) takes the run out of its ended count until it
ends again. Counts include runs whose jobs were deleted or archived since; an archived job's run
row leaves with it (its job has ended: no event moves the run again), and the schedule's runs
list it as ARCHIVED (queries/schedules.py).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Final
from uuid import UUID

from jobnik.domain.archives import ARCHIVED
from jobnik.domain.jobs import Job
from jobnik.domain.statuses import JobStatus
from jobnik.projections.catchup.projection import (
    Batch,
    CatchUpProjection,
    Sql,
    archived_in,
    select_in,
)
from jobnik.projections.store.cursor import Cursor

RUNS, OUTCOMES = "schedule_runs_v1", "schedule_outcomes_v1"
STATUS_AFTER: Final[Mapping[type, Callable[[Any], str]]] = {
    Job.JobStarted: lambda e: JobStatus.IN_PROGRESS.value,
    Job.JobPaused: lambda e: JobStatus.PAUSED.value,
    Job.JobResumed: lambda e: str(e.status),
    Job.JobCompleted: lambda e: JobStatus.COMPLETED.value,
    Job.JobFailed: lambda e: JobStatus.FAILED.value,
    Job.JobAborted: lambda e: JobStatus.ABORTED.value,
    Job.JobReopened: lambda e: str(e.status),
}
ENDED: Final = {
    JobStatus.COMPLETED.value: "completed",
    JobStatus.FAILED.value: "failed",
    JobStatus.ABORTED.value: "aborted",
}


@dataclass(frozen=True)
class RunRow:
    job_id: UUID
    schedule_id: UUID
    nominal_time: datetime
    status: str


@dataclass(frozen=True)
class OutcomeRow:
    schedule_id: UUID
    last_job_id: UUID
    last_job_position: int
    last_status: str
    last_interaction: datetime
    failing: int = 0
    failing_since: datetime | None = None
    last_failed_job_id: UUID | None = None


@dataclass
class State:
    runs: dict[UUID, RunRow]
    outcomes: dict[UUID, OutcomeRow]
    ended: Counter[tuple[UUID, str]]  # (schedule, completed|failed|aborted) → change


def step(state: State, event: Any, position: int) -> None:
    """Fold one event into `state`. Pure."""
    if isinstance(event, Job.JobCreatedBySchedule):
        job_id, schedule_id = event.originator_id, event.schedule_id
        state.runs[job_id] = RunRow(job_id, schedule_id, event.nominal_time, "PENDING")
        current = state.outcomes.get(schedule_id)
        if current is None or current.last_job_position < position:
            kept = {} if current is None else vars(current)
            state.outcomes[schedule_id] = OutcomeRow(
                **{
                    **kept,
                    "schedule_id": schedule_id,
                    "last_job_id": job_id,
                    "last_job_position": position,
                    "last_status": "PENDING",
                    "last_interaction": event.timestamp,
                }
            )
        return
    run = state.runs.get(event.originator_id)
    if run is None:  # not a schedule's run
        return
    status = STATUS_AFTER[type(event)](event)
    if run.status in ENDED:
        state.ended[run.schedule_id, ENDED[run.status]] -= 1
    if status in ENDED:
        state.ended[run.schedule_id, ENDED[status]] += 1
    state.runs[run.job_id] = replace(run, status=status)
    outcome = state.outcomes[run.schedule_id]
    if status == JobStatus.FAILED:
        outcome = replace(
            outcome,
            failing=outcome.failing + 1,
            failing_since=outcome.failing_since or event.timestamp,
            last_failed_job_id=run.job_id,
        )
    elif status == JobStatus.COMPLETED:
        outcome = replace(outcome, failing=0, failing_since=None)
    if outcome.last_job_id == run.job_id:
        outcome = replace(outcome, last_status=status)
    state.outcomes[run.schedule_id] = replace(outcome, last_interaction=event.timestamp)


UPSERT_RUN: Final = (
    "INSERT INTO schedule_runs_v1 (job_id, schedule_id, nominal_time, status) "
    "VALUES (%(job_id)s, %(schedule_id)s, %(nominal_time)s, %(status)s) "
    "ON CONFLICT (job_id) DO UPDATE SET status = EXCLUDED.status"
)
OUTCOME_COLUMNS: Final = tuple(OutcomeRow.__dataclass_fields__)
UPSERT_OUTCOME: Final = (
    f"INSERT INTO schedule_outcomes_v1 ({', '.join(OUTCOME_COLUMNS)}) "
    f"VALUES ({', '.join(f'%({c})s' for c in OUTCOME_COLUMNS)}) ON CONFLICT (schedule_id) "
    "DO UPDATE SET " + ", ".join(f"{c} = EXCLUDED.{c}" for c in OUTCOME_COLUMNS[1:])
)
ADD_ENDED: Final = (
    "UPDATE schedule_outcomes_v1 SET completed = completed + %(completed)s, "
    "failed = failed + %(failed)s, aborted = aborted + %(aborted)s "
    "WHERE schedule_id = %(schedule_id)s"
)


class ScheduleRuns(CatchUpProjection):
    """Each run's status; per schedule its last run, ended runs by outcome, failing streak."""

    name = "schedule_runs"
    version = 2  # 2: archived jobs' runs leave
    tables = (RUNS, OUTCOMES)
    keys = {RUNS: ("job_id",), OUTCOMES: ("schedule_id",)}
    events = (Job.JobCreatedBySchedule, *STATUS_AFTER, *ARCHIVED)
    leave_with_job = ((RUNS, "job_id IN ({jobs})"),)
    ddl = """
    CREATE TABLE IF NOT EXISTS schedule_runs_v1 (
        job_id {uuid} PRIMARY KEY,
        schedule_id {uuid} NOT NULL,
        nominal_time {time} NOT NULL,
        status TEXT NOT NULL
    );
    CREATE TABLE IF NOT EXISTS schedule_outcomes_v1 (
        schedule_id {uuid} PRIMARY KEY,
        last_job_id {uuid} NOT NULL,
        last_job_position BIGINT NOT NULL,
        last_status TEXT NOT NULL,
        last_interaction {time} NOT NULL,
        failing INTEGER NOT NULL,
        failing_since {time},
        last_failed_job_id {uuid},
        completed INTEGER NOT NULL DEFAULT 0,
        failed INTEGER NOT NULL DEFAULT 0,
        aborted INTEGER NOT NULL DEFAULT 0
    );
    CREATE INDEX IF NOT EXISTS schedule_outcomes_v1_failing ON schedule_outcomes_v1 (failing)
    """

    def apply(self, cur: Cursor, batch: Batch, sql: Sql, prepared: Any = None) -> None:
        state = self._load(cur, batch, sql)
        loaded_runs, loaded_outcomes = dict(state.runs), dict(state.outcomes)
        for position, event in batch:
            step(state, event, position)
        d = cur.dialect
        runs = [vars(r) for r in state.runs.values() if loaded_runs.get(r.job_id) != r]
        outcomes = [
            vars(o) for o in state.outcomes.values() if loaded_outcomes.get(o.schedule_id) != o
        ]
        ended: dict[UUID, dict[str, Any]] = {}
        for (schedule_id, outcome), n in state.ended.items():
            row = ended.setdefault(
                schedule_id,
                {"schedule_id": schedule_id, "completed": 0, "failed": 0, "aborted": 0},
            )
            row[outcome] += n
        for statement, rows in (
            (UPSERT_RUN, runs),
            (UPSERT_OUTCOME, outcomes),
            (ADD_ENDED, list(ended.values())),
        ):
            if rows:
                cur.executemany(sql(statement), [d.dump_row(r) for r in rows])
        self.forget(cur, sql, archived_in(batch))

    def _load(self, cur: Cursor, batch: Batch, sql: Sql) -> State:
        """The stored rows of the runs the batch moves (not creates), and of their schedules."""
        created = {e.originator_id for _, e in batch if isinstance(e, Job.JobCreatedBySchedule)}
        wanted = {e.originator_id for _, e in batch if type(e) in STATUS_AFTER} - created
        runs = {
            r["job_id"]: RunRow(r["job_id"], r["schedule_id"], r["nominal_time"], r["status"])
            for r in select_in(cur, sql, "SELECT * FROM schedule_runs_v1", "job_id", wanted)
        }
        schedules = {r.schedule_id for r in runs.values()} | {
            e.schedule_id for _, e in batch if isinstance(e, Job.JobCreatedBySchedule)
        }
        rows = select_in(cur, sql, "SELECT * FROM schedule_outcomes_v1", "schedule_id", schedules)
        outcomes = {
            r["schedule_id"]: OutcomeRow(**{c: r[c] for c in OUTCOME_COLUMNS}) for r in rows
        }
        return State(runs, outcomes, Counter())
