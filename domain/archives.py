"""Retention and archives: how long ended jobs stay in the live log, and the record of the jobs
whose events left it for archive files.

Each change of a job name's retention period is an aggregate of its own (`RetentionChange`): it
is never loaded again, so setting a period needs no read of the previous one, and the read model
keeps the latest change per name (inline/archives.py). The jobs archived in one transaction get
one record (`ArchiveBatch`: an entry per job, its file's checksum, events and last position),
appended in the transaction that removes their events: its inline projection removes each job's
rows from the read models, so a rebuild, which no longer sees the removed events, ends with the
same rows. Records written one per job (`Archive`) read the same. Erasing an archived job's user
data rewrites its archive file and records the new one (`ArchiveErasure`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final
from uuid import NAMESPACE_URL, UUID, uuid4, uuid5

from jobnik.domain.base import Entity, cause
from jobnik.domain.commands import command
from jobnik.domain.errors import InvalidRetentionPeriod, TooManyRetentionPeriods
from jobnik.domain.ports import Store
from jobnik.domain.principals import Principal

MAX_PERIOD_SECONDS: Final = 100 * 366 * 24 * 3600  # a century: beyond it, keep everything
# The most job names with a retention period of their own: each archive run looks every one up,
# and GET /v1/retention lists them all.
MAX_NAMES: Final = 1000
_ARCHIVES: Final = uuid5(NAMESPACE_URL, "jobnik:archive")


def check_period(seconds: int) -> int:
    """`seconds` if it is a retention period (1 s to a century); else InvalidRetentionPeriod."""
    if not 0 < seconds <= MAX_PERIOD_SECONDS:
        raise InvalidRetentionPeriod(
            f"a retention period is 1 to {MAX_PERIOD_SECONDS} seconds, not {seconds}"
        )
    return seconds


def archive_id(job_id: UUID) -> UUID:
    """The id of job `job_id`'s archive record, when records were one per job."""
    return uuid5(_ARCHIVES, str(job_id))


def location(job_id: UUID, *, erased: bool = False) -> str:
    """Where job `job_id`'s archive is, relative to the archive directory (`erased`: the one
    written again without its user data)."""
    text = str(job_id)
    return f"{text[:2]}/{text}{'.erased' if erased else ''}.ndjson.gz"


class RetentionChange(Entity):
    """An operator's change of one job name's retention period (None: back to the default)."""

    if TYPE_CHECKING:
        name: str
        period_seconds: int | None

    class RetentionSet(Entity.Created):
        name: str
        period_seconds: int | None

        def apply(self, change: RetentionChange) -> None:
            change.name, change.period_seconds = self.name, self.period_seconds

    @classmethod
    def set(
        cls,
        name: str,
        period_seconds: int | None,
        *,
        now: datetime,
        actor: Principal,
        reason: str | None = None,
    ) -> RetentionChange:
        """Jobs named `name` ended more than `period_seconds` ago are archived (None: the
        server's default applies again); a period out of bounds is refused."""
        if period_seconds is not None:
            check_period(period_seconds)
        return cls._create(
            cls.RetentionSet,
            id=uuid4(),
            timestamp=now,
            reason=reason,
            **cause(actor),
            name=name,
            period_seconds=period_seconds,
        )


@dataclass(frozen=True)
class FireKey:
    """The fire key of a schedule's run: the row its creation wrote (inline/schedules.py),
    which stays when the run is archived."""

    schedule_id: UUID
    nominal_time: datetime
    started_by: str
    fired_at: datetime


@dataclass(frozen=True)
class ArchiveFile:
    """A job's archive file, written and synced: where it is and what it holds."""

    job_id: UUID
    name: str
    location: str  # relative to the archive directory
    checksum: str  # "sha256:<hex>" of the file's bytes
    events: int  # the job's events in it (its stages' and tasks' too)
    last_position: int  # the log position of the last of them
    ended_at: datetime
    fire: FireKey | None = None  # a schedule's run: its fire key


def _entry(file: ArchiveFile) -> dict[str, Any]:
    """A job's entry in its batch's record: JSON text and numbers only (no typed envelopes),
    its location left out (the job's id gives it)."""
    entry: dict[str, Any] = {
        "job_id": str(file.job_id),
        "name": file.name,
        "checksum": file.checksum,
        "events": file.events,
        "last_position": file.last_position,
        "ended_at": file.ended_at.isoformat(),
    }
    if file.fire is not None:
        f = file.fire
        entry["fire"] = {
            "schedule_id": str(f.schedule_id),
            "nominal_time": f.nominal_time.isoformat(),
            "started_by": f.started_by,
            "fired_at": f.fired_at.isoformat(),
        }
    return entry


