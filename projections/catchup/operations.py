"""What a queue operator watches, folded from the log: per stage type the dequeues, expired
leases, retries and failures by cause and the last dequeue's time; events appended by type; each
job's latest event (to find idle jobs); the tasks whose lease expired, and how often.

Tables, all small beside the tasks (one row per stage type, event type, stage, job, or task whose
lease ever expired):
- operations_v1_types: counters per stage type and `last_dequeue_at`;
- operations_v1_events: events appended per event class (`TaskDequeued`, ...);
- operations_v1_stages: each stage's job and type (task events name their stage, not its type);
- operations_v1_jobs: `open` (not COMPLETED, FAILED, ABORTED or deleted) and `last_event_at`,
  the time of the latest event of the job, of its stages or of its tasks that names a stage or
  job (heartbeats name neither, and do not count);
- operations_v1_leases: per task, how many of its leases expired (`TaskRetried` or `TaskFailed`
  with cause timeout) and when the latest did.

An archived job's stages, job and leases rows leave on its archive record (no event of it comes
again; the totals keep what it added), which is not counted among the events appended.

Times are event times and the later of two wins, so a batch's changes commute and a replay from
scratch writes the same rows however the events fall into batches: the catch-up runner applies
each batch (`Operations.apply`); a rebuild keeps the totals per stage type and per event type in
memory over its pass (`Totals`), which lets processes replaying different jobs share the tables.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Callable
from datetime import datetime
from typing import Any, Final
from uuid import UUID

from jobnik.domain.archives import ARCHIVED
from jobnik.projections.catchup.operation_changes import ALL_EVENTS, COUNTERS, Changes, fold, later
from jobnik.projections.catchup.projection import (
    Batch,
    CatchUpProjection,
    Replay,
    Rows,
    Sql,
    runner,
)
from jobnik.projections.store.cursor import Cursor

TYPES, EVENTS, STAGES, JOBS, LEASES, FAILURES = (
    "operations_v1_types",
    "operations_v1_events",
    "operations_v1_stages",
    "operations_v1_jobs",
    "operations_v1_leases",
    "operations_v1_failures",
)
INSERT_STAGE: Final = (
    "INSERT INTO operations_v1_stages (stage_id, job_id, stage_type) "
    "VALUES (%(stage_id)s, %(job_id)s, %(stage_type)s)"
)
INSERT_TYPE: Final = (
    "INSERT INTO operations_v1_types (stage_type) VALUES (%(stage_type)s) "
    "ON CONFLICT (stage_type) DO NOTHING"
)
STAGE_TYPE: Final = "(SELECT stage_type FROM operations_v1_stages WHERE stage_id = %(stage_id)s)"
STAGE_JOB: Final = "(SELECT job_id FROM operations_v1_stages WHERE stage_id = %(stage_id)s)"
# Counters added, and the later of two last dequeues (`t`: none when NULL).
ADD_TOTALS: Final = (
    "UPDATE operations_v1_types SET "
    + ", ".join(f"{c} = {c} + %({c})s" for c in COUNTERS)
    + ", last_dequeue_at = CASE WHEN last_dequeue_at IS NULL OR last_dequeue_at < %(t)s "
    "THEN COALESCE(%(t)s, last_dequeue_at) ELSE last_dequeue_at END WHERE stage_type = {type}"
)
ADD_STAGE_TOTALS: Final = ADD_TOTALS.format(type=STAGE_TYPE)
ADD_EVENTS: Final = (
    "INSERT INTO operations_v1_events (event_type, appended) VALUES (%(event_type)s, %(n)s) "
    "ON CONFLICT (event_type) DO UPDATE "
    "SET appended = operations_v1_events.appended + EXCLUDED.appended"
)
ADD_FAILURES: Final = (
    "INSERT INTO operations_v1_failures (subject, cause, n) VALUES (%(subject)s, %(cause)s, %(n)s) "
    "ON CONFLICT (subject, cause) DO UPDATE SET n = operations_v1_failures.n + EXCLUDED.n"
)
INSERT_JOB: Final = (
    "INSERT INTO operations_v1_jobs (job_id, open, last_event_at) "
    "VALUES (%(job_id)s, %(open)s, %(last_event_at)s)"
)
SET_JOB_OPEN: Final = "UPDATE operations_v1_jobs SET open = %(open)s WHERE job_id = %(job_id)s"
SET_JOB_SEEN: Final = (
    "UPDATE operations_v1_jobs SET last_event_at = %(t)s WHERE job_id = {job} "
    "AND last_event_at < %(t)s"
)
ADD_LEASES: Final = (
    "INSERT INTO operations_v1_leases (task_id, stage_id, expiries, last_expired_at) "
    "VALUES (%(task_id)s, %(stage_id)s, %(expiries)s, %(last_expired_at)s) "
    "ON CONFLICT (task_id) DO UPDATE SET "
    "expiries = operations_v1_leases.expiries + EXCLUDED.expiries, "
    "last_expired_at = EXCLUDED.last_expired_at"
)


class Operations(CatchUpProjection):
    """Counters and times per stage type, events by type, jobs' latest events, expired leases."""

    name = "operations"
    version = 3  # 2: failed_expired, jobs and stages failed by cause; 3: archived jobs leave
    tables = (TYPES, EVENTS, STAGES, JOBS, LEASES, FAILURES)
    keys = {
        TYPES: ("stage_type",),
        EVENTS: ("event_type",),
        STAGES: ("stage_id",),
        JOBS: ("job_id",),
        LEASES: ("task_id",),
        FAILURES: ("subject", "cause"),
    }
    events = (*ALL_EVENTS, *ARCHIVED)
    leave_with_job = (
        (LEASES, f"stage_id IN (SELECT stage_id FROM {STAGES} WHERE job_id IN ({{jobs}}))"),
        (STAGES, "job_id IN ({jobs})"),
        (JOBS, "job_id IN ({jobs})"),
    )
    per_job = True  # rows of one job, stage or task; totals shared between jobs: `Totals`
    ddl = f"""
    CREATE TABLE IF NOT EXISTS operations_v1_types (
        stage_type TEXT PRIMARY KEY,
        {" ".join(f"{c} BIGINT NOT NULL DEFAULT 0," for c in COUNTERS)}
        last_dequeue_at {{time}}
    );
    CREATE TABLE IF NOT EXISTS operations_v1_events (
        event_type TEXT PRIMARY KEY,
        appended BIGINT NOT NULL
    );
    CREATE TABLE IF NOT EXISTS operations_v1_stages (
        stage_id {{uuid}} PRIMARY KEY,
        job_id {{uuid}} NOT NULL,
        stage_type TEXT NOT NULL
    );
    CREATE INDEX IF NOT EXISTS operations_v1_stages_job ON operations_v1_stages (job_id);
    CREATE TABLE IF NOT EXISTS operations_v1_jobs (
        job_id {{uuid}} PRIMARY KEY,
        open {{bool}} NOT NULL,
        last_event_at {{time}} NOT NULL
    );
    CREATE INDEX IF NOT EXISTS operations_v1_jobs_idle ON operations_v1_jobs (last_event_at)
        WHERE open;
    CREATE TABLE IF NOT EXISTS operations_v1_leases (
        task_id {{uuid}} PRIMARY KEY,
        stage_id {{uuid}} NOT NULL,
        expiries INTEGER NOT NULL,
        last_expired_at {{time}} NOT NULL
    );
    CREATE INDEX IF NOT EXISTS operations_v1_leases_stage ON operations_v1_leases (stage_id);
    CREATE TABLE IF NOT EXISTS operations_v1_failures (
        subject TEXT NOT NULL,
        cause TEXT NOT NULL,
        n BIGINT NOT NULL,
        PRIMARY KEY (subject, cause)
    )
    """

    def prepare(self, batch: Batch) -> Changes:
        return fold(batch)

    def apply(self, cur: Cursor, batch: Batch, sql: Sql, prepared: Any = None) -> None:
        c = prepared if isinstance(prepared, Changes) else fold(batch)
        run = runner(cur, sql)
        for statement, rows in (*_own(c), *_totals(c)):
            run(statement, rows)
        self.forget(cur, sql, c.archived)

    def replay(self, sql: Sql) -> Replay:
        return Totals(sql, self)


