"""The `jobnik` command: serve the API, migrate, workers, history, projections, job repair."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Annotated

import typer

from jobnik.scripts.durations import parse_duration
from jobnik.scripts.projections_cli import open_store, projections
from jobnik.scripts.tokens_cli import tokens

if TYPE_CHECKING:
    from jobnik.projections.queries.audit import Entry

app = typer.Typer(
    help="jobnik: an event-sourced workflow engine that speaks Jobnik's v1 HTTP API.\n\n"
    "Start with `jobnik serve`. The server's settings are JOBNIK_* environment variables "
    "(the README lists them); JOBNIK_DATABASE_URL picks the database, by default the SQLite "
    "file ./jobnik.db.",
    no_args_is_help=True,
    rich_markup_mode="markdown",
)
app.add_typer(projections, name="projections")
worker = typer.Typer(
    help="Run task handlers against a jobnik API.",
    no_args_is_help=True,
    rich_markup_mode="markdown",
)
history = typer.Typer(
    help="Read a job's history from the event log.",
    no_args_is_help=True,
    rich_markup_mode="markdown",
)
app.add_typer(history, name="history")
app.add_typer(worker, name="worker")
jobs = typer.Typer(help="Repair jobs and tasks.", no_args_is_help=True, rich_markup_mode="markdown")
app.add_typer(jobs, name="jobs")
app.add_typer(tokens, name="tokens")


@jobs.command("redispatch")
def jobs_redispatch(
    stale_after: Annotated[
        str, typer.Option(help="only tasks delegated longer ago than this (90s, 15m, 2h, 1d)")
    ] = "15m",
) -> None:
    """Re-queue delegated tasks whose child jobs have all ended but that still wait.

    jobnik re-queues such a task in the transaction that ends its last child job, so this
    normally finds nothing: it repairs what no transaction saw, such as rows edited by hand."""
    from jobnik.domain.application import Jobnik

    store = open_store()
    try:
        found = Jobnik(store).redispatch_stale(parse_duration(stale_after))
    finally:
        store.close()
    for task in found:
        typer.echo(
            f"re-dispatched task {task.id} (job {task.job_id}, stage type {task.stage_type})"
        )
    typer.echo(f"{len(found)} task(s) re-dispatched")


@app.command()
def serve(
    host: Annotated[str, typer.Option(help="interface to bind")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port")] = 8080,
    workers: Annotated[int, typer.Option(help="API processes; more than one needs PostgreSQL")] = 1,
    ssl_certfile: Annotated[
        str | None, typer.Option(help="serve HTTPS with this PEM certificate (chain)")
    ] = None,
    ssl_keyfile: Annotated[
        str | None, typer.Option(help="the certificate's PEM private key")
    ] = None,
) -> None:
    """Serve the HTTP API, after creating or upgrading the database schema.

    The database is JOBNIK_DATABASE_URL, by default the SQLite file ./jobnik.db; the OpenAPI
    documentation is served at /docs. Off loopback it refuses to run open: create a token
    first (`jobnik tokens create`), or set JOBNIK_AUTH=off. Logs one line per request (JSON
    lines with JOBNIK_LOG_FORMAT=json); with --workers N > 1 the processes share their metrics
    through a PROMETHEUS_MULTIPROC_DIR made for the run."""
    import uvicorn

    from jobnik.api.access import check_exposure
    from jobnik.api.settings import Settings
    from jobnik.api.telemetry.logs import log_config
    from jobnik.domain.errors import Exposed
    from jobnik.projections.queries.tokens import TokenViews
    from jobnik.scripts.serve import HttpLimits, metrics_directory

    if (ssl_certfile is None) != (ssl_keyfile is None):
        raise typer.BadParameter("--ssl-certfile and --ssl-keyfile go together")
    settings = Settings()
    store = open_store()  # create or upgrade the schema once, before any worker starts
    try:
        many = store.serves_many_processes
        any_token = bool(TokenViews(store).all())
    finally:
        store.close()
    if workers > 1 and not many:
        raise typer.BadParameter(
            "SQLite serves one process: use --workers 1, or PostgreSQL "
            "(JOBNIK_DATABASE_URL=postgresql://...) for several",
            param_hint="--workers",
        )
    try:
        check_exposure(settings.auth, host, any_token)
    except Exposed as exc:
        typer.echo(f"jobnik serve: {exc.message}", err=True)
        raise typer.Exit(2) from None
    with metrics_directory(workers, settings.prometheus_multiproc_dir) as directory:
        if directory is not None:  # read by the workers' metrics library and their settings
            os.environ["PROMETHEUS_MULTIPROC_DIR"] = directory
        uvicorn.run(
            "jobnik.scripts.asgi:create",
            factory=True,
            host=host,
            port=port,
            workers=workers,
            log_config=log_config(settings.log_format),
            access_log=False,  # the app's own access line (request id, route, ids) replaces it
            ssl_certfile=ssl_certfile,
            ssl_keyfile=ssl_keyfile,
            http=HttpLimits.of(settings).protocol(),  # header and body limits, timeouts
            ws="none",  # (the API has no WebSocket route)
        )


@app.command(
    add_help_option=False,  # --help is the suite's own (argparse): its options live there
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
)
def bench(ctx: typer.Context) -> None:
    """Run the benchmark suite: jobnik's figures beside bare-SQL floors measured in the same run.

    Its options: `jobnik bench --help`."""
    from jobnik.scripts.bench import main as bench_main

    raise typer.Exit(bench_main(ctx.args, prog="jobnik bench"))


@app.command()
def migrate() -> None:
    """Create or upgrade the database schema, then exit."""
    open_store().close()
    typer.echo("schema is up to date")


@worker.command("run")
def worker_run(
    handler: Annotated[
        str, typer.Argument(help="MODULE:FUNCTION, called as FUNCTION(task, context) per task")
    ],
    stage_type: Annotated[
        str, typer.Option("--stage-type", help="the stage type whose tasks to dequeue")
    ],
    concurrency: Annotated[int, typer.Option(help="tasks handled at once (threads)")] = 1,
    batch_size: Annotated[
        int,
        typer.Option(
            min=1, help="tasks each thread claims, and reports, per request (1: one at a time)"
        ),
    ] = 1,
    api_url: Annotated[
        str, typer.Option(envvar="JOBNIK_API_URL", help="the jobnik API's base URL")
    ] = "http://127.0.0.1:8080",
    heartbeat_interval: Annotated[
        float, typer.Option(help="seconds between a running task's lease heartbeats")
    ] = 10.0,
    grace_period: Annotated[
        float, typer.Option(help="seconds running handlers get to finish after SIGTERM/SIGINT")
    ] = 30.0,
    lease_seconds: Annotated[
        int | None,
        typer.Option(help="the lease asked for at each dequeue (default: 3 heartbeat intervals)"),
    ] = None,
    log_level: Annotated[
        str, typer.Option(help="DEBUG, INFO or WARNING (JSON lines on stderr)")
    ] = "INFO",
    metrics_port: Annotated[
        int | None,
        typer.Option(help="serve Prometheus metrics on this port (0: any free port)"),
    ] = None,
    metrics_host: Annotated[str, typer.Option(help="interface the metrics port binds")] = (
        "127.0.0.1"
    ),
    token: Annotated[
        str | None,
        typer.Option(
            envvar="JOBNIK_TOKEN",
            help="bearer token for an API with access control (better: env JOBNIK_TOKEN, which "
            "other users cannot read from the process list)",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Dequeue and handle tasks of one stage type until SIGTERM or SIGINT.

    The handler's return reports the task COMPLETED (its value the result); an exception
    reports it FAILED, and the server retries it while attempts remain. On SIGTERM or SIGINT
    the worker stops dequeuing, lets running handlers finish within the grace period, then
    hands the rest back to the queue. A status line on stderr counts what it did. With
    OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_TRACES_EXPORTER) set, handler spans are exported, each
    a child of its task's stored traceparent (needs `pip install 'jobnik[otel]'`)."""
    from jobnik.workers.cli import run_worker

    sys.path.insert(0, os.getcwd())  # handlers in the working directory import as modules
    try:
        run_worker(
            handler,
            stage_type,
            api_url,
            concurrency=concurrency,
            batch_size=batch_size,
            heartbeat_interval=heartbeat_interval,
            grace_period=grace_period,
            lease_seconds=lease_seconds,
            log_level=log_level,
            metrics_port=metrics_port,
            metrics_host=metrics_host,
            env=os.environ,
            token=token,
        )
    except (ValueError, ImportError, AttributeError) as exc:
        typer.echo(f"cannot load handler: {exc}", err=True)
        raise typer.Exit(2) from exc
    except RuntimeError as exc:  # e.g. traces asked for without OpenTelemetry installed
        typer.echo(f"cannot start: {exc}", err=True)
        raise typer.Exit(2) from exc


