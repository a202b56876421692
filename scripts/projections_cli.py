"""`jobnik projections status | rebuild [NAME] | verify [NAME]`: projection versions, blue/green
rebuilds and verification, with a progress bar (events/s, ETA) on stderr."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated

import typer

from jobnik.scripts.failures import EXIT_FAILED
from jobnik.scripts.stores import open_store

if TYPE_CHECKING:
    from rich.progress import Task
    from rich.text import Text


projections = typer.Typer(
    help="Read models (projections of the event log): versions and lag, blue/green rebuilds, "
    "verification against a replay.",
    no_args_is_help=True,
    rich_markup_mode="markdown",
)

Name = Annotated[
    str | None,
    typer.Argument(
        help="inline, last_status, run_stats, operations, activity or schedule_runs (default: "
        "all of them)"
    ),
]


def _names(name: str | None) -> list[str] | None:
    from jobnik.projections.catchup.registry import ALL

    if name is None:
        return None
    known = [p.name for p in ALL]
    if name not in known:
        raise typer.BadParameter(f"unknown projection {name!r}; known: {', '.join(known)}")
    return [name]


@contextmanager
def _progress(label: str) -> Iterator[Callable[[int, int], None]]:
    """A rich progress bar on stderr: events applied of the log's size, events/s and ETA."""
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        ProgressColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )
    from rich.text import Text

    class EventsPerSecond(ProgressColumn):
        def render(self, task: Task) -> Text:
            speed = task.finished_speed or task.speed
            return Text(f"{speed:>9,.0f} events/s" if speed else "        - events/s")

    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        EventsPerSecond(),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        console=Console(stderr=True),
        transient=False,
    ) as bar:
        task = bar.add_task(label, total=None)

        def show(done: int, total: int) -> None:
            bar.update(task, completed=done, total=max(total, done))

        yield show


@projections.command("status")
def status_command() -> None:
    """Show each read model's code version, the version that built its rows, its log position
    and its lag."""
    from jobnik.projections.catchup.registry import status

    store = open_store()
    try:
        lines = status(store)
    finally:
        store.close()
    header = (
        f"{'projection':<13} {'version':>7} {'built':>5} {'position':>10} {'lag':>8}  "
        f"{'rebuilt at':<25} state"
    )
    typer.echo(header)
    typer.echo("-" * len(header))
    for s in lines:
        if s.built_version is None:
            state = "not registered (run `jobnik migrate`)"
        elif s.stale:
            state = f"STALE: built by version {s.built_version}, rebuild it"
        elif s.inline:
            state = "current (inline: written with every command)"
        else:
            state = "caught up" if s.lag == 0 else "catching up"
        rebuilt = s.rebuilt_at.isoformat(timespec="seconds") if s.rebuilt_at else "never"
        typer.echo(
            f"{s.name:<13} {s.version:>7} {s.built_version or '-':>5} {s.position:>10} "
            f"{s.lag:>8}  {rebuilt:<25} {state}"
        )


@projections.command("rebuild")
def rebuild_command(name: Name = None) -> None:
    """Rebuild read models from the event log, blue/green.

    Fresh tables are filled from the log while the API keeps serving the old ones, then swapped
    in by one transaction; writers wait only for the swap. Exit status 3: another rebuild or
    verify is running."""
    from jobnik.api.settings import Settings
    from jobnik.projections.rebuild.bluegreen import rebuild

    names = _names(name)
    settings = Settings()
    store = open_store(settings)
    started = time.perf_counter()
    try:
        with _progress("rebuild") as show:
            count = rebuild(store, show, names=names, processes=settings.rebuild_processes)
    finally:
        store.close()
    took = time.perf_counter() - started
    typer.echo(
        f"rebuilt {name or 'all projections'} from {count} events in {took:.1f}s "
        f"({count / max(took, 1e-9):,.0f} events/s)"
    )


@projections.command("verify")
def verify_command(name: Name = None) -> None:
    """Replay the log into fresh tables and list every row that differs from the live one.

    Exit status 1 when a row differs, 3 when another rebuild or verify is running."""
    from jobnik.api.settings import Settings
    from jobnik.projections.rebuild.verify import verify

    names = _names(name)
    settings = Settings()
    store = open_store(settings)
    try:
        with _progress("verify") as show:
            differences = verify(store, show, names=names, processes=settings.rebuild_processes)
    finally:
        store.close()
    for d in differences:
        typer.echo(d.describe())
    if differences:
        typer.echo(f"{len(differences)} row(s) differ from a replay of the log", err=True)
        raise typer.Exit(EXIT_FAILED)
    typer.echo(f"{name or 'all projections'}: every row equals a replay of the log")