def _own(c: Changes) -> list[tuple[str, Rows]]:
    """The statements (and their rows) of the rows of the batch's own jobs, stages and tasks,
    and of the stage types it adds."""
    new_types = sorted({s["stage_type"] for s in c.new_stages.values()})
    return [
        (INSERT_STAGE, list(c.new_stages.values())),
        (INSERT_TYPE, [{"stage_type": t} for t in new_types]),
        (
            INSERT_JOB,
            [
                {**row, "open": c.job_open.get(j, True), "last_event_at": c.job_seen[j]}
                for j, row in c.new_jobs.items()
            ],
        ),
        (
            SET_JOB_OPEN,
            [{"job_id": j, "open": o} for j, o in c.job_open.items() if j not in c.new_jobs],
        ),
        (
            SET_JOB_SEEN.format(job="%(job_id)s"),
            [{"job_id": j, "t": t} for j, t in c.job_seen.items() if j not in c.new_jobs],
        ),
        (
            SET_JOB_SEEN.format(job=STAGE_JOB),
            [{"stage_id": s, "t": t} for s, t in c.stage_seen.items()],
        ),
        (ADD_LEASES, list(c.leases.values())),
    ]


def _totals(c: Changes) -> list[tuple[str, Rows]]:
    """The statements (and their rows) adding the batch to the totals shared between jobs: per
    stage type (found through each stage's row) and per event type."""
    return [
        (  # (a stage dequeued from has a counter: its dequeues)
            ADD_STAGE_TOTALS,
            [
                {"stage_id": s, "t": c.dequeued_at.get(s), **{k: n.get(k, 0) for k in COUNTERS}}
                for s, n in c.counters.items()
            ],
        ),
        (ADD_EVENTS, [{"event_type": k, "n": n} for k, n in sorted(c.events.items())]),
        (ADD_FAILURES, _failure_rows(c.failures)),
    ]


