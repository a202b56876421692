"""The stage types' limits read model: `stage_type_limits_v1`, one row per stage type whose limits
were ever set (`max_in_progress`, `rate_starts` NULL when not set, or removed; `queue_order`).
The claim reads it: `room`, the most tasks a claim may take."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from jobnik.domain.limits import StageTypeLimits
from jobnik.domain.turns import FIFO
from jobnik.projections.inline.ops import Gate, Insert, Op, own_row
from jobnik.projections.inline.tables import LIMITS

L = StageTypeLimits


def _created(e: Any, _: int) -> list[Op]:  # (LimitsCreated: mypy misses `actor`)
    return [
        Insert(
            LIMITS,
            {
                "id": e.originator_id,
                "version": e.originator_version,
                "stage_type": e.stage_type,
                "max_in_progress": None,
                "rate_starts": None,
                "rate_interval_seconds": None,
                "queue_order": FIFO,
                "max_in_progress_per_key": None,
                "updated_by": e.actor,
                "reason": e.reason,
                "creation_time": e.timestamp,
                "update_time": e.timestamp,
            },
        )
    ]


def _changed(e: Any, **values: Any) -> list[Op]:
    return [own_row(LIMITS, e, {**values, "updated_by": e.actor, "reason": e.reason})]


LIMIT_PROJECT: Final[Mapping[type, Callable[[Any, int], list[Op]]]] = {
    L.LimitsCreated: _created,
    L.ConcurrencyLimitSet: lambda e, _: _changed(e, max_in_progress=e.max_in_progress),
    L.ConcurrencyLimitRemoved: lambda e, _: _changed(e, max_in_progress=None),
    L.RateLimitSet: lambda e, _: _changed(
        e, rate_starts=e.starts, rate_interval_seconds=e.interval_seconds
    ),
    L.RateLimitRemoved: lambda e, _: _changed(e, rate_starts=None, rate_interval_seconds=None),
    L.QueueOrderSet: lambda e, _: _changed(e, queue_order=e.order),
    L.KeyLimitSet: lambda e, _: [
        *_changed(e, max_in_progress_per_key=e.max_in_progress),
        Gate({"stage_type": e.stage_type}),
    ],
    L.KeyLimitRemoved: lambda e, _: [
        *_changed(e, max_in_progress_per_key=None),
        Gate({"stage_type": e.stage_type}),
    ],
}


# A limits row `l` with something in force (domain/limits.py: StageTypeLimits.in_force): these
# are the types GET /v1/limits lists, and at most MAX_LIMITED_TYPES of them.
IN_FORCE: Final = (
    f"(l.max_in_progress IS NOT NULL OR l.rate_starts IS NOT NULL OR l.queue_order <> '{FIFO}' "
    "OR l.max_in_progress_per_key IS NOT NULL)"
)


# The SQL functions the claim's room needs, in each backend's spelling: the database's clock in
# seconds (the one clock every server process shares: a rate's bucket refills by it), and the
# whole part of a non-negative number.
FUNCTIONS: Final = {
    "postgres": {
        "least": "LEAST",
        "greatest": "GREATEST",
        "now": "extract(epoch from clock_timestamp())::float8",
        "floor": "floor({})::bigint",
    },
    "sqlite": {
        "least": "min",
        "greatest": "max",
        "now": "((julianday('now') - 2440587.5) * 86400.0)",
        "floor": "CAST({} AS INTEGER)",
    },
}
BUCKETS: Final = "jobnik_rate_buckets"  # each rate limit's token bucket (not a read model)


def tokens(backend: str, bucket: str = "b") -> str:
    """SQL: the tokens in a stage type's bucket now (`l`: its limits row): what it held, refilled
    by the time since, up to `l.rate_starts`."""
    f = FUNCTIONS[backend]
    return (
        f"{f['least']}(l.rate_starts, {bucket}.tokens + {f['greatest']}(0, "
        f"{f['now']} - {bucket}.refilled_at) * l.rate_starts / l.rate_interval_seconds)"
    )


def room(n: str, backend: str) -> str:
    """SQL: how many of `n` tasks a claim of stage type `%(v)s` may take: `n` when the type has
    no limits, else no more than its concurrency limit less its tasks IN_PROGRESS (counted on an
    index of the tasks in progress) and the whole tokens in its rate's bucket (full when it has
    none yet), and never below 0."""
    f = FUNCTIONS[backend]
    running = (
        "(SELECT count(*) FROM tasks_v1 t WHERE t.stage_type = %(v)s AND t.status = 'IN_PROGRESS')"
    )
    concurrency = (
        f"CASE WHEN l.max_in_progress IS NULL THEN {n} ELSE l.max_in_progress - {running} END"
    )
    held = f"(SELECT {tokens(backend)} FROM {BUCKETS} b WHERE b.stage_type = %(v)s)"
    rate = (
        f"CASE WHEN l.rate_starts IS NULL THEN {n} "
        f"ELSE {f['floor'].format(f'COALESCE({held}, l.rate_starts)')} END"
    )
    clamped = f"{f['greatest']}(0, {f['least']}({n}, {concurrency}, {rate}))"
    return f"COALESCE((SELECT {clamped} FROM {LIMITS} l WHERE l.stage_type = %(v)s), {n})"


def within_limit(claim: str, backend: str) -> str:
    """The claim's statement `claim` (… LIMIT n) taking no more than the limits' room."""
    head, _, n = claim.rpartition(" LIMIT ")
    return f"{head} LIMIT {room(n, backend)}"
