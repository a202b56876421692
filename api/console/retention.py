"""/ui/retention: how long ended jobs stay in the live log (the server's default and each job
name's own period, changed from the page with a reason, operators only) and where archived jobs
went (the jobs archived last, and one job's archive record by id)."""

from __future__ import annotations

from typing import Annotated
from uuid import UUID

from fastapi import APIRouter, Depends, Query, Request
from starlette.responses import Response

from jobnik.api.console.render import page
from jobnik.api.permissions import authorize, needs
from jobnik.api.routes.archives import ArchiverDep
from jobnik.domain.principals import Permission
from jobnik.projections.queries.archives import recent, retention

READ = needs(Permission.READ)
router = APIRouter(prefix="/ui", include_in_schema=False, dependencies=[Depends(authorize)])
RECENT = 50  # archives shown a page, the last first
ARCHIVE_PAGES = 20  # pages of archives shown: the 1,000 jobs archived last
NAMES_PAGE = 100  # job names with a period of their own shown a page (at most 1,000 exist)
DAY = 86_400


@router.get("/retention", openapi_extra=READ)
def retention_page(
    request: Request,
    archiver: ArchiverDep,
    job: Annotated[str | None, Query(max_length=64)] = None,
    page_number: Annotated[int, Query(alias="page", ge=1, le=10**9)] = 1,
    archived: Annotated[int, Query(ge=1, le=ARCHIVE_PAGES)] = 1,
) -> Response:
    """The retention policy (the names' own periods a page at a time), the jobs archived last
    (`archived`: which page of them, up to the 1,000 last), and `job`'s archive record if asked."""
    asked, found = (job or "").strip(), None
    problem = None
    if asked:
        try:
            found = archiver.record(UUID(asked))
        except ValueError:
            problem = f"'{asked}' is not a job id (a UUID)."
        else:
            problem = None if found else f"Job {asked} is not archived."
    names = retention(archiver.store)
    pages = max(1, -(-len(names) // NAMES_PAGE))
    start = (page_number - 1) * NAMES_PAGE
    skipped = (archived - 1) * RECENT
    archives = recent(archiver.store, RECENT + 1, skipped)
    return page(
        request,
        "retention.html",
        default_seconds=archiver.default_seconds,
        directory=archiver.directory,
        names=names[start : start + NAMES_PAGE],
        total=len(names),
        page=page_number,
        pages=pages,
        archives=archives[:RECENT],
        archived=archived,
        skipped=skipped,
        older=len(archives) > RECENT and archived < ARCHIVE_PAGES,
        asked=asked,
        found=found,
        problem=problem,
        day=DAY,
    )
