"""The `jobnik` command: serve the API, migrate, workers, history, projections, job repair."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Annotated, Final
from uuid import UUID

import typer

from jobnik.domain.statuses import MAX_LEASE_SECONDS
from jobnik.scripts.archive_cli import archive
from jobnik.scripts.durations import parse_duration
from jobnik.scripts.failures import EXIT_STATUSES, EXIT_USAGE, Failure, JobnikGroup
from jobnik.scripts.history_cli import history, replay
from jobnik.scripts.limits_cli import limits
from jobnik.scripts.projections_cli import projections
from jobnik.scripts.schedules_cli import schedules
from jobnik.scripts.stores import migrated, open_store
from jobnik.scripts.tokens_cli import tokens

if TYPE_CHECKING:
    pass

app = typer.Typer(
    help="jobnik: an event-sourced workflow engine that speaks Jobnik's v1 HTTP API.\n\n"
    "Start with `jobnik serve`. The server's settings are JOBNIK_* environment variables "
    "(docs/operations.md lists them); JOBNIK_DATABASE_URL picks the database, by default the "
    "SQLite file ./jobnik.db.\n\n" + EXIT_STATUSES,
    no_args_is_help=True,
    rich_markup_mode="markdown",
    cls=JobnikGroup,
)
app.add_typer(projections, name="projections")
worker = typer.Typer(
    help="Run task handlers against a jobnik API.",
    no_args_is_help=True,
    rich_markup_mode="markdown",
)
app.add_typer(history, name="history")
app.command()(replay)
app.add_typer(worker, name="worker")
jobs = typer.Typer(help="Repair jobs and tasks.", no_args_is_help=True, rich_markup_mode="markdown")
app.add_typer(jobs, name="jobs")
app.add_typer(tokens, name="tokens")
app.add_typer(schedules, name="schedules")
app.add_typer(limits, name="limits")
app.add_typer(archive, name="archive")


CreateDatabase = Annotated[
    bool,
    typer.Option(
        "--create-database",
        help="create the PostgreSQL database when it does not exist (its user needs CREATEDB)",
    ),
]


@app.callback()
def root(
    debug: Annotated[
        bool,
        typer.Option(
            "--debug", envvar="JOBNIK_DEBUG", help="show an error's traceback, not one sentence"
        ),
    ] = False,
) -> None:
    """(`debug` is read by the root group, JobnikGroup, when a command fails.)"""


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


@jobs.command("erase")
def jobs_erase(
    job_id: Annotated[UUID, typer.Argument(help="the job's id (a UUID)")],
    reason: Annotated[str, typer.Option(help="why (recorded on the JobErased event)")],
) -> None:
    """Erase an ended job's user data (data, user metadata, results, log lines of the job, its
    stages and its tasks) from the log and the read models, or from its archive once it was
    archived (JOBNIK_ARCHIVE_DIR); its events' skeleton stays."""
    from jobnik.api.archives import erase_job
    from jobnik.domain.application import Jobnik
    from jobnik.domain.errors import JobNotFound
    from jobnik.scripts.archive_cli import open_archiver
    from jobnik.scripts.tokens_cli import cli_principal

    archiver = open_archiver()
    try:
        erase_job(Jobnik(archiver.store), archiver, job_id, by=cli_principal(), reason=reason)
    except JobNotFound:
        raise Failure(f"no job {job_id} in this database, live or archived") from None
    finally:
        archiver.store.close()
    typer.echo(f"job {job_id} erased")


