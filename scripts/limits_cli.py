"""`jobnik limits list | set | remove | keys | unkeys | rate | unrate | order`: the stage types'
concurrency limits, per-key limits, rate limits (per type or per key) and queue orders.

A client of the API (JOBNIK_API_URL, token from JOBNIK_TOKEN), like `jobnik schedules`: the same
permissions as the HTTP routes (an operator's to change), and each change an event naming the
token and the reason.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, TypeVar

import typer

from jobnik.scripts.durations import parse_duration
from jobnik.scripts.schedules_cli import DEFAULT_URL, ApiUrl, Reason, Token, _producer

if TYPE_CHECKING:
    from jobnik.workers import Limit, Producer

T = TypeVar("T")

limits = typer.Typer(
    help="Limits per stage type: at most N tasks in progress at once, at most N per "
    "concurrency key (or job), at most N starts per interval (per type or per key), and the "
    "queue's order (fifo, or fair turns between jobs).",
    no_args_is_help=True,
    rich_markup_mode="markdown",
)

StageType = Annotated[str, typer.Argument(help="the stage type")]


def _limits(v: Limit) -> str:
    """`2/3` (in progress / concurrency limit) and `5 per 60 s (4 left)`, those it has."""
    parts = [] if v.max_in_progress is None else [f"{v.in_progress}/{v.max_in_progress}"]
    if v.max_in_progress_per_key is not None:
        parts.append(f"{v.max_in_progress_per_key} per key")
    if v.key_rate_starts is not None:
        parts.append(f"{v.key_rate_starts} per {v.key_rate_interval_seconds} s per key")
    if v.max_in_progress_per_key is not None or v.key_rate_starts is not None:
        parts.append(f"({v.held_by_key} held by key)")
    if v.rate_starts is not None:
        parts.append(f"{v.rate_starts} per {v.rate_interval_seconds} s ({v.rate_tokens} left)")
    if v.order != "fifo":
        parts.append(v.order)
    return "  ".join(parts)


def _call(api_url: str, token: str | None, request: Callable[[Producer], T]) -> T:
    """`request`'s answer; an API's refusal or a transport failure: its message, exit 1."""
    from jobnik.workers import ApiError, TransportError

    try:
        return request(_producer(api_url, token))
    except (ApiError, TransportError) as exc:
        typer.echo(f"jobnik limits: {exc}", err=True)
        raise typer.Exit(1) from None


@limits.command("list")
def list_(api_url: ApiUrl = DEFAULT_URL, token: Token = None) -> None:
    """Every stage type with a limit: tasks in progress / limit, starts per interval (tokens
    left), who changed it last and why."""
    found = _call(api_url, token, lambda p: p.limits())
    for v in found:
        why = f"  ({v.reason})" if v.reason else ""
        typer.echo(f"{v.stage_type}  {_limits(v)}  by {v.updated_by}{why}")
    typer.echo(f"{len(found)} limit(s)")


@limits.command("set")
def set_(
    stage_type: StageType,
    max_in_progress: Annotated[int, typer.Argument(help="at most this many in progress")],
    reason: Reason = None,
    api_url: ApiUrl = DEFAULT_URL,
    token: Token = None,
) -> None:
    """Set or change a stage type's limit (tasks already in progress over it go on)."""
    v = _call(api_url, token, lambda p: p.set_limit(stage_type, max_in_progress, reason=reason))
    typer.echo(f"{v.stage_type}  {_limits(v)}")


@limits.command("remove")
def remove(
    stage_type: StageType, reason: Reason = None, api_url: ApiUrl = DEFAULT_URL, token: Token = None
) -> None:
    """Remove a stage type's limit: its dequeues take what is queued again."""
    _call(api_url, token, lambda p: p.remove_limit(stage_type, reason=reason))
    typer.echo(f"{stage_type}: no limit")


@limits.command("keys")
def keys(
    stage_type: StageType,
    max_in_progress: Annotated[int, typer.Argument(help="at most this many in progress per key")],
    reason: Reason = None,
    api_url: ApiUrl = DEFAULT_URL,
    token: Token = None,
) -> None:
    """Set or change a stage type's per-key limit: at most N of its tasks in progress per
    concurrency key (a job's concurrencyKey, or else the job itself)."""
    v = _call(api_url, token, lambda p: p.set_key_limit(stage_type, max_in_progress, reason=reason))
    typer.echo(f"{v.stage_type}  {_limits(v)}")


@limits.command("unkeys")
def unkeys(
    stage_type: StageType, reason: Reason = None, api_url: ApiUrl = DEFAULT_URL, token: Token = None
) -> None:
    """Remove a stage type's per-key limit."""
    _call(api_url, token, lambda p: p.remove_key_limit(stage_type, reason=reason))
    typer.echo(f"{stage_type}: no per-key limit")


PerKey = Annotated[
    bool,
    typer.Option(
        "--per-key", help="each concurrency key's rate (a job's concurrencyKey, or else the job)"
    ),
]


@limits.command("rate")
def rate(
    stage_type: StageType,
    starts: Annotated[int, typer.Argument(help="at most this many task starts")],
    per: Annotated[str, typer.Option(help="per this interval: 90s, 15m, 2h, 1d")] = "1m",
    per_key: PerKey = False,
    reason: Reason = None,
    api_url: ApiUrl = DEFAULT_URL,
    token: Token = None,
) -> None:
    """Set or change a stage type's rate: at most STARTS task starts per interval (with
    `--per-key`, per concurrency key)."""
    seconds = int(parse_duration(per).total_seconds())
    v = _call(
        api_url,
        token,
        lambda p: (p.set_key_rate if per_key else p.set_rate)(
            stage_type, starts, seconds, reason=reason
        ),
    )
    typer.echo(f"{v.stage_type}  {_limits(v)}")


@limits.command("unrate")
def unrate(
    stage_type: StageType,
    per_key: PerKey = False,
    reason: Reason = None,
    api_url: ApiUrl = DEFAULT_URL,
    token: Token = None,
) -> None:
    """Remove a stage type's rate limit (with `--per-key`, its per-key rate)."""
    _call(
        api_url,
        token,
        lambda p: (p.remove_key_rate if per_key else p.remove_rate)(stage_type, reason=reason),
    )
    typer.echo(f"{stage_type}: no {'per-key ' if per_key else ''}rate limit")


@limits.command("order")
def order(
    stage_type: StageType,
    queue_order: Annotated[
        str, typer.Argument(metavar="ORDER", help="fifo (first in, first out) or fair")
    ],
    reason: Reason = None,
    api_url: ApiUrl = DEFAULT_URL,
    token: Token = None,
) -> None:
    """Set the order a stage type's tasks are dequeued in after priority: fifo, first in, first
    out (the default), or fair, the jobs of one priority taking turns."""
    v = _call(api_url, token, lambda p: p.set_order(stage_type, queue_order, reason=reason))
    typer.echo(f"{v.stage_type}  order {v.order}")
