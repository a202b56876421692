"""Archive runs, archive reads and archive checks.

An archive run takes the ended jobs whose retention period has run out (the period set for
their name, else JOBNIK_RETENTION_SECONDS), oldest end first, `batch` at a time. For each it
writes the job's history (every event of the job, its stages and its tasks, each line what
`GET /v1/jobs/{id}/history` answers for it) to its archive file and syncs it; then, in one
transaction, the jobs whose events are still those of their files leave the log and the read
models, and they get one `JobsArchived` record (projections/rebuild/archiving.py). Runs hold the
rebuild lock: a run and a rebuild or verify never overlap (a rebuild starts from the seeds a run
moves). Without an archive directory nothing is archived.

Through a backlog (a batch found as many jobs due as it takes), a run paces itself: after a batch
that took t seconds it waits t * (1 - share) / share before the next (`pause`; `share`:
JOBNIK_ARCHIVE_SHARE), so that it works at most that share of the time and live work keeps the
rest of the machine and of the writer lock.

The space the removed rows held is made reusable (`SqlStore.reclaim_space`: on PostgreSQL a plain
VACUUM of jobnik's tables) after the batch that leaves nothing due, and after every
RECLAIM_EVERY batches while a backlog lasts: outside the rebuild lock and the writer lock, so
live work and the next run go on beside it. Archiving then keeps the database's size flat: the
jobs ended since take the space of the jobs archived.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Final
from uuid import UUID

from pydantic.alias_generators import to_camel

from jobnik.api.pages import render_event
from jobnik.api.settings import Settings
from jobnik.domain.application import Jobnik
from jobnik.domain.archives import ArchiveErasure, ArchiveFile, FireKey, location
from jobnik.domain.errors import ArchiveUnreachable, JobNotFound
from jobnik.domain.jobs import Job
from jobnik.domain.principals import Actor, Principal
from jobnik.projections.catchup.registry import CATCH_UP
from jobnik.projections.catchup.runner import catch_up
from jobnik.projections.queries.archives import Candidate, Record, candidates, record, records
from jobnik.projections.queries.audit import Audit, Entry
from jobnik.projections.rebuild.archiving import commit
from jobnik.projections.rebuild.bluegreen import RebuildBusy, rebuild_lock
from jobnik.projections.store import archive_files
from jobnik.projections.store.base import SqlStore
from jobnik.projections.store.eventlog import USER_DATA

log = logging.getLogger(__name__)

READ_PAGE = 1000  # events per read of a job's history while writing its archive
RECLAIM_EVERY = 10  # batches archived between two reclaims of their space, while a backlog lasts


def _now() -> datetime:
    return datetime.now(UTC)


@dataclass
class Run:
    """What an archive run found due and archived; `busy`: a rebuild or verify held the lock,
    so the run did nothing; `reclaimed`: it made the space of the jobs archived reusable;
    `more`: it found a whole batch due, so more may be; `seconds`: how long it took."""

    due: list[Candidate] = field(default_factory=list)
    archived: list[UUID] = field(default_factory=list)
    busy: bool = False
    reclaimed: bool = False
    more: bool = False
    seconds: float = 0.0


@dataclass(frozen=True)
class Problem:
    """An archive that does not match its record."""

    job_id: UUID
    location: str
    problem: str


class Archiver:
    """Archive runs over `store`, into `directory` (None: archiving is off)."""

    def __init__(
        self,
        store: SqlStore,
        directory: Path | None,
        default_seconds: int | None = None,
        *,
        batch: int = 100,
        clock: Callable[[], datetime] = _now,
        share: float = 1.0,
    ) -> None:
        self.store, self.directory, self.default_seconds = store, directory, default_seconds
        self.batch, self.clock, self.share = batch, clock, share
        self._unreclaimed = 0  # batches archived since the space was last reclaimed

    @classmethod
    def of(cls, store: SqlStore, settings: Settings) -> Archiver:
        """The archiver the settings configure."""
        directory = Path(settings.archive_dir) if settings.archive_dir else None
        return cls(
            store,
            directory,
            settings.retention_seconds,
            batch=settings.archive_batch,
            share=settings.archive_share,
        )

    def due(self) -> list[Candidate]:
        """The jobs the next run would archive (at most `batch`)."""
        return candidates(self.store, self.clock(), self.default_seconds, self.batch)

    def runs(
        self, stop: threading.Event | None = None, *, by: Principal = Actor.SYSTEM
    ) -> Iterator[Run]:
        """Runs, batch after batch, each paced (`pause`), until one archives nothing (or a
        rebuild holds the lock) or `stop` is set."""
        stop = stop or threading.Event()
        while not stop.is_set():
            done = self.run(by=by)
            yield done
            if not done.archived:
                return
            stop.wait(self.pause(done))

    def sweep(self) -> tuple[int, float | None]:
        """One run, as the sweeper's round: the jobs it archived, and the seconds until the next
        run through a backlog (`pause`), or None when nothing more is due."""
        done = self.run()
        return len(done.archived), (self.pause(done) if done.more else None)

    def pause(self, done: Run) -> float:
        """Seconds to wait after the run `done` before the next, through a backlog: the run then
        works `share` of the time (see the module); none once nothing more is due."""
        return done.seconds * (1 - self.share) / self.share if done.more else 0.0

    def run(self, *, dry_run: bool = False, by: Principal = Actor.SYSTEM) -> Run:
        """Archive the jobs due (`dry_run`: only say which); see the module."""
        began = time.monotonic()
        if self.directory is None:
            return Run()
        try:
            with rebuild_lock(self.store):
                catch_up_all(self.store)  # (the jobs due are read from the run statistics)
                due = self.due()
                if dry_run:
                    return Run(due=due)
                written = [self._write(self.directory, c) for c in due]
                archived = commit(self.store, written, self.clock(), by) if written else []
        except RebuildBusy:
            return Run(busy=True)
        for w in written:
            if w.job_id not in archived:  # it changed meanwhile (a rerun): still live
                (self.directory / w.location).unlink(missing_ok=True)
        if archived:
            log.info("jobs archived", extra={"action": "jobs_archived", "jobs": len(archived)})
            self._unreclaimed += 1
        drained = len(due) < self.batch  # (nothing else is due now)
        reclaim = self._unreclaimed > 0 and (drained or self._unreclaimed >= RECLAIM_EVERY)
        if reclaim:
            self._reclaim()
        return Run(
            due=due,
            archived=archived,
            reclaimed=reclaim,
            more=not drained,
            seconds=time.monotonic() - began,
        )

    def _reclaim(self) -> None:
        """The space of the jobs archived since the last reclaim, free for new rows (see the
        module); a failure leaves them counted, for the next run to try again."""
        began = time.perf_counter()
        self.store.reclaim_space()
        log.info(
            "space reclaimed",
            extra={
                "action": "space_reclaimed",
                "batches": self._unreclaimed,
                "seconds": round(time.perf_counter() - began, 3),
            },
        )
        self._unreclaimed = 0

    def _write(self, directory: Path, c: Candidate) -> ArchiveFile:
        seen = {"events": 0, "last": 0}
        fires: list[FireKey] = []

        def lines() -> Iterator[str]:
            for entry in history(Audit(self.store), c.job_id):
                seen["events"] += 1
                seen["last"] = entry.position
                e = entry.event
                if isinstance(e, Job.JobCreatedBySchedule):  # (the record keeps its fire key)
                    fires.append(FireKey(e.schedule_id, e.nominal_time, e.trigger, e.timestamp))
                yield render_event(entry)

        where = location(c.job_id)
        checksum = archive_files.write(directory, where, lines())
        return ArchiveFile(
            job_id=c.job_id,
            name=c.name,
            location=where,
            checksum=checksum,
            events=seen["events"],
            last_position=seen["last"],
            ended_at=c.ended_at,
            fire=fires[0] if fires else None,
        )

    def erase(self, job_id: UUID, *, by: Principal, reason: str) -> None:
        """Erase archived job `job_id`'s user data: its archive is written again, to its own
        file, without them (each event's skeleton kept, as a live job's erasure keeps it), and
        an `ArchiveErased` event (who, why) moves its record to the new file in the transaction
        that drops the idempotency answers naming the job; then the old file goes. A crash
        before the commit leaves the record on the old file (the new one is written again next
        time); after it, a second erasure removes an old file left behind. JobNotFound when it
        has no archive, ArchiveUnreachable when its file cannot be read here."""
        found = self.record(job_id)
        if found is None:
            raise JobNotFound
        if self.directory is None:
            raise _unreachable(found, "no archive directory is configured here")
        new = location(job_id, erased=True)
        checksum = archive_files.write(self.directory, new, erased(self.lines(job_id)))
        erasure = ArchiveErasure.record(
            job_id, new, checksum, now=self.clock(), actor=by, reason=reason
        )
        with self.store.session(write=True) as s:
            s.erase_user_data(job_id)  # (its events left the log: the answers that name it)
            s.save(erasure)
        for old in {found.file.location, location(job_id)} - {new}:
            (self.directory / old).unlink(missing_ok=True)

    # -- reads ---------------------------------------------------------------------------------

    def record(self, job_id: UUID) -> Record | None:
        return record(self.store, job_id)

    def lines(self, job_id: UUID) -> Iterator[str]:
        """Job `job_id`'s archived history, line by line: JobNotFound when it has no archive,
        ArchiveUnreachable (naming where it is) when its file cannot be read here."""
        found = self.record(job_id)
        if found is None:
            raise JobNotFound
        if self.directory is None:
            raise _unreachable(found, "no archive directory is configured here")
        try:
            yield from archive_files.read(self.directory / found.file.location)
        except OSError as exc:
            raise _unreachable(found, exc.strerror or str(exc)) from None

    def page(self, job_id: UUID, after: int, limit: int) -> tuple[list[str], int | None]:
        """A page of the archived history after position `after`: its events and the cursor
        for the next page (None at the end), as `GET /v1/jobs/{id}/history` pages the log."""
        items: list[str] = []
        for line in self.lines(job_id):
            position = int(json.loads(line)["position"])
            if position <= after:
                continue
            items.append(line)
            if len(items) == limit:
                return items, position
        return items, None

    def verify(self) -> Iterator[Problem]:
        """Each archive that does not match its record (missing, another checksum, another
        number of events or last position)."""
        for r in records(self.store):
            f = r.file
            if self.directory is None:
                yield Problem(f.job_id, f.location, "no archive directory is configured")
                continue
            path = self.directory / f.location
            try:
                if archive_files.checksum(path) != f.checksum:
                    yield Problem(f.job_id, f.location, "its checksum differs from the record's")
                    continue
                count, last = 0, 0
                for line in archive_files.read(path):
                    count, last = count + 1, int(json.loads(line)["position"])
            except OSError as exc:
                yield Problem(f.job_id, f.location, f"cannot be read ({exc.strerror or exc})")
                continue
            if (count, last) != (f.events, f.last_position):
                yield Problem(
                    f.job_id,
                    f.location,
                    f"holds {count} events up to position {last}, the record "
                    f"{f.events} up to {f.last_position}",
                )


# An erased event's user data in an archive line (EventOut: camelCase payload fields), as the
# live log's erasure empties them.
ERASED: Final = {to_camel(k): v for k, v in USER_DATA.items()}


def erased(lines: Iterable[str]) -> Iterator[str]:
    """Archive `lines` with every event's user data emptied."""
    for line in lines:
        event = json.loads(line)
        payload = event.get("payload") or {}
        payload.update({k: v for k, v in ERASED.items() if k in payload})
        yield json.dumps(event, ensure_ascii=False, separators=(",", ":"))


def erase_job(
    jobnik: Jobnik, archiver: Archiver, job_id: UUID, *, by: Principal, reason: str
) -> None:
    """Erase an ended job's user data: from the live log and read models, or, once it was
    archived, from its archive (`Archiver.erase`)."""
    try:
        jobnik.erase_job(job_id, by=by, reason=reason)
    except JobNotFound:
        if archiver.record(job_id) is None:
            raise
        archiver.erase(job_id, by=by, reason=reason)


def catch_up_all(store: SqlStore) -> None:
    """Bring every catch-up projection to the log's head (as of now)."""
    for projection in CATCH_UP:
        while catch_up(store, projection):
            pass


def _unreachable(r: Record, why: str) -> ArchiveUnreachable:
    f = r.file
    return ArchiveUnreachable(
        f"job {f.job_id} was archived to {f.location} (checksum {f.checksum}) in the archive "
        f"directory, which cannot be read here: {why}"
    )


def history(audit: Audit, job_id: UUID) -> Iterator[Entry]:
    """Every event of the job's history in the live log, page by page."""
    after = 0
    while True:
        page = audit.job_history(job_id, after, READ_PAGE)
        yield from page.items
        if page.next is None:
            return
        after = page.next