@app.command()
def serve(
    host: Annotated[str, typer.Option(envvar="JOBNIK_HOST", help="interface to bind")] = (
        "127.0.0.1"
    ),
    port: Annotated[
        int, typer.Option(envvar="JOBNIK_PORT", min=0, max=65535, help="TCP port (0: any free one)")
    ] = 8080,
    workers: Annotated[
        int,
        typer.Option(
            envvar="JOBNIK_WORKERS", min=1, help="API processes; more than one needs PostgreSQL"
        ),
    ] = 1,
    ssl_certfile: Annotated[
        str | None, typer.Option(help="serve HTTPS with this PEM certificate (chain)")
    ] = None,
    ssl_keyfile: Annotated[
        str | None, typer.Option(help="the certificate's PEM private key")
    ] = None,
    create_database: CreateDatabase = False,
) -> None:
    """Serve the HTTP API, after creating or upgrading the database schema.

    The database is JOBNIK_DATABASE_URL, by default the SQLite file ./jobnik.db; the OpenAPI
    documentation is served at /docs. Off loopback it refuses to run open: create a token
    first (`jobnik tokens create`), or set JOBNIK_AUTH=off. Logs one line per request (JSON
    lines with JOBNIK_LOG_FORMAT=json); with --workers N > 1 the processes share their metrics
    through a PROMETHEUS_MULTIPROC_DIR made for the run."""
    import uvicorn

    from jobnik.api.access import check_exposure, is_loopback
    from jobnik.api.settings import Settings
    from jobnik.api.telemetry.logs import log_config
    from jobnik.domain.errors import DatabaseMissing, Exposed
    from jobnik.projections.queries.tokens import TokenViews
    from jobnik.projections.store.backends import store_class
    from jobnik.scripts.serve import HttpLimits, metrics_directory

    if (ssl_certfile is None) != (ssl_keyfile is None):
        raise typer.BadParameter("--ssl-certfile and --ssl-keyfile go together")
    settings = Settings()
    if workers > 1 and not store_class(settings.library_env()).serves_many_processes:
        raise typer.BadParameter(
            "SQLite serves one process: use --workers 1, or PostgreSQL "
            "(JOBNIK_DATABASE_URL=postgresql://...) for several",
            param_hint="--workers",
        )
    any_token = False
    if settings.auth is None and not is_loopback(host):  # tokens decide: read them, make nothing
        try:
            store = open_store(settings)
        except DatabaseMissing:
            pass
        else:
            try:
                any_token = bool(TokenViews(store).all())
            finally:
                store.close()
    try:
        check_exposure(settings.auth, host, any_token)
    except Exposed as exc:
        raise Failure(exc.message, EXIT_USAGE) from None
    # create or upgrade the schema once, before any worker starts
    open_store(settings, create=True, create_database=create_database).close()
    with metrics_directory(workers, settings.prometheus_multiproc_dir) as directory:
        if directory is not None:  # read by the workers' metrics library and their settings
            os.environ["PROMETHEUS_MULTIPROC_DIR"] = directory
        try:
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
        except SystemExit as exc:  # uvicorn's exit when it cannot start (its log says why)
            if exc.code in (None, 0):
                raise
            raise Failure(
                f"the server did not start on {host}:{port}; the log line above says why (such "
                "as the port in use)"
            ) from None


@app.command()
def bench(
    backend: Annotated[
        str | None,
        typer.Option(
            help="the database(s) to measure on: postgres, sqlite or both (default: postgres)"
        ),
    ] = None,
    only: Annotated[
        str | None,
        typer.Option(
            help="the figures to run, comma-separated (default: all; docs/performance.md)"
        ),
    ] = None,
    quick: Annotated[bool, typer.Option("--quick", help="small sizes (about a minute)")] = False,
    json: Annotated[str | None, typer.Option(help="also write the figures to this file")] = None,
    pg_url: Annotated[
        str | None,
        typer.Option(
            help="a PostgreSQL server where databases may be made (default: 127.0.0.1:5432)"
        ),
    ] = None,
    tasks: Annotated[
        int | None, typer.Option(help="tasks per lifecycle, HTTP and hot-stage run")
    ] = None,
    types: Annotated[
        int | None, typer.Option(help="stage types of the depth and scrape figures")
    ] = None,
    api_processes: Annotated[
        int | None,
        typer.Option(
            help="uvicorn processes serving the HTTP figure on PostgreSQL (default: one per core)"
        ),
    ] = None,
) -> None:
    """Run the benchmark suite: jobnik's figures beside bare-SQL floors measured in the same run.

    Each line names a figure, its backend, jobnik's value, the floor, the unit and their ratio;
    then one line per goal. docs/performance.md lists the figures and the latest results."""
    from jobnik.scripts.bench import NAMES
    from jobnik.scripts.bench import main as bench_main

    if backend not in (None, "postgres", "sqlite", "both"):
        raise typer.BadParameter("postgres, sqlite or both", param_hint="--backend")
    unknown = sorted(set((only or "").replace(" ", "").split(",")) - {"", *NAMES})
    if unknown:
        raise typer.BadParameter(
            f"unknown figure(s) {', '.join(unknown)}; known: {', '.join(NAMES)}",
            param_hint="--only",
        )
    given = {
        "--backend": backend,
        "--only": only,
        "--json": json,
        "--pg-url": pg_url,
        "--tasks": tasks,
        "--types": types,
        "--api-processes": api_processes,
    }
    argv = [part for flag, v in given.items() if v is not None for part in (flag, str(v))]
    raise typer.Exit(bench_main([*argv, *(["--quick"] if quick else [])], prog="jobnik bench"))


