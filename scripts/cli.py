"""The `jobnik` command: serve the API, migrate, rebuild projections."""

from __future__ import annotations

import os
import sys
import time
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from jobnik.projections.store import SqlStore

app = typer.Typer(
    help="jobnik: an event-sourced workflow engine speaking Jobnik's v1 API.", no_args_is_help=True
)
projections = typer.Typer(
    help="Read models: rebuild them from the event log.", no_args_is_help=True
)
app.add_typer(projections, name="projections")


def _store() -> SqlStore:
    from jobnik.projections.config import library_env
    from jobnik.projections.store import SqlStore

    store = SqlStore(library_env(os.environ))
    store.migrate()
    return store


@app.command()
def serve(
    host: Annotated[str, typer.Option(help="interface to bind")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port")] = 8080,
    workers: Annotated[int, typer.Option(help="API processes (PostgreSQL only for >1)")] = 1,
) -> None:
    """Start the HTTP API (SQLite file ./jobnik.db unless JOBNIK_DATABASE_URL is set)."""
    import uvicorn

    _store().close()  # create or upgrade the schema once, before any worker starts
    uvicorn.run(
        "jobnik.scripts.asgi:create",
        factory=True,
        host=host,
        port=port,
        workers=workers,
        log_level="info",
    )


@app.command()
def migrate() -> None:
    """Create or upgrade the database schema."""
    _store().close()
    typer.echo("schema is up to date")


@projections.command("rebuild")
def rebuild_command() -> None:
    """Recreate every inline read model from the event log alone."""
    from jobnik.projections.rebuild import rebuild

    store = _store()
    started = time.perf_counter()

    def show(n: int) -> None:
        rate = n / max(time.perf_counter() - started, 1e-9)
        sys.stderr.write(f"\r{n} events replayed ({rate:,.0f} events/s)")

    count = rebuild(store, show)
    sys.stderr.write("\n")
    typer.echo(f"rebuilt read models from {count} events")
    store.close()


def main() -> None:
    app()
