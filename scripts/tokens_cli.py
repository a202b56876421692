"""`jobnik tokens create | list | revoke`: bearer tokens, managed on the database directly.

The command line works on the database the environment names, as `jobnik migrate` does, not
through the API: whoever can reach the database with its credentials holds every power already
(they could write the event log), the first admin token needs no token to make, and tokens can
be revoked while every server is down. Each command is an event in the log, by `cli:<user>`.
"""

from __future__ import annotations

import getpass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Annotated

import typer

from jobnik.scripts.durations import parse_duration
from jobnik.scripts.stores import open_store

if TYPE_CHECKING:
    from jobnik.domain.principals import Principal

tokens = typer.Typer(
    help="Bearer tokens: create (prints the secret once), list, revoke.",
    no_args_is_help=True,
    rich_markup_mode="markdown",
)
ROLES = "reader, producer, operator, admin or worker"


def cli_principal() -> Principal:
    from jobnik.domain.principals import Principal, Role

    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no name for this uid
        user = "unknown"
    return Principal(f"cli:{user}", Role.ADMIN)


def _expiry(lifetime: timedelta) -> datetime:
    """When a token of this `--expires` lifetime expires, from now."""
    if lifetime <= timedelta(0):
        raise typer.BadParameter("a token's lifetime is above 0", param_hint="--expires")
    try:
        return datetime.now(UTC) + lifetime
    except OverflowError:
        raise typer.BadParameter(
            "the expiry would be after the year 9999", param_hint="--expires"
        ) from None


@tokens.command("create")
def create(
    name: Annotated[str, typer.Argument(help="the token's name, shown as the actor of its events")],
    role: Annotated[str, typer.Option(help=ROLES)],
    stage_type: Annotated[
        list[str] | None,
        typer.Option("--stage-type", help="worker tokens: a stage type it may work on (repeat)"),
    ] = None,
    expires: Annotated[
        str | None, typer.Option(help="lifetime, e.g. 12h or 30d (default: until revoked)")
    ] = None,
) -> None:
    """Issue a token and print its secret: the only time it is shown."""
    from jobnik.domain.application import Jobnik
    from jobnik.domain.errors import JobnikError
    from jobnik.domain.principals import Role

    try:
        chosen = Role(role)
    except ValueError:
        raise typer.BadParameter(f"{role!r} is not a role: {ROLES}") from None
    expires_at = _expiry(parse_duration(expires)) if expires is not None else None
    store = open_store(create=True)  # the first admin token may come before the first server
    try:
        by = cli_principal()
        issued = Jobnik(store).issue_token(
            name, chosen, stage_types=stage_type or [], expires_at=expires_at, by=by
        )
    except JobnikError as exc:
        typer.echo(f"cannot create token: {exc.message}", err=True)
        raise typer.Exit(1) from None
    finally:
        store.close()
    typer.echo(
        f"token '{name}' ({chosen}) created; its secret, shown only now "
        "(send it as Authorization: Bearer SECRET, or JOBNIK_TOKEN for the SDK and workers):",
        err=True,
    )
    typer.echo(issued.bearer)


@tokens.command("list")
def list_tokens() -> None:
    """Every token: name, role, stage types, expiry, who issued it, and revocation."""
    from jobnik.projections.queries.tokens import TokenViews

    store = open_store()
    try:
        rows = TokenViews(store).all()
    finally:
        store.close()
    now = datetime.now(UTC)
    lines = [("name", "role", "state", "expires", "issued by", "types")]
    for r in rows:
        state = "revoked" if r.revoked_at else ("active" if r.active(now) else "expired")
        expiry = f"{r.expires_at.astimezone(UTC):%Y-%m-%dT%H:%MZ}" if r.expires_at else "-"
        types = ",".join(r.stage_types) or "-"
        lines.append((r.name, str(r.role), state, expiry, r.issued_by, types))
    widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]) - 1)]
    for line in lines:  # each column as wide as its widest cell; the last one as it is
        typer.echo(" ".join([*(c.ljust(w) for c, w in zip(line, widths, strict=False)), line[-1]]))


@tokens.command("revoke")
def revoke(name: Annotated[str, typer.Argument(help="the token's name")]) -> None:
    """Revoke a token: every server refuses it within a second."""
    from jobnik.domain.application import Jobnik
    from jobnik.domain.errors import JobnikError

    store = open_store()
    try:
        by = cli_principal()
        changed = Jobnik(store).revoke_token(name, by=by)
    except JobnikError as exc:
        typer.echo(f"cannot revoke token: {exc.message}", err=True)
        raise typer.Exit(1) from None
    finally:
        store.close()
    typer.echo(f"token '{name}' revoked" if changed else f"token '{name}' was revoked already")
