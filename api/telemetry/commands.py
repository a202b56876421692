"""Commands observed at the edge: `ObservedCommands` wraps the command service the routes call.

Each command call gets a span `jobnik.<command>` (when a tracer is given) whose `jobnik.*`
attributes name what it worked on: the ids its arguments name, then, from what it returned,
the job's name, priority and status, the stage's id, type and status, the task's id, status and
attempts (the fields Jobnik's manager puts on its spans). The same ids go to the request's log
line (`note_touched`). The domain stays free of all this: the wrapper reads results, and the
domain never imports it.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any, Final
from uuid import UUID

from jobnik.api.telemetry.requests import note_touched
from jobnik.domain.application import Jobnik
from jobnik.domain.errors import DatabaseError, JobnikError
from jobnik.domain.jobs import Job
from jobnik.domain.stages import Stage
from jobnik.domain.tasks import Task
from jobnik.domain.work import Beat

ID_ARGUMENTS: Final = ("job_id", "stage_id", "task_id")


def attributes(result: object) -> dict[str, str | int]:
    """The `jobnik.*` span attributes of a command's result."""
    if isinstance(result, Beat):
        result = result.task
    if isinstance(result, Job):
        return {
            "jobnik.job.id": str(result.id),
            "jobnik.job.name": result.name,
            "jobnik.job.priority": str(result.priority),
            "jobnik.job.status": str(result.status),
        }
    if isinstance(result, Stage):
        return {
            "jobnik.job.id": str(result.job_id),
            "jobnik.stage.id": str(result.id),
            "jobnik.stage.type": result.type,
            "jobnik.stage.status": str(result.status),
        }
    if isinstance(result, Task):
        return {
            "jobnik.job.id": str(result.job_id),
            "jobnik.stage.id": str(result.stage_id),
            "jobnik.stage.type": result.stage_type,
            "jobnik.task.id": str(result.id),
            "jobnik.task.status": str(result.status),
            "jobnik.task.attempts": result.attempts,
        }
    if isinstance(result, Sequence) and result and isinstance(result[0], Task):
        first: Task = result[0]
        return {
            "jobnik.job.id": str(first.job_id),
            "jobnik.stage.id": str(first.stage_id),
            "jobnik.stage.type": first.stage_type,
            "jobnik.task.count": len(result),
        }
    return {}


def _touched(found: dict[str, str | int]) -> dict[str, str]:
    """The log fields (job_id, stage_id, task_id, task_count) of `found` span attributes."""
    out = {}
    for key in ("job.id", "stage.id", "task.id", "task.count"):
        value = found.get("jobnik." + key)
        if value is not None:
            out[key.replace(".", "_")] = str(value)
    return out


class ObservedCommands:
    """`jobnik` with every public method call observed (see the module); any other attribute
    is `jobnik`'s own. `tracer`: an OpenTelemetry tracer, or None for no spans."""

    def __init__(self, jobnik: Jobnik, tracer: Any = None) -> None:
        self._jobnik, self._tracer = jobnik, tracer
        self._ids: dict[str, tuple[tuple[int, str], ...]] = {}

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._jobnik, name)
        if name.startswith("_") or not inspect.ismethod(target):
            return target
        return lambda *args, **kwargs: self._call(name, target, args, kwargs)

    def _id_positions(self, name: str, method: Callable[..., Any]) -> tuple[tuple[int, str], ...]:
        """Where `method`'s job_id, stage_id and task_id arguments are (cached per command)."""
        found = self._ids.get(name)
        if found is None:
            params = list(inspect.signature(method).parameters)
            found = tuple((params.index(p), p) for p in ID_ARGUMENTS if p in params)
            self._ids[name] = found
        return found

    def _argument_ids(
        self, name: str, method: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> dict[str, str | int]:
        out: dict[str, str | int] = {}
        for index, param in self._id_positions(name, method):
            value = args[index] if index < len(args) else kwargs.get(param)
            if isinstance(value, UUID):
                out["jobnik." + param.replace("_id", ".id")] = str(value)
        return out

    def _call(
        self, name: str, method: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        given = self._argument_ids(name, method, args, kwargs)
        note_touched(**_touched(given))
        if self._tracer is None:
            result = method(*args, **kwargs)
            note_touched(**_touched(attributes(result)))
            return result
        with self._tracer.start_as_current_span(
            f"jobnik.{name}", attributes=given, set_status_on_exception=False
        ) as span:
            try:
                result = method(*args, **kwargs)
            except Exception as exc:
                refused = isinstance(exc, JobnikError) and not isinstance(exc, DatabaseError)
                span.set_attribute("error.type", getattr(exc, "code", type(exc).__name__))
                if not refused:  # a refusal (a 4xx) is an answer, not a fault of the server
                    span.set_status(_error_status())
                raise
            found = attributes(result)
            span.set_attributes(found)
            note_touched(**_touched(found))
            if name == "dequeue" and isinstance(result, Task):
                link_to_stored_trace(span, result.traceparent)
            elif name == "dequeue_batch":
                for task in result:  # each task's creation trace, as a single dequeue links it
                    link_to_stored_trace(span, task.traceparent)
            return result


def _error_status() -> Any:
    from opentelemetry.trace import Status, StatusCode

    return Status(StatusCode.ERROR)


def link_to_stored_trace(span: Any, traceparent: str) -> None:
    """Link `span` to the trace a task was created in (a dequeue starts no trace of its own:
    the worker's handler span, a child of that stored context, continues it)."""
    from opentelemetry import propagate, trace

    stored = trace.get_current_span(propagate.extract({"traceparent": traceparent}))
    context = stored.get_span_context()
    if context.is_valid:
        span.add_link(context)
