"""`jobnik archive run [--dry-run] | verify | retention [NAME --seconds N | --default]`.

Works on the database and the archive directory the environment names (JOBNIK_DATABASE_URL,
JOBNIK_ARCHIVE_DIR, JOBNIK_RETENTION_SECONDS), as `jobnik projections` does. A run archives what
the sweeper's next rounds would, at once, by `cli:<user>`; a period's change is an event naming
`cli:<user>` too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from jobnik.scripts.failures import EXIT_BUSY, EXIT_FAILED, EXIT_USAGE, Failure
from jobnik.scripts.stores import open_store
from jobnik.scripts.tokens_cli import cli_principal

if TYPE_CHECKING:
    from jobnik.api.archives import Archiver

archive = typer.Typer(
    help="Archives: ended jobs past their retention period leave the live log for files.",
    no_args_is_help=True,
    rich_markup_mode="markdown",
)


def open_archiver() -> Archiver:
    """The archiver the environment's settings configure, on its store (the caller closes it)."""
    from jobnik.api.archives import Archiver
    from jobnik.api.settings import Settings

    settings = Settings()
    return Archiver.of(open_store(settings), settings)


@archive.command("run")
def run(
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="list the jobs due, archive none")
    ] = False,
    share: Annotated[
        float | None,
        typer.Option(
            min=0.01,
            max=1.0,
            help="the most of its time the run spends archiving, paused between batches "
            "(default JOBNIK_ARCHIVE_SHARE); 1: batch after batch, for a quiet hour",
        ),
    ] = None,
) -> None:
    """Archive the jobs whose retention period has run out, batch after batch, until none is
    due (JOBNIK_ARCHIVE_BATCH jobs a transaction), paced as the sweeper paces itself through a
    backlog. Prints each job archived (or due)."""
    archiver = open_archiver()
    if archiver.directory is None:
        raise Failure("JOBNIK_ARCHIVE_DIR names no archive directory", EXIT_USAGE)
    if share is not None:
        archiver.share = share
    by = cli_principal()
    total = 0
    try:
        for done in [archiver.run(dry_run=True)] if dry_run else archiver.runs(by=by):
            if done.busy:
                raise Failure("a rebuild or verify is running: try again after it", EXIT_BUSY)
            for c in done.due:
                if dry_run or c.job_id in done.archived:
                    typer.echo(f"{c.job_id}  {c.name}  ended {c.ended_at.isoformat()}")
            total += len(done.archived)
    finally:
        archiver.store.close()
    if not dry_run:
        typer.echo(f"{total} job(s) archived to {archiver.directory}", err=True)


@archive.command("verify")
def verify() -> None:
    """Check every archive against its record: the file is there, its checksum is the
    record's, and it holds the record's number of events. Exit 1 when one does not."""
    archiver = open_archiver()
    try:
        problems = list(archiver.verify())
    finally:
        archiver.store.close()
    for p in problems:
        typer.echo(f"{p.job_id}  {p.location}: {p.problem}")
    if problems:
        raise Failure(f"{len(problems)} archive(s) do not match their records", EXIT_FAILED)
    typer.echo("every archive matches its record", err=True)


@archive.command("retention")
def retention(
    name: Annotated[str | None, typer.Argument(help="a job name (none: list the policy)")] = None,
    seconds: Annotated[
        int | None, typer.Option(help="archive the name's jobs this long after they end")
    ] = None,
    default: Annotated[
        bool, typer.Option("--default", help="the name follows the server's default again")
    ] = False,
    reason: Annotated[str | None, typer.Option(help="why (recorded on the event)")] = None,
) -> None:
    """Show the retention policy, or set one job name's period (--seconds) or give it back to
    the default (--default)."""
    from jobnik.api.schemas import JOB_NAME_MAX, JOB_NAME_MIN
    from jobnik.domain.archives import RetentionCommands
    from jobnik.domain.commands import utcnow
    from jobnik.domain.errors import InvalidRetentionPeriod
    from jobnik.projections.queries.archives import retention as periods

    archiver = open_archiver()
    try:
        if name is not None:
            if (seconds is None) == (not default):
                raise Failure("give --seconds N or --default with a name", EXIT_USAGE)
            if not JOB_NAME_MIN <= len(name) <= JOB_NAME_MAX:  # (as PUT /v1/retention/{name})
                raise Failure(
                    f"a job name is {JOB_NAME_MIN} to {JOB_NAME_MAX} characters, not {len(name)}: "
                    "no job could have this one",
                    EXIT_USAGE,
                )
            commands = RetentionCommands(archiver.store, utcnow)
            try:
                commands.set_retention(name, seconds, by=cli_principal(), reason=reason)
            except InvalidRetentionPeriod as exc:  # a bad --seconds
                raise Failure(exc.message, EXIT_USAGE) from None
        found = periods(archiver.store)
    finally:
        archiver.store.close()
    default_seconds = archiver.default_seconds
    typer.echo(f"default: {f'{default_seconds} s' if default_seconds else 'keep forever'}")
    for r in found:
        typer.echo(f"{r.name}: {r.period_seconds} s (set by {r.set_by}, {r.set_time.isoformat()})")
