"""The concurrency limits' read model: `concurrency_limits_v1`, one row per stage type whose limit
was ever set (`max_in_progress` NULL once removed). The claim reads it (store/limits.py)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from jobnik.domain.limits import ConcurrencyLimit
from jobnik.projections.inline.ops import Insert, Op, own_row
from jobnik.projections.inline.tables import LIMITS


def _set(e: Any, _: int) -> list[Op]:  # (ConcurrencyLimit.LimitSet: mypy misses `actor`)
    return [
        Insert(
            LIMITS,
            {
                "id": e.originator_id,
                "version": e.originator_version,
                "stage_type": e.stage_type,
                "max_in_progress": e.max_in_progress,
                "updated_by": e.actor,
                "reason": e.reason,
                "creation_time": e.timestamp,
                "update_time": e.timestamp,
            },
        )
    ]


def _changed(e: Any, max_in_progress: int | None) -> list[Op]:
    values = {"max_in_progress": max_in_progress, "updated_by": e.actor, "reason": e.reason}
    return [own_row(LIMITS, e, values)]


LIMIT_PROJECT: Final[Mapping[type, Callable[[Any, int], list[Op]]]] = {
    ConcurrencyLimit.LimitSet: _set,
    ConcurrencyLimit.LimitChanged: lambda e, _: _changed(e, e.max_in_progress),
    ConcurrencyLimit.LimitRemoved: lambda e, _: _changed(e, None),
}


# The room, `n` clamped to 0 .. `x`, in each backend's spelling (`x` written once: each mention
# of it would count the tasks again).
CLAMP: Final = {
    "postgres": "GREATEST(0, LEAST({n}, {x}))",
    "sqlite": "max(0, min({n}, {x}))",
}


def room(n: str, backend: str) -> str:
    """SQL: how many of `n` tasks a claim of stage type `%(v)s` may take: `n` when the type has
    no concurrency limit, else its limit less its tasks IN_PROGRESS (one probe of the
    tasks_v1_type_status index, counting at most about the limit's value), and never below 0."""
    x = (
        "l.max_in_progress - (SELECT count(*) FROM tasks_v1 t "
        "WHERE t.stage_type = %(v)s AND t.status = 'IN_PROGRESS')"
    )
    clamped = CLAMP[backend].format(n=n, x=x)
    return (
        f"COALESCE((SELECT {clamped} FROM {LIMITS} l "
        f"WHERE l.stage_type = %(v)s AND l.max_in_progress IS NOT NULL), {n})"
    )


def within_limit(claim: str, backend: str) -> str:
    """The claim's statement `claim` (… LIMIT n) taking no more than the limit's room."""
    head, _, n = claim.rpartition(" LIMIT ")
    return f"{head} LIMIT {room(n, backend)}"
