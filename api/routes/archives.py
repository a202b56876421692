"""/v1/retention and /v1/archives: how long ended jobs stay in the live log, per job name, and
where an archived job's events are. Operators set periods; readers read them."""

from __future__ import annotations

from typing import Annotated
from uuid import UUID

from fastapi import APIRouter, Depends, Path, Request

from jobnik.api.archive_schemas import (
    ArchiveOut,
    RetentionOut,
    RetentionPolicyOut,
    SetRetention,
)
from jobnik.api.archives import Archiver
from jobnik.api.deps import reject_unknown_query
from jobnik.api.errors import error_answers
from jobnik.api.operator_schemas import MALFORMED
from jobnik.api.permissions import PrincipalDep, authorize, needs
from jobnik.api.schemas import JOB_NAME_MAX, JOB_NAME_MIN
from jobnik.api.segments import SegmentRoute
from jobnik.domain.archives import RetentionCommands
from jobnik.domain.errors import InvalidRetentionPeriod, JobNotFound, TooManyRetentionPeriods
from jobnik.domain.principals import Permission
from jobnik.projections.queries.archives import retention

P = Permission
router = APIRouter(
    prefix="/v1",
    route_class=SegmentRoute,  # a job name may hold "/" (%2F)
    tags=["archives"],
    dependencies=[Depends(authorize), Depends(reject_unknown_query)],
)


async def get_archiver(request: Request) -> Archiver:
    archiver: Archiver = request.app.state.archiver
    return archiver


async def get_retention(request: Request) -> RetentionCommands:
    commands: RetentionCommands = request.app.state.retention
    return commands


ArchiverDep = Annotated[Archiver, Depends(get_archiver)]
RetentionDep = Annotated[RetentionCommands, Depends(get_retention)]
Name = Annotated[
    str, Path(min_length=JOB_NAME_MIN, max_length=JOB_NAME_MAX, description="a job name")
]


def _policy(archiver: Archiver) -> RetentionPolicyOut:
    return RetentionPolicyOut(
        default_seconds=archiver.default_seconds,
        names=[RetentionOut.of(r) for r in retention(archiver.store)],
    )


@router.get("/retention", openapi_extra=needs(P.READ))
def get_retention_policy(archiver: ArchiverDep) -> RetentionPolicyOut:
    """jobnik: the retention policy: the server's default period (JOBNIK_RETENTION_SECONDS;
    absent: ended jobs stay in the live log) and the periods set per job name."""
    return _policy(archiver)


@router.put(
    "/retention/{name}",
    responses=error_answers(MALFORMED, InvalidRetentionPeriod, TooManyRetentionPeriods),
    openapi_extra=needs(P.OPERATE),
)
def set_retention(
    name: Name,
    body: SetRetention,
    archiver: ArchiverDep,
    commands: RetentionDep,
    by: PrincipalDep,
) -> RetentionPolicyOut:
    """jobnik: set how long the jobs of one name stay in the live log once ended (null: the
    default again); recorded as an event naming who set it and why. Answers the policy. At most
    1,000 names have a period of their own (409 TOO_MANY_RETENTION_PERIODS past it)."""
    commands.set_retention(name, body.period_seconds, by=by, reason=body.reason)
    return _policy(archiver)


@router.get(
    "/archives/{jobId}",
    responses=error_answers((JobNotFound, "the job is not archived")),
    openapi_extra=needs(P.READ),
)
def get_archive(archiver: ArchiverDep, job_id: Annotated[UUID, Path(alias="jobId")]) -> ArchiveOut:
    """jobnik: where an archived job's events are: its file in the archive directory, the
    file's checksum, how many events it holds, and who archived it when."""
    found = archiver.record(job_id)
    if found is None:
        raise JobNotFound("the job is not archived")
    return ArchiveOut.of(found)