def _entries(job_id: str) -> Iterator[Entry]:
    from uuid import UUID

    from jobnik.projections.queries.audit import Audit

    store = open_store()
    audit, after = Audit(store), 0
    try:
        while True:
            page = audit.job_history(UUID(job_id), after, 1000)
            yield from page.items
            if page.next is None:
                return
            after = page.next
    finally:
        store.close()


@history.command("export")
def history_export(job_id: Annotated[str, typer.Argument(help="the job's id")]) -> None:
    """Write every event of a job, its stages and its tasks to stdout as NDJSON.

    Deleted jobs keep their history, so this works for them too."""
    from jobnik.api.history_schemas import EventOut

    for entry in _entries(job_id):
        sys.stdout.write(EventOut.of(entry).model_dump_json(by_alias=True) + "\n")


@app.command()
def replay(job_id: Annotated[str, typer.Argument(help="the job's id")]) -> None:
    """Print a job's events as a table: position, time, entity, event, actor, and its status
    change and reason (pauses, aborts, reruns with the reason the operator gave)."""
    header = (
        f"{'pos':>7}  {'time':<29}  {'entity':<6}  {'id':<8}  {'event':<24}  {'actor':<6}  details"
    )
    typer.echo(header)
    typer.echo("-" * len(header))
    for e in _entries(job_id):
        details = _details(e.payload, e.reason)
        actor = f"{e.actor} ({e.actor_role})" if e.actor_role else e.actor
        typer.echo(
            f"{e.position:>7}  {e.time.isoformat(timespec='milliseconds'):<29}  {e.entity:<6}  "
            f"{str(e.entity_id)[:8]:<8}  {e.type:<24}  {actor:<6}  {details}"
        )


def _details(payload: dict[str, object], reason: str | None) -> str:
    """An event's status change (`previous → status`, as far as it has them) and its reason."""
    previous, status = payload.get("previous"), payload.get("status")
    if previous and status:
        change = f"{previous} → {status}"
    elif previous:
        change = f"from {previous}"
    else:
        change = str(status or "")
    return ": ".join(part for part in (change, reason) if part)


def main() -> None:
    app()
