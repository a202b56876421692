"""The search box on every console page: an id (or its first digits) leads to its page; several
matches are listed to choose from; none says so (a deleted job's id leads to its history, an
archived job's whole id to its page, which sends on to its archive record)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from uuid import UUID

from jobnik.domain.errors import InvalidRequest, JobNotFound
from jobnik.projections.queries.audit import Audit
from jobnik.projections.queries.lookup import Found, Lookup


def link(found: Found) -> str:
    """The console page of what was found: a job's page; a stage's or a task's on its job's."""
    if found.kind == "job":
        return f"/ui/jobs/{found.id}"
    if found.kind == "stage":
        return f"/ui/jobs/{found.job_id}?stage={found.id}#tasks-title"
    return f"/ui/jobs/{found.job_id}?stage={found.stage_id}&task={found.id}#tasks-title"


@dataclass(frozen=True)
class Answer:
    """Where to go (one match), or the page to show and its status."""

    query: str
    status: int = 200
    go: str | None = None
    found: list[tuple[Found, str]] = field(default_factory=list)
    error: str | None = None
    deleted_job: UUID | None = None


def _has_history(audit: Audit, text: str) -> bool:
    """Whether `text` is the id of a job the log knows (one deleted since, when no page has it)."""
    try:
        audit.job_history(UUID(text), 0, 1)
    except (ValueError, JobNotFound):
        return False
    return True


def _archived(text: str, archived: Callable[[UUID], bool]) -> bool:
    try:
        return archived(UUID(text))
    except ValueError:
        return False


def search(
    lookup: Lookup, audit: Audit, text: str, archived: Callable[[UUID], bool] = lambda _: False
) -> Answer:
    """`text`'s answer; `archived` says whether a job id is an archived job's."""
    text = text.strip()
    try:
        found = lookup.find(text)
    except InvalidRequest as exc:
        return Answer(text, 400, error=exc.message)
    if len(found) == 1:
        return Answer(text, 303, go=link(found[0]))
    if found:
        return Answer(text, found=[(f, link(f)) for f in found])
    if _has_history(audit, text):
        return Answer(text, 404, deleted_job=UUID(text))
    if _archived(text, archived):
        return Answer(text, 303, go=f"/ui/jobs/{UUID(text)}")
    return Answer(
        text, 404, error=f"No job, stage or task has an id that is or starts with '{text}'."
    )
