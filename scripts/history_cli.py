"""`jobnik history export JOB_ID` and `jobnik replay JOB_ID`: a job's history, from the event
log or, once the job is archived, from its archive."""

from __future__ import annotations

import itertools
import json
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Annotated
from uuid import UUID

import typer

from jobnik.scripts.failures import Failure
from jobnik.scripts.stores import open_store

if TYPE_CHECKING:
    from jobnik.projections.queries.audit import Entry

history = typer.Typer(
    help="Read a job's history from the event log.",
    no_args_is_help=True,
    rich_markup_mode="markdown",
)


def _entries(job_id: UUID) -> Iterator[Entry]:
    """The job's history, page by page, from the log or else from its archive; a Failure
    naming the job when it has none."""
    from jobnik.domain.errors import JobNotFound
    from jobnik.projections.queries.audit import Audit

    store = open_store()
    audit, after = Audit(store), 0
    try:
        while True:
            try:
                page = audit.job_history(job_id, after, 1000)
            except JobNotFound:
                yield from (_entry(line) for line in _archived(job_id))
                return
            yield from page.items
            if page.next is None:
                return
            after = page.next
    finally:
        store.close()


def _archived(job_id: UUID) -> Iterator[str]:
    """The archived job's history lines; a Failure naming the job when it has no archive (an
    unreachable archive is named by its own error)."""
    from jobnik.domain.errors import JobNotFound
    from jobnik.scripts.archive_cli import open_archiver

    found = open_archiver()
    try:
        yield from found.lines(job_id)
    except JobNotFound:
        raise Failure(f"no job {job_id} in this database (nor in its history)") from None
    finally:
        found.store.close()


def _entry(line: str) -> Entry:
    """An archived history line as the audit's entry."""
    from datetime import datetime

    from jobnik.projections.queries.audit import Entry

    e = json.loads(line)
    return Entry(
        position=e["position"],
        type=e["type"],
        entity=e["entity"],
        entity_id=UUID(e["entityId"]),
        version=e["version"],
        time=datetime.fromisoformat(e["time"]),
        actor=e["actor"],
        reason=e.get("reason"),
        payload=e.get("payload", {}),
        actor_role=e.get("actorRole"),
        trace_id=e.get("traceId"),
    )


JobId = Annotated[UUID, typer.Argument(help="the job's id (a UUID)")]


@history.command("export")
def history_export(job_id: JobId) -> None:
    """Write every event of a job, its stages and its tasks to stdout as NDJSON.

    Deleted jobs keep their history, so this works for them too; an archived job's is read
    from its archive (JOBNIK_ARCHIVE_DIR), as it was written."""
    from jobnik.api.history_schemas import EventOut
    from jobnik.domain.errors import JobNotFound
    from jobnik.projections.queries.audit import Audit

    store = open_store()
    try:
        Audit(store).job_history(job_id, 0, 1)
    except JobNotFound:
        for line in _archived(job_id):
            sys.stdout.write(line + "\n")
        return
    finally:
        store.close()
    for entry in _entries(job_id):
        sys.stdout.write(EventOut.of(entry).model_dump_json(by_alias=True) + "\n")


def replay(job_id: JobId) -> None:
    """Print a job's events as a table: position, time, entity, event, actor, and its status
    change and reason (pauses, aborts, reruns with the reason the operator gave)."""
    entries = _entries(job_id)
    first = next(entries)  # (a job's history is never empty: its creation is in it)
    header = (
        f"{'pos':>7}  {'time':<29}  {'entity':<6}  {'id':<8}  {'event':<24}  {'actor':<6}  details"
    )
    typer.echo(header)
    typer.echo("-" * len(header))
    for e in itertools.chain([first], entries):
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
