"""`jobnik schedules list | show | create | pause | resume | trigger | backfill | delete`.

A client of the API (JOBNIK_API_URL, token from JOBNIK_TOKEN), like `jobnik worker run`: the
same permissions as the HTTP routes, and each change an event naming the token. A schedule is
named by its id or its name.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from jobnik.scripts.durations import parse_duration

if TYPE_CHECKING:
    from jobnik.workers import Producer, Schedule

schedules = typer.Typer(
    help="Recurring jobs: a job template run on a cron expression (in a time zone) or an interval.",
    no_args_is_help=True,
    rich_markup_mode="markdown",
)

ApiUrl = Annotated[str, typer.Option(envvar="JOBNIK_API_URL", help="the jobnik API's base URL")]
Token = Annotated[
    str | None,
    typer.Option(
        envvar="JOBNIK_TOKEN",
        help="bearer token for an API with access control (better: env JOBNIK_TOKEN)",
        show_default=False,
    ),
]
Which = Annotated[str, typer.Argument(help="the schedule's id or name")]
Reason = Annotated[str | None, typer.Option(help="why (recorded on the event)")]
DEFAULT_URL = "http://127.0.0.1:8080"


def _producer(api_url: str, token: str | None) -> Producer:
    from jobnik.workers import Producer

    return Producer(api_url, token=token)


def _id(producer: Producer, which: str) -> str:
    """The id of the schedule `which` names (an id, or a name)."""
    from uuid import UUID

    try:
        return str(UUID(which))
    except ValueError:
        found = producer.schedules(name=which)
    if not found:
        raise typer.BadParameter(f"no schedule named {which!r}")
    return found[0].id


def _when(s: Schedule) -> str:
    return f"{s.cron} ({s.timezone})" if s.cron else f"every {s.interval_seconds} s"


def _time(value: datetime | None) -> str:
    return value.isoformat() if value else "-"


def _fail(exc: Exception) -> None:
    typer.echo(f"jobnik schedules: {exc}", err=True)
    raise typer.Exit(1) from None


@schedules.command("list")
def list_(api_url: ApiUrl = DEFAULT_URL, token: Token = None) -> None:
    """Every schedule: id, name, when, next fire, last run's status."""
    from jobnik.workers import ApiError, TransportError

    try:
        found = _producer(api_url, token).schedules()
    except (ApiError, TransportError) as exc:
        _fail(exc)
        return
    for s in found:
        nxt = "paused" if s.paused else _time(s.next_fire_times[0] if s.next_fire_times else None)
        typer.echo(f"{s.id}  {s.name}  {_when(s)}  next {nxt}  last {s.last_status or '-'}")
    typer.echo(f"{len(found)} schedule(s)")


@schedules.command("show")
def show(which: Which, api_url: ApiUrl = DEFAULT_URL, token: Token = None) -> None:
    """A schedule (as JSON), its next fire times and its latest runs."""
    from jobnik.workers import ApiError, TransportError

    producer = _producer(api_url, token)
    try:
        schedule_id = _id(producer, which)
        body = producer.client.get(f"/v1/schedules/{schedule_id}", params={"next": 10})
        runs = producer.schedule_runs(schedule_id, limit=10)
    except (ApiError, TransportError) as exc:
        _fail(exc)
        return
    typer.echo(json.dumps(body, indent=2))
    for r in runs:
        typer.echo(f"run {r.nominal_time.isoformat()}  {r.started_by}  job {r.job_id}  {r.status}")


def _template(job: Path) -> dict[str, Any]:
    """The job template the file `job` holds: one JSON object."""
    try:
        template = json.loads(job.read_bytes())
    except ValueError as exc:  # (not JSON, or not UTF-8)
        raise typer.BadParameter(f"{job} is not JSON: {exc}", param_hint="--job") from None
    if not isinstance(template, dict):
        raise typer.BadParameter(f"{job} holds no JSON object", param_hint="--job")
    return template