def _failure_rows(failures: Counter[tuple[str, str]]) -> Rows:
    return [{"subject": s, "cause": c, "n": n} for (s, c), n in sorted(failures.items())]


ADD_TYPE_TOTALS: Final = ADD_TOTALS.format(type="%(stage_type)s")
TYPE_OF_STAGE: Final = "SELECT stage_type FROM operations_v1_stages WHERE stage_id = %(stage_id)s"
KNOWN_STAGES: Final = 20_000  # stage types remembered by stage id (the latest stages added)


class Totals:
    """A rebuild pass's replay (`CatchUpProjection.replay`): each page's rows of its own jobs,
    stages and tasks as `apply` writes them; the totals per stage type and per event type added
    up in memory over the pass and added to their rows when it ends, each row once, in key
    order (stage types, then event types).

    So the rows shared between jobs take one short transaction per pass, and processes that
    replay different jobs into the same tables (rebuild/parallel.py) neither wait for each other
    page after page nor lock those rows in different orders. A stage's type comes from its
    `StageAdded` (of the same job: seen by the same pass, which remembers the latest ones),
    else from its row."""

    def __init__(self, sql: Sql, projection: CatchUpProjection) -> None:
        self.sql, self.projection = sql, projection
        self.counters: dict[str, Counter[str]] = {}  # by stage type
        self.dequeued_at: dict[str, datetime] = {}  # by stage type
        self.events: Counter[str] = Counter()
        self.failures: Counter[tuple[str, str]] = Counter()
        self.types: OrderedDict[UUID, str] = OrderedDict()  # stage id → type, latest added

    def __call__(self, cur: Cursor, batch: Batch, prepared: Any) -> None:
        run = runner(cur, self.sql)
        if not batch:
            self._write(run)
            return
        c = prepared if isinstance(prepared, Changes) else fold(batch)
        for statement, rows in _own(c):
            run(statement, rows)
        self.types.update((s, row["stage_type"]) for s, row in c.new_stages.items())
        while len(self.types) > KNOWN_STAGES:
            self.types.popitem(last=False)
        self.events.update(c.events)
        self.failures.update(c.failures)
        for stage, counts in c.counters.items():
            t = self._type(cur, stage)
            if t is not None:  # (no stage row: the statement by stage id changes nothing)
                self.counters.setdefault(t, Counter()).update(counts)
        for stage, at in c.dequeued_at.items():
            t = self._type(cur, stage)
            if t is not None:
                self.dequeued_at[t] = later(self.dequeued_at.get(t), at)
        self.projection.forget(cur, self.sql, c.archived)

    def _type(self, cur: Cursor, stage_id: UUID) -> str | None:
        t = self.types.get(stage_id)
        if t is None:
            row = cur.one(self.sql(TYPE_OF_STAGE), cur.dialect.dump_row({"stage_id": stage_id}))
            if row is not None:
                t = self.types[stage_id] = row["stage_type"]
        return t

    def _write(self, run: Callable[[str, Rows], None]) -> None:
        run(
            ADD_TYPE_TOTALS,
            [
                {"stage_type": t, "t": self.dequeued_at.get(t), **{k: n[k] for k in COUNTERS}}
                for t, n in sorted(self.counters.items())
            ],
        )
        run(ADD_EVENTS, [{"event_type": k, "n": n} for k, n in sorted(self.events.items())])
        run(ADD_FAILURES, _failure_rows(self.failures))
        self.counters, self.dequeued_at, self.events, self.failures = {}, {}, Counter(), Counter()
