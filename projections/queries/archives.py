"""Reading the retention settings and the archive records: the jobs due for archiving, and
where each archived job's events are."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, Final
from uuid import UUID

from jobnik.domain.archives import ArchiveFile, location
from jobnik.domain.statuses import JOB_FINAL
from jobnik.projections.inline.tables import ARCHIVES
from jobnik.projections.store.base import SqlStore
from jobnik.projections.store.cursor import Cursor

FINAL: Final = tuple(sorted(str(s) for s in JOB_FINAL))


@dataclass(frozen=True)
class Candidate:
    """An ended job (deleted ones too) whose retention period has run out."""

    job_id: UUID
    name: str
    ended_at: datetime


@dataclass(frozen=True)
class Record:
    """An archived job: its archive file, and who archived it when."""

    file: ArchiveFile
    archived_by: str
    archived_at: datetime


@dataclass(frozen=True)
class Retention:
    """A job name's retention period, as an operator set it."""

    name: str
    period_seconds: int
    set_by: str
    set_time: datetime


def periods(cur: Cursor) -> list[Retention]:
    """The retention periods set per job name, by name."""
    return [
        Retention(r["name"], int(r["period_seconds"]), r["set_by"], r["set_time"])
        for r in cur.all("SELECT * FROM retention_v1 ORDER BY name")
    ]


def candidates(
    store: SqlStore, now: datetime, default_seconds: int | None, limit: int
) -> list[Candidate]:
    """Up to `limit` jobs, oldest end first, that ended (COMPLETED, FAILED or ABORTED; deleted
    or not) more than their name's retention period before `now` and are not archived: the
    period set for the name, else `default_seconds` (None: such jobs are kept). A child job
    whose parent job has not ended is not due."""
    with store.cursor(write=False) as cur:
        overrides = periods(cur)
        found = [
            c
            for o in overrides
            for c in _ended(cur, now - timedelta(seconds=o.period_seconds), limit, name=o.name)
        ]
        if default_seconds is not None:
            cutoff = now - timedelta(seconds=default_seconds)
            found += _ended(cur, cutoff, limit, besides=[o.name for o in overrides])
    return sorted(found, key=lambda c: (c.ended_at, str(c.job_id)))[:limit]


def _ended(
    cur: Cursor,
    before: datetime,
    limit: int,
    *,
    name: str | None = None,
    besides: Sequence[str] = (),
) -> list[Candidate]:
    d, p = cur.dialect, cur.dialect.param
    status, params = d.one_of("j.status", "s", FINAL)
    where = [status, "j.end_time IS NOT NULL", f"j.end_time < {p('before')}"]
    params["before"] = d.dump("end_time", before)
    if name is not None:
        where.append(f"j.name = {p('name')}")
        params["name"] = name
    if besides:
        kept, names = d.one_of("j.name", "n", besides)
        where.append(f"NOT {kept}")
        params.update(names)
    # A child job waits for its parent job to end: a delegated task queued again reads its
    # children's outcomes (GET /v1/tasks/{taskId}/children), and a running job may delegate.
    parent_ended, ended = d.one_of("p.status", "p", FINAL)
    params.update(ended)
    rows = cur.all(
        "SELECT j.job_id, j.name, j.end_time FROM run_stats_v1_jobs j "
        f"WHERE {' AND '.join(where)} AND NOT EXISTS "
        f"(SELECT 1 FROM {ARCHIVES} a WHERE a.job_id = j.job_id) AND NOT EXISTS "
        "(SELECT 1 FROM jobs_v1 c JOIN jobs_v1 p ON p.id = c.parent_job_id "
        f"WHERE c.id = j.job_id AND NOT {parent_ended}) "
        f"ORDER BY j.end_time LIMIT {int(limit)}",
        params,
    )
    return [Candidate(r["job_id"], r["name"], r["end_time"]) for r in rows]


def location_in(cur: Cursor, job_id: UUID) -> str | None:
    """Where job `job_id`'s archive is, read in `cur`'s transaction; None when it is not
    archived."""
    row = cur.one(
        f"SELECT job_id, location FROM {ARCHIVES} WHERE job_id = {cur.dialect.param('j')}",
        {"j": cur.dialect.dump("job_id", job_id)},
    )
    return None if row is None else row["location"] or location(job_id)


class _Records:
    """Archive rows made whole from the records they name, each record read and decoded once
    for a run of rows that share it (rows read in record order)."""

    def __init__(self, store: SqlStore, cur: Cursor) -> None:
        self.store, self.cur = store, cur
        self.position = 0  # the last record read, and its jobs' files
        self.files: dict[UUID, ArchiveFile] = {}
        self.by, self.at = "", datetime.min

    def __call__(self, row: dict[str, Any]) -> Record:
        position = int(row["position"])
        if position != self.position:
            [stored] = self.store.events_after(self.cur, position - 1, 1, stop=position)
            event: Any = self.store.decode(stored)  # (one of ARCHIVED)
            self.files = {f.job_id: f for f in event.files}
            self.position, self.by, self.at = position, event.actor, event.timestamp
        file = self.files[row["job_id"]]
        if row["location"] is not None:  # (erased: written again, to a file of its own)
            file = replace(file, location=row["location"], checksum=row["checksum"])
        return Record(file, self.by, self.at)


def record(store: SqlStore, job_id: UUID) -> Record | None:
    """Job `job_id`'s archive record; None when it is not archived."""
    with store.cursor(write=False) as cur:
        row = cur.one(
            f"SELECT * FROM {ARCHIVES} WHERE job_id = {cur.dialect.param('j')}",
            {"j": cur.dialect.dump("job_id", job_id)},
        )
        return _Records(store, cur)(row) if row is not None else None


def recent(store: SqlStore, limit: int, skip: int = 0) -> list[Record]:
    """The `limit` jobs archived last after the `skip` archived later still, the last first (a
    probe of archives_v2_position; callers cap `skip`)."""
    with store.cursor(write=False) as cur:
        rows = cur.all(
            f"SELECT * FROM {ARCHIVES} ORDER BY position DESC, job_id DESC "
            f"LIMIT {int(limit)} OFFSET {int(skip)}"
        )
        return list(map(_Records(store, cur), rows))


def records(store: SqlStore, page: int = 500) -> Iterator[Record]:
    """Every archive record, by its log position and job id; read page by page."""
    after: tuple[int, UUID] | None = None
    while True:
        with store.cursor(write=False) as cur:
            d, p = cur.dialect, cur.dialect.param
            where = (
                ""
                if after is None
                else (f"WHERE position > {p('r')} OR (position = {p('r')} AND job_id > {p('j')})")
            )
            params = {} if after is None else {"r": after[0], "j": d.dump("job_id", after[1])}
            rows = cur.all(
                f"SELECT * FROM {ARCHIVES} {where} ORDER BY position, job_id LIMIT {int(page)}",
                params,
            )
            found = list(map(_Records(store, cur), rows))
        yield from found
        if len(rows) < page:
            return
        after = (int(rows[-1]["position"]), rows[-1]["job_id"])


def retention(store: SqlStore) -> list[Retention]:
    """The retention periods set per job name."""
    with store.cursor(write=False) as cur:
        return periods(cur)