@schedules.command("create")
def create(
    name: Annotated[str, typer.Argument(help="the schedule's name (unique)")],
    cron: Annotated[
        str | None, typer.Option(help="five fields or @daily, ...; read in --timezone")
    ] = None,
    timezone: Annotated[str, typer.Option(help="an IANA time zone")] = "UTC",
    every: Annotated[
        str | None, typer.Option(help="an interval instead of --cron: 90s, 15m, 2h, 1d")
    ] = None,
    job: Annotated[
        Path | None,
        typer.Option(
            exists=True,
            dir_okay=False,
            help="a JSON file: the job template (name, data, priority, stages, ...)",
        ),
    ] = None,
    hook: Annotated[
        str | None,
        typer.Option(help="instead of --job: the stage type whose one task fills each run in"),
    ] = None,
    job_name: Annotated[
        str | None, typer.Option(help="with --hook: the runs' job name (default: NAME)")
    ] = None,
    overlap: Annotated[
        str | None, typer.Option(help="skip (default), bufferOne, allowAll, cancelPrevious")
    ] = None,
    catchup: Annotated[str | None, typer.Option(help="latest (default) or all")] = None,
    catchup_window: Annotated[
        str | None, typer.Option(help="how late a fire may run (default 1d)")
    ] = None,
    api_url: ApiUrl = DEFAULT_URL,
    token: Token = None,
) -> None:
    """Create a schedule; prints its id and next fire times."""
    from jobnik.workers import ApiError, TransportError

    if (job is None) == (hook is None):
        raise typer.BadParameter("give --job FILE or --hook STAGE_TYPE")
    template: dict[str, Any] = (
        _template(job) if job is not None else {"name": job_name or name, "hook": hook}
    )
    window = int(parse_duration(catchup_window).total_seconds()) if catchup_window else None
    interval = int(parse_duration(every).total_seconds()) if every else None
    try:
        made = _producer(api_url, token).create_schedule(
            name,
            template,
            cron=cron,
            timezone=timezone,
            interval_seconds=interval,
            overlap_policy=overlap,
            catchup_policy=catchup,
            catchup_window_seconds=window,
        )
    except (ApiError, TransportError) as exc:
        _fail(exc)
        return
    typer.echo(f"schedule {made.id} ({made.name}), {_when(made)}")
    for t in made.next_fire_times:
        typer.echo(f"next {t.isoformat()}")


def _steer(which: str, api_url: str, token: str | None, act: str, reason: str | None) -> None:
    from jobnik.workers import ApiError, TransportError

    producer = _producer(api_url, token)
    try:
        schedule_id = _id(producer, which)
        if act == "delete":
            producer.delete_schedule(schedule_id, reason=reason)
            typer.echo(f"schedule {schedule_id} deleted")
            return
        if act == "trigger":
            run = producer.trigger_schedule(schedule_id, reason=reason)
            typer.echo(f"run {run.nominal_time.isoformat()}: job {run.job_id}")
            return
        step = producer.pause_schedule if act == "pause" else producer.resume_schedule
        done = step(schedule_id, reason=reason)
    except (ApiError, TransportError) as exc:
        _fail(exc)
        return
    typer.echo(f"schedule {done.id} ({done.name}): {'paused' if done.paused else 'running'}")


@schedules.command("pause")
def pause(
    which: Which, reason: Reason = None, api_url: ApiUrl = DEFAULT_URL, token: Token = None
) -> None:
    """Nothing fires until it is resumed."""
    _steer(which, api_url, token, "pause", reason)


@schedules.command("resume")
def resume(
    which: Which, reason: Reason = None, api_url: ApiUrl = DEFAULT_URL, token: Token = None
) -> None:
    """Go on from now (what fell due while paused does not run)."""
    _steer(which, api_url, token, "resume", reason)


@schedules.command("trigger")
def trigger(
    which: Which, reason: Reason = None, api_url: ApiUrl = DEFAULT_URL, token: Token = None
) -> None:
    """Run it now, whatever its overlap policy."""
    _steer(which, api_url, token, "trigger", reason)


@schedules.command("delete")
def delete(
    which: Which, reason: Reason = None, api_url: ApiUrl = DEFAULT_URL, token: Token = None
) -> None:
    """Stop and remove it (an operator's); its runs' jobs and history stay."""
    _steer(which, api_url, token, "delete", reason)


@schedules.command("backfill")
def backfill(
    which: Which,
    start: Annotated[datetime, typer.Option(help="the first nominal time (ISO 8601, UTC)")],
    end: Annotated[datetime, typer.Option(help="the last (not after now)")],
    reason: Reason = None,
    api_url: ApiUrl = DEFAULT_URL,
    token: Token = None,
) -> None:
    """Run each nominal time from START to END that has no run yet (at most 100)."""
    from datetime import UTC

    from jobnik.workers import ApiError, TransportError

    producer = _producer(api_url, token)
    aware = [t if t.tzinfo else t.replace(tzinfo=UTC) for t in (start, end)]
    try:
        runs = producer.backfill_schedule(_id(producer, which), *aware, reason=reason)
    except (ApiError, TransportError) as exc:
        _fail(exc)
        return
    for r in runs:
        had = " (it had run)" if r.already_ran else ""
        typer.echo(f"run {r.nominal_time.isoformat()}: job {r.job_id}{had}")
    typer.echo(f"{sum(not r.already_ran for r in runs)} run(s) started")
