"""A worker's batched reports: many attempts' outcomes in one request, each answered alone."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from jobnik.workers.errors import ApiError, TransportError, UnsendableBody
from jobnik.workers.models import Report, Task

if TYPE_CHECKING:  # (the worker calls this module: a runtime import would go in a circle)
    from jobnik.workers.loop import Worker

REFUSED_RESULT = (400, 413)  # a result the server would not take: reported alone, as FAILED


@dataclass(frozen=True)
class Outcome:
    """What a handler's run comes to: the status to report, and its reason, fatality, result."""

    status: str
    reason: str | None = None
    fatal: bool = False
    result: Any = None


def as_result(value: Any) -> dict[str, Any] | None:
    """A handler's return value as a task result: a dict as is, None as none."""
    if value is None or isinstance(value, dict):
        return value
    return {"value": value}


def report_batch(worker: Worker, ended: list[tuple[Task, Outcome]]) -> None:
    """Report the outcomes in one request. A result the server refuses (the item's or the
    whole request's 400 or 413) goes again alone, where a refused result reports FAILED with
    the reason, as a single report would."""
    reports = [
        Report(
            task,
            o.status,
            result=as_result(o.result) if o.status == "COMPLETED" else None,
            reason=o.reason,
            fatal=o.fatal,
        )
        for task, o in ended
    ]
    try:
        answers = worker.consumer.report_batch(reports)
    except (UnsendableBody, ApiError) as exc:
        if isinstance(exc, ApiError) and exc.status not in REFUSED_RESULT:
            for task, _ in ended:
                worker.refused(task, exc)
            return
        for task, o in ended:
            worker.report_one(task, o)
        return
    except TransportError as exc:
        for task, _ in ended:
            worker.refused(task, exc)
        return
    for (task, o), answer in zip(ended, answers, strict=True):
        if answer.ok:
            worker.reported(task, o, answer.status or "")
        elif answer.http_status in REFUSED_RESULT and o.status == "COMPLETED":
            worker.report_one(task, o)
        else:
            error = ApiError(answer.http_status, answer.code or "", answer.message or "")
            worker.refused(task, error)
