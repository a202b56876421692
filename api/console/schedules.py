"""/ui/schedules: the schedules, their next fires and recent runs, with pause, resume and
trigger (each a `/v1` command the page's script sends with a reason, like every console action;
deleting is an operator's)."""

from __future__ import annotations

from typing import Annotated
from uuid import UUID

from fastapi import APIRouter, Depends, Query, Request
from starlette.responses import Response

from jobnik.api.console.render import page
from jobnik.api.permissions import authorize, needs
from jobnik.api.routes.schedules import ScheduleViewsDep
from jobnik.domain.principals import Permission

READ = needs(Permission.READ)
router = APIRouter(prefix="/ui", include_in_schema=False, dependencies=[Depends(authorize)])
PAGE_SIZE = 50
NEXT_FIRES = 5
RECENT_RUNS = 20


@router.get("/schedules", openapi_extra=READ)
def schedules(
    request: Request,
    views: ScheduleViewsDep,
    page_number: Annotated[int, Query(alias="page", ge=1, le=10**9)] = 1,
) -> Response:
    """Every schedule by name, with its next fire, last run and counts."""
    total, found = views.page(None, (page_number - 1) * PAGE_SIZE, PAGE_SIZE)
    pages = max(1, -(-total // PAGE_SIZE))
    return page(
        request, "schedules.html", schedules=found, total=total, page=page_number, pages=pages
    )


@router.get("/schedules/{schedule_id}", openapi_extra=READ)
def schedule(request: Request, views: ScheduleViewsDep, schedule_id: UUID) -> Response:
    """A schedule: its timing and policies, its next fires, its recent runs."""
    found = views.get(schedule_id)
    return page(
        request,
        "schedule.html",
        schedule=found,
        next_fires=found.next_fires(NEXT_FIRES),
        runs=views.runs(schedule_id, None, RECENT_RUNS),
    )
