"""`jobnik limits list | set | remove`: the stage types' concurrency limits.

A client of the API (JOBNIK_API_URL, token from JOBNIK_TOKEN), like `jobnik schedules`: the same
permissions as the HTTP routes (an operator's to change), and each change an event naming the
token and the reason.
"""

from __future__ import annotations

from typing import Annotated

import typer

from jobnik.scripts.schedules_cli import DEFAULT_URL, ApiUrl, Reason, Token, _producer

limits = typer.Typer(
    help="Concurrency limits: at most N tasks of a stage type in progress at once.",
    no_args_is_help=True,
    rich_markup_mode="markdown",
)

StageType = Annotated[str, typer.Argument(help="the stage type")]


def _fail(exc: Exception) -> None:
    typer.echo(f"jobnik limits: {exc}", err=True)
    raise typer.Exit(1) from None


@limits.command("list")
def list_(api_url: ApiUrl = DEFAULT_URL, token: Token = None) -> None:
    """Every limit in force: stage type, tasks in progress / limit, who set it and why."""
    from jobnik.workers import ApiError, TransportError

    try:
        found = _producer(api_url, token).limits()
    except (ApiError, TransportError) as exc:
        _fail(exc)
        return
    for v in found:
        why = f"  ({v.reason})" if v.reason else ""
        typer.echo(f"{v.stage_type}  {v.in_progress}/{v.max_in_progress}  by {v.updated_by}{why}")
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
    from jobnik.workers import ApiError, TransportError

    try:
        v = _producer(api_url, token).set_limit(stage_type, max_in_progress, reason=reason)
    except (ApiError, TransportError) as exc:
        _fail(exc)
        return
    typer.echo(f"{v.stage_type}  {v.in_progress}/{v.max_in_progress}")


@limits.command("remove")
def remove(
    stage_type: StageType,
    reason: Reason = None,
    api_url: ApiUrl = DEFAULT_URL,
    token: Token = None,
) -> None:
    """Remove a stage type's limit: its dequeues take what is queued again."""
    from jobnik.workers import ApiError, TransportError

    try:
        _producer(api_url, token).remove_limit(stage_type, reason=reason)
    except (ApiError, TransportError) as exc:
        _fail(exc)
        return
    typer.echo(f"{stage_type}: no limit")
