"""What the `jobnik` command says when a command fails: one sentence on stderr and an exit status,
never a traceback, for every error a user can cause. `--debug` (or JOBNIK_DEBUG=1) lets the
error through with its traceback.

Exit statuses: 0 done; 1 the command failed (what it names does not exist, rows differ, ...);
2 a bad argument or setting (the command line's own usage errors exit 2 as well); 3 another
rebuild or verify is running; 4 the database is missing or cannot be reached. A command whose
reader goes away (`jobnik replay ... | head`) stops saying nothing, with status 1.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Final

import typer
from typer.core import TyperGroup

EXIT_FAILED: Final = 1
EXIT_USAGE: Final = 2
EXIT_BUSY: Final = 3
EXIT_DATABASE: Final = 4
EXIT_STATUSES: Final = (
    "Exit status: 0 done, 1 failed, 2 a bad argument or setting, 3 another rebuild or verify "
    "is running, 4 the database is missing or cannot be reached."
)


class Failure(Exception):
    """A command's failure, said in one sentence, with its exit status."""

    def __init__(self, message: str, status: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.message, self.status = message, status


def explain(exc: Exception) -> Failure:
    """The sentence and exit status for `exc`."""
    if isinstance(exc, Failure):
        return exc
    if isinstance(exc, ImportError):  # (the modules below would not load either)
        return Failure(f"a module jobnik needs does not load: {exc}")
    from jobnik.api.settings import InvalidSettings
    from jobnik.domain.errors import DatabaseError, JobnikError, StoreInUse
    from jobnik.projections.rebuild.bluegreen import RebuildBusy

    if isinstance(exc, InvalidSettings):
        return Failure(f"a setting does not parse: {exc}", EXIT_USAGE)
    if isinstance(exc, RebuildBusy):
        return Failure(str(exc), EXIT_BUSY)
    if isinstance(exc, StoreInUse):  # a second server on a SQLite file
        return Failure(exc.message, EXIT_USAGE)
    if isinstance(exc, DatabaseError):
        return Failure(exc.message, EXIT_DATABASE)
    if isinstance(exc, JobnikError):
        return Failure(exc.message)
    if isinstance(exc, OSError):  # a file that cannot be read or written, a port in use, ...
        return Failure(str(exc))
    return Failure(
        f"unexpected error ({type(exc).__name__}: {exc}); `jobnik --debug ...` shows where"
    )


class JobnikGroup(TyperGroup):
    """The command line's root: a command's error becomes one sentence and an exit status
    (`explain`), unless `--debug` (or JOBNIK_DEBUG) asks for the traceback."""

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except Exception as exc:
            # the command line's own (usage errors, exit statuses) and --debug: as they are
            if type(exc).__module__.startswith("typer.") or ctx.params.get("debug"):
                raise
            if isinstance(exc, BrokenPipeError):  # its reader went away (`jobnik replay | head`)
                _quiet_stdout()
                raise typer.Exit(EXIT_FAILED) from None
            failure = explain(exc)
            typer.echo(f"jobnik: {failure.message}", err=True)
            raise typer.Exit(failure.status) from None


def _quiet_stdout() -> None:
    """Point stdout at /dev/null, so that the interpreter's last flush of what is left for a
    reader that went away fails no more."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
