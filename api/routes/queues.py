"""GET /v1/queues and GET /v1/stuck: each stage type's queue, and work that is not moving."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request
from starlette.concurrency import run_in_threadpool

from jobnik.api.deps import SettingsDep, reject_unknown_query
from jobnik.api.pages import PageDep
from jobnik.api.permissions import authorize, needs
from jobnik.api.queue_schemas import QueueOut, QueuesOut, StuckListOut, StuckOut
from jobnik.api.routes.limits import LimitViewsDep
from jobnik.api.settings import MAX_STUCK_IDLE_SECONDS, MAX_STUCK_LEASE_EXPIRIES
from jobnik.domain.principals import Permission
from jobnik.projections.queries.operations import OperationsViews, Thresholds

router = APIRouter(
    prefix="/v1",
    tags=["operations"],
    dependencies=[Depends(authorize), Depends(reject_unknown_query)],
)


async def get_operations(request: Request) -> OperationsViews:
    operations: OperationsViews = request.app.state.operations
    return operations


async def get_clock(request: Request) -> Callable[[], datetime]:
    clock: Callable[[], datetime] = request.app.state.clock
    return clock


OperationsDep = Annotated[OperationsViews, Depends(get_operations)]
ClockDep = Annotated[Callable[[], datetime], Depends(get_clock)]


@router.get("/queues", openapi_extra=needs(Permission.READ))
async def get_queues(
    operations: OperationsDep, limits: LimitViewsDep, clock: ClockDep, paging: PageDep
) -> QueuesOut:
    """jobnik: a page (`page`, `page_size`) of the stage types that have tasks, by name, and
    their number (`total`); for each: tasks queued (PENDING or RETRIED), in progress, completed
    and failed; when the oldest task a dequeue could take now was queued and its age in seconds
    (null: none); the last dequeue's time (null: none yet; it may trail the dequeue by the
    catch-up runner's interval); its concurrency limit (`maxInProgress`, null: none) and the
    queued tasks beyond the room it leaves (`heldBack`); of the queued, those waiting for their
    not-before time (`delayed`: a delay or a retry's backoff)."""
    now = clock()
    queues = await run_in_threadpool(operations.queues, now)
    by_type = {v.stage_type: v for v in await run_in_threadpool(limits.all)}
    window = paging.window()
    shown = queues[window.offset : window.offset + paging.page_size]
    items = [QueueOut.of(q, now, by_type.get(q.stage_type)) for q in shown]
    return QueuesOut(total=len(queues), items=items)


@router.get("/stuck", openapi_extra=needs(Permission.READ))
async def get_stuck(
    operations: OperationsDep,
    clock: ClockDep,
    settings: SettingsDep,
    lease_expiries: Annotated[
        int | None,
        Query(
            ge=0,
            le=MAX_STUCK_LEASE_EXPIRIES,
            description="tasks whose lease expired more times than this "
            "(default JOBNIK_STUCK_LEASE_EXPIRIES)",
        ),
    ] = None,
    job_idle_seconds: Annotated[
        float | None,
        Query(
            gt=0,
            le=MAX_STUCK_IDLE_SECONDS,
            description="unfinished jobs with no event for longer "
            "(default JOBNIK_STUCK_JOB_IDLE_SECONDS)",
        ),
    ] = None,
    queue_idle_seconds: Annotated[
        float | None,
        Query(
            gt=0,
            le=MAX_STUCK_IDLE_SECONDS,
            description="stage types whose queued tasks waited, with no "
            "dequeue, for longer (default JOBNIK_STUCK_QUEUE_IDLE_SECONDS)",
        ),
    ] = None,
    schedule_failures: Annotated[
        int | None,
        Query(
            ge=1,
            le=MAX_STUCK_LEASE_EXPIRIES,
            description="schedules whose latest ended runs failed this many times in a row "
            "(default JOBNIK_STUCK_SCHEDULE_FAILURES)",
        ),
    ] = None,
) -> StuckListOut:
    """jobnik: work that is not moving, each item with its kind, the reason in words and since
    when: LEASE_EXPIRED_REPEATEDLY (an unfinished task whose lease expired more than N times;
    since its latest expiry), DELEGATION_NOT_REDISPATCHED (a delegated task whose child jobs all
    ended but which was not queued again), JOB_IDLE (an unfinished job with no event and no task
    in progress for longer than a threshold; since its latest event), QUEUE_NOT_DEQUEUED (a
    stage type whose dequeueable tasks waited longer than a threshold with no dequeue meanwhile),
    SCHEDULE_RUNS_FAILING (a schedule whose latest ended runs failed N times in a row; since
    the first of them, with the last failed run's job). At most 1000 items of each kind, oldest
    first."""
    thresholds = Thresholds(
        settings.stuck_lease_expiries if lease_expiries is None else lease_expiries,
        settings.stuck_job_idle_seconds if job_idle_seconds is None else job_idle_seconds,
        settings.stuck_queue_idle_seconds if queue_idle_seconds is None else queue_idle_seconds,
        settings.stuck_schedule_failures if schedule_failures is None else schedule_failures,
    )
    found = await run_in_threadpool(operations.stuck, thresholds, clock())
    return StuckListOut(items=[StuckOut.of(item) for item in found])
