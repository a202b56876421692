"""Retention and archives: how long ended jobs stay in the live log, and the record of each job
whose events left it for an archive file.

Each change of a job name's retention period is an aggregate of its own (`RetentionChange`): it
is never loaded again, so setting a period needs no read of the previous one, and the read model
keeps the latest change per name (inline/archives.py). An archived job's record (`Archive`, one
per job, its id derived from the job's) is appended in the transaction that removes the job's
events: its inline projection removes the job's rows from the read models, so a rebuild, which
no longer sees the removed events, ends with the same rows. Erasing an archived job's user data
rewrites its archive file and records the new one (`ArchiveErasure`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Final
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
    """The id of job `job_id`'s archive record: one per job, so a second one is refused."""
    return uuid5(_ARCHIVES, str(job_id))


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
class ArchiveFile:
    """A job's archive file, written and synced: where it is and what it holds."""

    job_id: UUID
    name: str
    location: str  # relative to the archive directory
    checksum: str  # "sha256:<hex>" of the file's bytes
    events: int  # the job's events in it (its stages' and tasks' too)
    last_position: int  # the log position of the last of them
    ended_at: datetime


class Archive(Entity):
    """The record of a job whose events left the live log for an archive file."""

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

    @classmethod
    def record(cls, file: ArchiveFile, *, now: datetime, actor: Principal) -> Archive:
        """The record of the archive `file` of its job."""
        return cls._create(
            cls.JobArchived,
            id=archive_id(file.job_id),
            timestamp=now,
            reason=None,
            **cause(actor),
            **asdict(file),
        )


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