@app.command()
def migrate(create_database: CreateDatabase = False) -> None:
    """Create or upgrade the database schema, then exit, saying which it did."""
    from jobnik.projections.store.databases import database_of

    store, schema = migrated(create=True, create_database=create_database)
    store.close()
    typer.echo(f"{database_of(store.env)}: {schema}")


# A dequeue asks for a lease of at most MAX_LEASE_SECONDS (a week; the server refuses more): a
# worker's default lease is three heartbeat intervals, and its handlers hold no task longer.
MOST_HEARTBEAT: Final = MAX_LEASE_SECONDS // 3


def _heartbeat(value: float) -> float:
    if not 0 < value <= MOST_HEARTBEAT:
        raise typer.BadParameter(
            f"a number of seconds above 0, at most {MOST_HEARTBEAT}, not {value:g}"
        )
    return value


def _grace(value: float) -> float:
    if not 0 <= value <= MAX_LEASE_SECONDS:
        raise typer.BadParameter(f"a number of seconds, 0 to {MAX_LEASE_SECONDS}, not {value:g}")
    return value


def _log_level(value: str) -> str:
    if value.upper() not in ("DEBUG", "INFO", "WARNING"):
        raise typer.BadParameter(f"DEBUG, INFO or WARNING, not {value!r}")
    return value.upper()


@worker.command("run")
def worker_run(
    handler: Annotated[
        str, typer.Argument(help="MODULE:FUNCTION, called as FUNCTION(task, context) per task")
    ],
    stage_type: Annotated[
        str, typer.Option("--stage-type", help="the stage type whose tasks to dequeue")
    ],
    concurrency: Annotated[int, typer.Option(min=1, help="tasks handled at once (threads)")] = 1,
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
        float,
        typer.Option(callback=_heartbeat, help="seconds between a running task's lease heartbeats"),
    ] = 10.0,
    grace_period: Annotated[
        float,
        typer.Option(
            callback=_grace,
            help="seconds running handlers get to finish after SIGTERM/SIGINT",
        ),
    ] = 30.0,
    lease_seconds: Annotated[
        int | None,
        typer.Option(
            min=1,
            max=MAX_LEASE_SECONDS,
            help="the lease asked for at each dequeue (default: 3 heartbeat intervals)",
        ),
    ] = None,
    log_level: Annotated[
        str,
        typer.Option(callback=_log_level, help="DEBUG, INFO or WARNING (JSON lines on stderr)"),
    ] = "INFO",
    metrics_port: Annotated[
        int | None,
        typer.Option(
            min=0, max=65535, help="serve Prometheus metrics on this port (0: any free port)"
        ),
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
    hands the rest back to the queue. A 401 or 403 from the API (to the worker, or to its
    handler's calls) stops it the same way, the task handed back, and it exits 2 saying why.
    A status line on stderr counts what it did. With
    OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_TRACES_EXPORTER) set, handler spans are exported, each
    a child of its task's stored traceparent (with the `otel` extra installed)."""
    from jobnik.workers.cli import load_handler, run_worker
    from jobnik.workers.errors import AccessRefused, InvalidUrl

    sys.path.insert(0, os.getcwd())  # handlers in the working directory import as modules
    try:
        loaded = load_handler(handler)
    except (ValueError, ImportError, AttributeError) as exc:
        raise Failure(f"cannot load handler {handler}: {exc}", EXIT_USAGE) from None
    try:
        run_worker(
            loaded,
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
    except InvalidUrl as exc:
        raise Failure(f"--api-url (JOBNIK_API_URL): {exc}", EXIT_USAGE) from None
    except AccessRefused as exc:  # the worker stopped, its tasks handed back: say why
        raise Failure(str(exc), EXIT_USAGE) from None
    except RuntimeError as exc:  # e.g. traces asked for without OpenTelemetry installed
        raise Failure(f"cannot start: {exc}", EXIT_USAGE) from None


def main() -> None:
    app()
