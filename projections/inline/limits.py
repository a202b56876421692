"""The stage types' limits read model: `stage_type_limits_v1`, one row per stage type whose limits
were ever set (`max_in_progress`, `rate_starts`, `max_in_progress_per_key`, `key_rate_starts` NULL
when not set, or removed; `queue_order`). The claim reads it: `room`, the most tasks a claim may
take; so do the gates of the per-key limits (inline/gates.py)."""

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
                "key_rate_starts": None,
                "key_rate_interval_seconds": None,
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
    L.KeyRateSet: lambda e, _: [
        *_changed(e, key_rate_starts=e.starts, key_rate_interval_seconds=e.interval_seconds),
        Gate({"stage_type": e.stage_type}),
    ],
    L.KeyRateRemoved: lambda e, _: [
        *_changed(e, key_rate_starts=None, key_rate_interval_seconds=None),
        Gate({"stage_type": e.stage_type}),
    ],
}


# A limits row `l` with something in force (domain/limits.py: StageTypeLimits.in_force): these
# are the types GET /v1/limits lists, and at most MAX_LIMITED_TYPES of them.
# A limits row `l` with a limit per concurrency key: its type's queued rows carry their gates.
PER_KEY: Final = "(l.max_in_progress_per_key IS NOT NULL OR l.key_rate_starts IS NOT NULL)"
IN_FORCE: Final = (
    f"(l.max_in_progress IS NOT NULL OR l.rate_starts IS NOT NULL OR l.queue_order <> '{FIFO}' "
    f"OR {PER_KEY})"
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
# Each rate limit's token bucket (not a read model): a stage type's (`gate` '') and, under a
# per-key rate, each key's (its gate, inline/gates.py).
BUCKETS: Final = "jobnik_buckets"
TYPE_RATE: Final = ("l.rate_starts", "l.rate_interval_seconds")
KEY_RATE: Final = ("l.key_rate_starts", "l.key_rate_interval_seconds")


def tokens(backend: str, bucket: str = "b", rate: tuple[str, str] = TYPE_RATE) -> str:
    """SQL: the tokens in a bucket now (`l`: its type's limits row; `rate`: its starts and
    interval columns): what it held, refilled by the time since, up to the starts."""
    f = FUNCTIONS[backend]
    starts, interval = rate
    return (
        f"{f['least']}({starts}, {bucket}.tokens + {f['greatest']}(0, "
        f"{f['now']} - {bucket}.refilled_at) * {starts} / {interval})"
    )


def next_token(backend: str, held: str, rate: tuple[str, str] = KEY_RATE) -> str:
    """SQL: when a bucket holding `held` tokens now holds one more whole token (the database's
    clock, in seconds), NULL when it is full: when a key's held tasks may be let through."""
    f = FUNCTIONS[backend]
    starts, interval = rate
    whole = f["floor"].format(held)
    return (
        f"CASE WHEN {held} >= {starts} THEN NULL "
        f"ELSE {f['now']} + ({whole} + 1 - {held}) * {interval} / {starts} END"
    )


# A claim's tasks by job (rows `job_id`, `n`), from its parameters `%(j)s` and `%(c)s`: two
# arrays on PostgreSQL, one JSON object (job id: count) on SQLite.
_CLAIMED_JOBS: Final = {
    "postgres": "unnest(%(j)s::uuid[], %(c)s::int[]) AS e(job_id, n)",
    "sqlite": "(SELECT key AS job_id, value AS n FROM json_each(%(j)s)) e",
}


def spend(backend: str) -> str:
    """SQL: after a claim of `%(k)s` tasks of stage type `%(v)s`, the buckets it draws from
    written back less what it took (refilled first; a full one when there is none yet): its
    type's rate's, and under a per-key rate the bucket of each key of the claimed tasks' jobs,
    with when that one next gains a whole token. Nothing when the type has no rate."""
    key_bucket = (
        f"(SELECT {tokens(backend, 'b', KEY_RATE)} FROM {BUCKETS} b "
        "WHERE b.stage_type = l.stage_type AND b.gate = c.gate)"
    )
    type_bucket = (
        f"(SELECT {tokens(backend)} FROM {BUCKETS} b "
        "WHERE b.stage_type = l.stage_type AND b.gate = '')"
    )
    keys = (
        f"SELECT j.gate, sum(e.n) AS n FROM {_CLAIMED_JOBS[backend]} "
        "JOIN jobs_v1 j ON j.id = e.job_id GROUP BY j.gate"
    )
    drawn = (
        f"SELECT l.stage_type, '' AS gate, COALESCE({type_bucket}, l.rate_starts) - %(k)s AS held, "
        f"l.key_rate_starts, l.key_rate_interval_seconds FROM {LIMITS} l "
        "WHERE l.stage_type = %(v)s AND l.rate_starts IS NOT NULL UNION ALL "
        f"SELECT l.stage_type, c.gate, COALESCE({key_bucket}, l.key_rate_starts) - c.n, "
        f"l.key_rate_starts, l.key_rate_interval_seconds FROM {LIMITS} l CROSS JOIN ({keys}) c "
        "WHERE l.stage_type = %(v)s AND l.key_rate_starts IS NOT NULL"
    )
    wake = next_token(backend, "s.held", ("s.key_rate_starts", "s.key_rate_interval_seconds"))
    return (
        f"INSERT INTO {BUCKETS} (stage_type, gate, tokens, refilled_at, wake_at) "
        f"SELECT s.stage_type, s.gate, s.held, {FUNCTIONS[backend]['now']}, "
        f"CASE WHEN s.gate = '' THEN NULL ELSE {wake} END FROM ({drawn}) s WHERE true "
        "ON CONFLICT (stage_type, gate) DO UPDATE SET tokens = excluded.tokens, "
        "refilled_at = excluded.refilled_at, wake_at = excluded.wake_at"
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
    held = f"(SELECT {tokens(backend)} FROM {BUCKETS} b WHERE b.stage_type = %(v)s AND b.gate = '')"
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
