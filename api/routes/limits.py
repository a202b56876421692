"""/v1/limits: the stage types' concurrency limits, rate limits and queue orders. Operators set,
change and remove them; readers read them, each with its use now."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query, Request

from jobnik.api.deps import reject_unknown_query
from jobnik.api.errors import error_answers
from jobnik.api.limit_schemas import (
    KeyLimitBody,
    KeyRateBody,
    LimitBody,
    LimitOut,
    LimitsOut,
    OrderBody,
    RateBody,
)
from jobnik.api.operator_schemas import MALFORMED, REASON_MAX, REASON_TEXT
from jobnik.api.pages import PageDep
from jobnik.api.permissions import PrincipalDep, authorize, needs
from jobnik.api.schemas import Message
from jobnik.api.segments import SegmentRoute
from jobnik.domain.errors import InvalidLimit, LimitNotFound, TooManyLimits
from jobnik.domain.limit_commands import LimitCommands
from jobnik.domain.limits import STAGE_TYPE_MAX
from jobnik.domain.principals import Permission
from jobnik.projections.queries.limits import LimitViews

P = Permission
router = APIRouter(
    prefix="/v1",
    route_class=SegmentRoute,  # a stage type may hold "/" (%2F)
    tags=["limits"],
    dependencies=[Depends(authorize), Depends(reject_unknown_query)],
)


async def get_limits(request: Request) -> LimitCommands:
    limits: LimitCommands = request.app.state.limits
    return limits


async def get_limit_views(request: Request) -> LimitViews:
    views: LimitViews = request.app.state.limit_views
    return views


LimitsDep = Annotated[LimitCommands, Depends(get_limits)]
LimitViewsDep = Annotated[LimitViews, Depends(get_limit_views)]
# (its bounds documented, refused by the domain as INVALID_LIMIT: one code for every bad limit)
StageTypePath = Annotated[
    str,
    Path(
        alias="stageType",
        description="the stage type",
        json_schema_extra={"minLength": 1, "maxLength": STAGE_TYPE_MAX},
    ),
]
NO_LIMIT = (LimitNotFound, "the stage type has no such limit")
ReasonQuery = Annotated[str | None, Query(max_length=REASON_MAX, description=REASON_TEXT)]


@router.get("/limits", openapi_extra=needs(P.READ))
def list_limits(views: LimitViewsDep, paging: PageDep) -> LimitsOut:
    """jobnik: the stage types with a limit in force, by stage type, a page at a time
    (`{total, items}`), each with its tasks IN_PROGRESS now, its rate's tokens, and the room a
    dequeue has now."""
    offset = (paging.page - 1) * paging.page_size
    total, found = views.page(offset, paging.page_size)
    return LimitsOut(total=total, items=[LimitOut.of(v) for v in found])


@router.get("/limits/{stageType}", responses=error_answers(NO_LIMIT), openapi_extra=needs(P.READ))
def get_limit(views: LimitViewsDep, stage_type: StageTypePath) -> LimitOut:
    """jobnik: the stage type's limits, its tasks IN_PROGRESS now, its rate's tokens, and the
    room a dequeue has now."""
    return LimitOut.of(views.get(stage_type))


@router.put(
    "/limits/{stageType}",
    responses=error_answers(MALFORMED, InvalidLimit, TooManyLimits),
    openapi_extra=needs(P.OPERATE),
)
def set_limit(
    limits: LimitsDep,
    views: LimitViewsDep,
    stage_type: StageTypePath,
    body: LimitBody,
    by: PrincipalDep,
) -> LimitOut:
    """jobnik: at most `maxInProgress` tasks of the stage type IN_PROGRESS at once, across every
    worker and server process, from now on: a dequeue that would exceed it finds nothing of
    this type (404, as when none is queued; other types are not held back), and a batched one
    takes no more than the room left. Tasks already in progress over a lowered limit go on.
    Setting the value it has changes nothing; `reason` is recorded on the event."""
    limits.set(stage_type, body.max_in_progress, by=by, reason=body.reason)
    return LimitOut.of(views.get(stage_type))


@router.delete(
    "/limits/{stageType}",
    responses=error_answers(MALFORMED, NO_LIMIT),
    openapi_extra=needs(P.OPERATE),
)
def remove_limit(
    limits: LimitsDep,
    stage_type: StageTypePath,
    by: PrincipalDep,
    reason: ReasonQuery = None,
) -> Message:
    """jobnik: the stage type's dequeues are held to no number in progress (its rate, if any,
    stays)."""
    limits.remove(stage_type, by=by, reason=reason)
    return Message(code="LIMIT_REMOVED_SUCCESSFULLY")


@router.put(
    "/limits/{stageType}/keys",
    responses=error_answers(MALFORMED, InvalidLimit, TooManyLimits),
    openapi_extra=needs(P.OPERATE),
)
def set_key_limit(
    limits: LimitsDep,
    views: LimitViewsDep,
    stage_type: StageTypePath,
    body: KeyLimitBody,
    by: PrincipalDep,
) -> LimitOut:
    """jobnik: at most `maxInProgress` tasks of the stage type IN_PROGRESS at once per
    concurrency key, across every worker and server process, from now on. A job's key is its
    `concurrencyKey`, or, without one, the job itself: so this is also a limit per job. A
    key's queued tasks beyond its room wait (`perKey.heldBack`) and dequeues take the other
    keys' tasks meanwhile; one ending lets the key's next one through, in the queue's order.
    Setting or removing it works out every queued task of the type once; tasks already in
    progress over a lowered limit go on. Setting the value it has changes nothing; `reason` is
    recorded on the event."""
    limits.set_key_limit(stage_type, body.max_in_progress, by=by, reason=body.reason)
    return LimitOut.of(views.get(stage_type))


@router.delete(
    "/limits/{stageType}/keys",
    responses=error_answers(MALFORMED, NO_LIMIT),
    openapi_extra=needs(P.OPERATE),
)
def remove_key_limit(
    limits: LimitsDep,
    stage_type: StageTypePath,
    by: PrincipalDep,
    reason: ReasonQuery = None,
) -> Message:
    """jobnik: the stage type's keys are held to no number in progress (its other limits, if
    any, stay)."""
    limits.remove_key_limit(stage_type, by=by, reason=reason)
    return Message(code="KEY_LIMIT_REMOVED_SUCCESSFULLY")


@router.put(
    "/limits/{stageType}/keys/rate",
    responses=error_answers(MALFORMED, InvalidLimit, TooManyLimits),
    openapi_extra=needs(P.OPERATE),
)
def set_key_rate(
    limits: LimitsDep,
    views: LimitViewsDep,
    stage_type: StageTypePath,
    body: KeyRateBody,
    by: PrincipalDep,
) -> LimitOut:
    """jobnik: at most `starts` task starts of the stage type per `intervalSeconds` per
    concurrency key (a job's `concurrencyKey`, or else the job itself), across every worker and
    server process: a token bucket of `starts` tokens per key, kept in the database and refilled
    continuously by its clock, each dequeued task taking one of its key's. A key's queued tasks
    beyond its whole tokens wait (`perKey.heldBack`) and dequeues take the other keys' tasks
    meanwhile; a dequeue that finds fewer tasks than it asks for first lets through those of
    the keys whose buckets gained a token since (up to 50 keys). Setting or removing it works
    out every queued task of the type once. Setting the values it has changes nothing;
    `reason` is recorded on the event."""
    limits.set_key_rate(stage_type, body.starts, body.interval_seconds, by=by, reason=body.reason)
    return LimitOut.of(views.get(stage_type))


@router.delete(
    "/limits/{stageType}/keys/rate",
    responses=error_answers(MALFORMED, NO_LIMIT),
    openapi_extra=needs(P.OPERATE),
)
def remove_key_rate(
    limits: LimitsDep,
    stage_type: StageTypePath,
    by: PrincipalDep,
    reason: ReasonQuery = None,
) -> Message:
    """jobnik: the stage type's keys are held to no rate (its other limits, if any, stay)."""
    limits.remove_key_rate(stage_type, by=by, reason=reason)
    return Message(code="KEY_RATE_LIMIT_REMOVED_SUCCESSFULLY")


@router.put(
    "/limits/{stageType}/rate",
    responses=error_answers(MALFORMED, InvalidLimit, TooManyLimits),
    openapi_extra=needs(P.OPERATE),
)
def set_rate(
    limits: LimitsDep,
    views: LimitViewsDep,
    stage_type: StageTypePath,
    body: RateBody,
    by: PrincipalDep,
) -> LimitOut:
    """jobnik: at most `starts` task starts of the stage type per `intervalSeconds`, across every
    worker and server process: a token bucket of `starts` tokens, kept in the database and
    refilled continuously by its clock, each dequeued task taking one. A dequeue that finds no
    whole token finds nothing of this type (404, as when none is queued), a batched one takes
    no more than the tokens. Setting the values it has changes nothing; `reason` is recorded on
    the event."""
    limits.set_rate(stage_type, body.starts, body.interval_seconds, by=by, reason=body.reason)
    return LimitOut.of(views.get(stage_type))


@router.delete(
    "/limits/{stageType}/rate",
    responses=error_answers(MALFORMED, NO_LIMIT),
    openapi_extra=needs(P.OPERATE),
)
def remove_rate(
    limits: LimitsDep,
    stage_type: StageTypePath,
    by: PrincipalDep,
    reason: ReasonQuery = None,
) -> Message:
    """jobnik: the stage type's dequeues are held to no rate (its concurrency limit, if any,
    stays)."""
    limits.remove_rate(stage_type, by=by, reason=reason)
    return Message(code="RATE_LIMIT_REMOVED_SUCCESSFULLY")


@router.put(
    "/limits/{stageType}/order",
    responses=error_answers(MALFORMED, InvalidLimit, TooManyLimits),
    openapi_extra=needs(P.OPERATE),
)
def set_order(
    limits: LimitsDep,
    views: LimitViewsDep,
    stage_type: StageTypePath,
    body: OrderBody,
    by: PrincipalDep,
) -> LimitOut:
    """jobnik: the order the stage type's queued tasks are dequeued in, after job priority:
    `fifo`, first in, first out (the default, as Jobnik's manager), or `fair`, turns between
    the jobs of one priority: each job's tasks take consecutive turns from the head of the
    queue, so a small job queued behind a large one runs alongside it instead of after it. Tasks
    queued before the change keep their turns; `reason` is recorded on the event."""
    limits.set_order(stage_type, body.order, by=by, reason=body.reason)
    return LimitOut.of(views.get(stage_type, in_force=False))  # (fifo alone is not in force)