def _file(entry: dict[str, Any]) -> ArchiveFile:
    job_id = UUID(entry["job_id"])
    f = entry.get("fire")
    fire = (
        None
        if f is None
        else FireKey(
            UUID(f["schedule_id"]),
            datetime.fromisoformat(f["nominal_time"]),
            f["started_by"],
            datetime.fromisoformat(f["fired_at"]),
        )
    )
    return ArchiveFile(
        job_id=job_id,
        name=entry["name"],
        location=location(job_id),
        checksum=entry["checksum"],
        events=int(entry["events"]),
        last_position=int(entry["last_position"]),
        ended_at=datetime.fromisoformat(entry["ended_at"]),
        fire=fire,
    )


class Archive(Entity):
    """The record of one job whose events left the live log for an archive file, as records
    were written before they were one per batch (`ArchiveBatch`); still read."""

    if TYPE_CHECKING:
        job_id: UUID

    class JobArchived(Entity.Created):
        job_id: UUID
        name: str
        location: str
        checksum: str
        events: int
        last_position: int
        ended_at: datetime

        def apply(self, archive: Archive) -> None:
            archive.job_id = self.job_id

        @property
        def files(self) -> list[ArchiveFile]:
            """The archived job's file."""
            return [
                ArchiveFile(
                    self.job_id,
                    self.name,
                    self.location,
                    self.checksum,
                    self.events,
                    self.last_position,
                    self.ended_at,
                )
            ]


class ArchiveBatch(Entity):
    """The record of the jobs whose events left the live log in one archive transaction, an
    entry per job: one event's envelope and index entries serve the whole batch."""

    if TYPE_CHECKING:
        jobs: list[dict[str, Any]]

    class JobsArchived(Entity.Created):
        jobs: list[dict[str, Any]]

        def apply(self, batch: ArchiveBatch) -> None:
            batch.jobs = self.jobs

        @property
        def files(self) -> list[ArchiveFile]:
            """The archived jobs' files, in the record's order."""
            return [_file(entry) for entry in self.jobs]

    @classmethod
    def record(
        cls, files: Sequence[ArchiveFile], *, now: datetime, actor: Principal
    ) -> ArchiveBatch:
        """The record of the archive `files` of their jobs."""
        return cls._create(
            cls.JobsArchived,
            id=uuid4(),
            timestamp=now,
            reason=None,
            **cause(actor),
            jobs=[_entry(f) for f in files],
        )


# The events that record archived jobs; each has `files`, one per job it archived.
ARCHIVED: Final = (Archive.JobArchived, ArchiveBatch.JobsArchived)


class ArchiveErasure(Entity):
    """An operator's erasure of an archived job's user data: its archive file was written again
    without them (`location`, `checksum`: the new file's). Never loaded again, as a retention
    change; the archive record follows it (inline/archives.py)."""

    if TYPE_CHECKING:
        job_id: UUID

    class ArchiveErased(Entity.Created):
        job_id: UUID
        location: str
        checksum: str

        def apply(self, erasure: ArchiveErasure) -> None:
            erasure.job_id = self.job_id

    @classmethod
    def record(
        cls,
        job_id: UUID,
        location: str,
        checksum: str,
        *,
        now: datetime,
        actor: Principal,
        reason: str,
    ) -> ArchiveErasure:
        return cls._create(
            cls.ArchiveErased,
            id=uuid4(),
            timestamp=now,
            reason=reason,
            **cause(actor),
            job_id=job_id,
            location=location,
            checksum=checksum,
        )


class RetentionCommands:
    """The operator's retention commands, over the event store `store`."""

    def __init__(self, store: Store, clock: Callable[[], datetime]) -> None:
        self.store, self.clock = store, clock

    @command
    def set_retention(
        self, name: str, period_seconds: int | None, *, by: Principal, reason: str | None = None
    ) -> RetentionChange:
        """Jobs named `name` are archived `period_seconds` after they end (None: after the
        server's default period, or never when it has none)."""
        change = RetentionChange.set(
            name, period_seconds, now=self.clock(), actor=by, reason=reason
        )
        with self.store.session(write=True) as s:
            if period_seconds is not None and s.retention_names_besides(name) >= MAX_NAMES:
                raise TooManyRetentionPeriods(
                    f"{MAX_NAMES} job names have a retention period of their own: remove one "
                    f"before giving '{name}' its own"
                )
            s.save(change)
        return change
