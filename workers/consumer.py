"""Consumer: dequeue tasks and report on them, fenced by attempt number."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote

from jobnik.workers.client import JobnikClient, client_of
from jobnik.workers.models import ChildJob, Heartbeat, Report, Reported, Task


class Consumer:
    """Dequeue, complete, fail, heartbeat and log, for one task attempt at a time."""

    def __init__(
        self, client: JobnikClient | str | None = None, *, token: str | None = None
    ) -> None:
        """`client`: a client, or the API's URL (then `token` is its bearer token, if any);
        without them, JOBNIK_API_URL and JOBNIK_TOKEN (see JobnikClient)."""
        self.client = client_of(client, token)

    def dequeue(self, stage_type: str, lease_seconds: int | None = None) -> Task | None:
        """The next task of `stage_type` (now IN_PROGRESS, leased to you), or None.

        `lease_seconds`: how long the task stays yours without a heartbeat (server default:
        30 minutes, for clients that never heartbeat)."""
        params = {"lease_seconds": lease_seconds} if lease_seconds else None
        body = self.client.patch(
            f"/v1/stages/{quote(stage_type, safe='')}/tasks/dequeue", params=params, ok_404=True
        )
        return Task.from_json(body) if body else None

    def dequeue_batch(
        self, stage_type: str, count: int, lease_seconds: int | None = None
    ) -> list[Task]:
        """Up to `count` tasks of `stage_type` in one request (jobnik), each its own attempt
        and lease; an empty list when none is queued."""
        params: dict[str, Any] = {"count": count}
        if lease_seconds:
            params["lease_seconds"] = lease_seconds
        body = self.client.patch(
            f"/v1/stages/{quote(stage_type, safe='')}/tasks/dequeue", params=params
        )
        return [Task.from_json(t) for t in body]

    def report_batch(self, reports: Sequence[Report]) -> list[Reported]:
        """Many tasks' outcomes in one request (jobnik); each is answered on its own, in
        order (a stale attempt refuses that item only)."""
        answers = self.client.put("/v1/tasks/status", [r.body() for r in reports])
        return [Reported.from_json(a) for a in answers]

    def _report(self, task: Task, status: str, **extra: Any) -> Task:
        body: dict[str, Any] = {"status": status, **extra}
        if task.attempt is not None:
            body["attempt"] = task.attempt
        return Task.from_json(self.client.put(f"/v1/tasks/{task.id}/status", body))

    def complete(self, task: Task, result: Mapping[str, Any] | None = None) -> Task:
        """COMPLETED, with the task's `result` (kept, shown, handed to a parent task)."""
        return self._report(task, "COMPLETED", **({"result": dict(result)} if result else {}))

    def delegate(self, task: Task) -> Task:
        """DELEGATED: the task created child jobs (parentTaskId) and waits for them to end."""
        return self._report(task, "DELEGATED")

    def children(self, task: Task) -> list[ChildJob]:
        """The task's child jobs with their outcomes and their tasks' results."""
        return [ChildJob.from_json(c) for c in self.client.get(f"/v1/tasks/{task.id}/children")]

    def fail(self, task: Task, reason: str | None = None, *, fatal: bool = False) -> Task:
        """FAILED; the server retries while attempts remain, unless `fatal`."""
        extra: dict[str, Any] = {"fatal": fatal} if fatal else {}
        if reason:
            extra["reason"] = reason[:2000]
        return self._report(task, "FAILED", **extra)

    def heartbeat(self, task: Task) -> Heartbeat:
        """Extend the lease; the answer says whether the task was cancelled meanwhile."""
        return Heartbeat.from_json(
            self.client.post(f"/v1/tasks/{task.id}/heartbeat", {"attempt": task.attempt})
        )

    def give_back(self, task: Task, reason: str = "worker shutting down") -> Task:
        """Return an unfinished task to the queue without spending an attempt."""
        return Task.from_json(
            self.client.post(
                f"/v1/tasks/{task.id}/release", {"attempt": task.attempt, "reason": reason}
            )
        )

    def log(self, task: Task, lines: Sequence[str]) -> None:
        """Append lines to the task's log (append-only, kept in the event log)."""
        self.client.post(
            f"/v1/tasks/{task.id}/logs", {"attempt": task.attempt, "lines": list(lines)}
        )
