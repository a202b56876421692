"""/ui: the console's pages. Each reads through the `/v1` routes' query objects and renders a
template; every change a page offers is a `/v1` command its script sends (static/console.js)."""

from __future__ import annotations

from typing import Annotated
from urllib.parse import parse_qs
from uuid import UUID

from fastapi import APIRouter, Depends, Query, Request
from starlette.responses import RedirectResponse, Response

from jobnik.api.access import Access
from jobnik.api.console import pages
from jobnik.api.console.filters import JobFilters
from jobnik.api.console.render import page
from jobnik.api.console.search import search as find
from jobnik.api.cookies import clear_token_cookie, same_origin, set_token_cookie
from jobnik.api.deps import AuditDep, ViewsDep
from jobnik.api.limit_schemas import LimitOut
from jobnik.api.permissions import authorize, needs
from jobnik.api.routes.activity import ActivityDep, NowDep
from jobnik.api.routes.archives import ArchiverDep
from jobnik.api.routes.catchup import CatchUpDep
from jobnik.domain.errors import Forbidden, InvalidRequest, JobNotFound, Unauthenticated
from jobnik.domain.limits import MAX_LIMITED_TYPES
from jobnik.domain.principals import Permission
from jobnik.projections.queries.lookup import Lookup
from jobnik.projections.queries.timetravel import AsOf

READ = needs(Permission.READ)
LIMITS = 100  # stage types' limits shown a page (at most MAX_LIMITED_TYPES have any)
LIMIT_PAGES = -(-MAX_LIMITED_TYPES // LIMITS)
router = APIRouter(prefix="/ui", include_in_schema=False, dependencies=[Depends(authorize)])
entry = APIRouter(prefix="/ui", include_in_schema=False)  # public: signing in and out
Page = Annotated[int, Query(ge=1, le=10**9)]


@router.get("", openapi_extra=READ)
def home() -> Response:
    return RedirectResponse("/ui/jobs", status_code=303)


@router.get("/jobs", openapi_extra=READ)
def jobs(request: Request, views: ViewsDep, audit: AuditDep) -> Response:
    """Jobs, newest first, filtered; counts per status; live over the global event stream."""
    filters = JobFilters.parse(request.query_params)
    return page(request, "jobs.html", **pages.jobs_page(views, audit, filters))


@router.get("/jobs/{job_id}", openapi_extra=READ)
def job(
    request: Request,
    views: ViewsDep,
    audit: AuditDep,
    catchup: CatchUpDep,
    activity: ActivityDep,
    now: NowDep,
    archiver: ArchiverDep,
    job_id: UUID,
    stage: UUID | None = None,
    task: UUID | None = None,
    page_number: Annotated[int, Query(alias="page", ge=1, le=10**9)] = 1,
    as_of: Annotated[str | None, Query(max_length=64)] = None,
) -> Response:
    """A job; as it was at an event with `as_of` (a log position or a time); `stage`: the
    stage whose tasks it shows; `task`: that task alone. An archived job: its archive record
    on the retention page."""
    at = AsOf.parse(as_of) if as_of else None
    try:
        context = pages.job_page(
            views, audit, catchup, activity, job_id, stage, page_number, at, now, task
        )
    except JobNotFound:
        if archiver.record(job_id) is None:
            raise
        return RedirectResponse(f"/ui/retention?job={job_id}", status_code=303)
    return page(request, "job.html", **context)


@router.get("/jobs/{job_id}/history", openapi_extra=READ)
def history(
    request: Request,
    views: ViewsDep,
    audit: AuditDep,
    archiver: ArchiverDep,
    job_id: UUID,
    after: Page | None = None,
) -> Response:
    """The job's events, oldest first, a hundred a page. An archived job: its archive record on
    the retention page (which links its history read from the archive)."""
    try:
        context = pages.history_page(audit, views, job_id, after or 0)
    except JobNotFound:
        if archiver.record(job_id) is None:
            raise
        return RedirectResponse(f"/ui/retention?job={job_id}", status_code=303)
    return page(request, "history.html", **context)


@router.get("/queues", openapi_extra=READ)
def queues(
    request: Request,
    activity: ActivityDep,
    now: NowDep,
    page_number: Annotated[int, Query(alias="page", ge=1, le=10**9)] = 1,
    limits_page: Annotated[int, Query(alias="limits", ge=1, le=LIMIT_PAGES)] = 1,
) -> Response:
    """Each stage type's last hour charted (the activity projection); the stage types' limits
    and queue orders (`limits`: which page of them), changed from the page by operators; queues
    per stage type and stuck work, polled by the page's script from `/v1`."""
    context = pages.queues_page(activity, now, page_number)
    total, limits = request.app.state.limit_views.page((limits_page - 1) * LIMITS, LIMITS)
    page_size = request.app.state.settings.max_page_size
    return page(
        request,
        "queues.html",
        page_size=page_size,
        limits=[LimitOut.of(v) for v in limits],
        limits_paged=pages.Paged(limits_page, total, LIMITS),
        **context,
    )


@router.get("/search", openapi_extra=READ)
def search(
    request: Request,
    views: ViewsDep,
    audit: AuditDep,
    archiver: ArchiverDep,
    id: Annotated[str, Query(max_length=200)] = "",
) -> Response:
    """A job, stage or task by its id or its first digits: its page, else the matches."""
    answer = find(Lookup(views.store), audit, id, lambda j: archiver.record(j) is not None)
    if answer.go is not None:
        return RedirectResponse(answer.go, status_code=303)
    return page(
        request,
        "search.html",
        answer.status,
        query=answer.query,
        found=answer.found,
        error=answer.error,
        deleted_job=answer.deleted_job,
    )


def _access(request: Request) -> Access:
    access: Access = request.app.state.access
    return access


def _next(target: str | None) -> str:
    """Where to go after signing in: a console page, never another site."""
    if target and target.startswith("/ui/") and not target.startswith("//"):
        return target
    return "/ui/jobs"


@entry.get("/login")
def login_form(request: Request, expired: bool = False, next: str | None = None) -> Response:
    enforced = _access(request).enforced()
    return page(request, "login.html", enforced=enforced, expired=expired, next=_next(next))


@entry.post("/login")
async def login(request: Request) -> Response:
    """Check the token, then keep it in the console's cookie (api/cookies.py)."""
    if not same_origin(request.scope, dict(request.scope["headers"])):
        raise Forbidden("sign in from this server's login page")
    form = parse_qs((await request.body()).decode("utf-8", "replace"))
    token = (form.get("token") or [""])[0].strip()
    target = _next((form.get("next") or [""])[0])
    access = _access(request)
    if not access.enforced():
        return RedirectResponse(target, status_code=303)
    if not token:
        raise InvalidRequest("request/body must have required property 'token'")
    try:
        access.authenticate(f"Bearer {token}")
    except Unauthenticated as exc:
        return page(request, "login.html", 401, enforced=True, error=exc.message, next=target)
    response = RedirectResponse(target, status_code=303)
    set_token_cookie(response, token, secure=request.url.scheme == "https")
    return response


@entry.post("/logout")
def logout(request: Request) -> Response:
    if not same_origin(request.scope, dict(request.scope["headers"])):
        raise Forbidden("sign out from this server's pages")
    response = RedirectResponse("/ui/login", status_code=303)
    clear_token_cookie(response, secure=request.url.scheme == "https")
    return response
