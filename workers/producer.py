"""Producer: create and steer jobs, stages and tasks."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any
from urllib.parse import quote

from jobnik.workers.client import JobnikClient, client_of
from jobnik.workers.models import Job, Limit, Rerun, Schedule, ScheduleRun, Stage, Task
from jobnik.workers.timing import RetryPolicy, instant, timing


def _with_reason(body: dict[str, Any], reason: str | None) -> dict[str, Any]:
    return {**body, "reason": reason} if reason is not None else body


class Producer:
    """Creates jobs, stages and tasks; pauses, resumes, aborts, re-prioritises, deletes and
    reruns them; creates and steers schedules."""

    def __init__(
        self, client: JobnikClient | str | None = None, *, token: str | None = None
    ) -> None:
        """`client`: a client, or the API's URL (then `token` is its bearer token, if any);
        without them, JOBNIK_API_URL and JOBNIK_TOKEN (see JobnikClient)."""
        self.client = client_of(client, token)

    def create_job(
        self,
        name: str,
        data: Mapping[str, Any],
        *,
        priority: str = "MEDIUM",
        user_metadata: Mapping[str, Any] | None = None,
        mode: str | None = None,
        parent_task_id: str | None = None,
        not_before: datetime | None = None,
        retry_policy: RetryPolicy | None = None,
        deadline: datetime | None = None,
        schedule_to_start_seconds: int | None = None,
        fairness_key: str | None = None,
        fairness_weight: int | None = None,
        concurrency_key: str | None = None,
    ) -> Job:
        """`mode`: "runOnce" (default) or "standard" (open until `finish`); `parent_task_id`:
        a child job of that running task (see TaskContext.create_child_job); `not_before` (an
        aware datetime): its tasks are not dequeued before it; `retry_policy`: its stages'
        default (else the server's); `deadline`: it fails if it has not ended by then;
        `schedule_to_start_seconds`: its stages' default for how long a queued task may wait
        to be dequeued before it expires (fails, cause "expired"); `fairness_key`: at a stage
        type whose queue order is fair, the jobs of one key take their turns as one;
        `fairness_weight`: there, its tasks (or its key's) take this many places at each turn;
        `concurrency_key`: at a stage type with a per-key limit, the jobs of one key share its
        tasks in progress (without one, the job is its own key)."""
        body: dict[str, Any] = {
            "name": name,
            "data": dict(data),
            "priority": priority,
            "userMetadata": dict(user_metadata or {}),
            **timing(not_before, retry_policy, deadline, schedule_to_start_seconds),
        }
        if mode is not None:
            body["mode"] = mode
        if parent_task_id is not None:
            body["parentTaskId"] = parent_task_id
        if fairness_key is not None:
            body["fairnessKey"] = fairness_key
        if fairness_weight is not None:
            body["fairnessWeight"] = fairness_weight
        if concurrency_key is not None:
            body["concurrencyKey"] = concurrency_key
        return Job.from_json(self.client.post("/v1/jobs", body))

    def finish(self, job_id: str) -> Job:
        """Close the job to new stages and tasks; it completes when its work is done."""
        return Job.from_json(self.client.post(f"/v1/jobs/{job_id}/finish", None))

    def create_stage(
        self,
        job_id: str,
        type: str,
        data: Mapping[str, Any],
        *,
        user_metadata: Mapping[str, Any] | None = None,
        start_as_waiting: bool = False,
        completion: bool = False,
        failure_patterns: Sequence[str] = (),
        not_before: datetime | None = None,
        retry_policy: RetryPolicy | None = None,
        deadline: datetime | None = None,
        schedule_to_start_seconds: int | None = None,
    ) -> Stage:
        """`completion`: runs after every normal stage completed; `failure_patterns`: regular
        expressions that turn a matching COMPLETED result into a failure; `not_before`: its
        tasks are not dequeued before it; `retry_policy`: its tasks' (else the job's);
        `deadline`: it fails, with its job, if it has not ended by then;
        `schedule_to_start_seconds`: a queued task of it not dequeued within this many seconds
        expires (fails, cause "expired", and fails the stage and job; else the job's)."""
        body: dict[str, Any] = {
            "type": type,
            "data": dict(data),
            "userMetadata": dict(user_metadata or {}),
            "startAsWaiting": start_as_waiting,
            **timing(not_before, retry_policy, deadline, schedule_to_start_seconds),
        }
        if completion:
            body["completion"] = True
        if failure_patterns:
            body["failurePatterns"] = list(failure_patterns)
        return Stage.from_json(self.client.post(f"/v1/jobs/{job_id}/stage", body))

    def create_tasks(
        self,
        stage_id: str,
        tasks: Iterable[Mapping[str, Any]],
        *,
        max_attempts: int | None = None,
        batch: int = 1000,
        not_before: datetime | None = None,
    ) -> list[Task]:
        """Each item is a task's `data`; posted in batches of `batch`. `not_before`: not
        dequeued before it (nor before its stage's or job's)."""
        items = [dict(t) for t in tasks]
        common: dict[str, Any] = {"maxAttempts": max_attempts} if max_attempts else {}
        if not_before is not None:
            common["notBefore"] = instant(not_before)
        created: list[Task] = []
        for start in range(0, len(items), batch):
            body = [{"data": d, **common} for d in items[start : start + batch]]
            created += [
                Task.from_json(t) for t in self.client.post(f"/v1/stages/{stage_id}/tasks", body)
            ]
        return created

    def reschedule_task(self, task_id: str, not_before: datetime | None, *, reason: str) -> Task:
        """Bring a queued task forward or postpone it (None: dequeueable at once); `reason` is
        recorded. ApiError 400 TASK_NOT_QUEUED once a worker took it."""
        return Task.from_json(self._reschedule(f"/v1/tasks/{task_id}", not_before, reason))

    def reschedule_stage(self, stage_id: str, not_before: datetime | None, *, reason: str) -> Stage:
        """The stage's new not-before time, for its queued tasks and those added later."""
        return Stage.from_json(self._reschedule(f"/v1/stages/{stage_id}", not_before, reason))

    def reschedule_job(self, job_id: str, not_before: datetime | None, *, reason: str) -> Job:
        """The job's new not-before time, for its queued tasks and those added later."""
        return Job.from_json(self._reschedule(f"/v1/jobs/{job_id}", not_before, reason))

    def _reschedule(self, path: str, not_before: datetime | None, reason: str) -> Any:
        body = {"notBefore": None if not_before is None else instant(not_before), "reason": reason}
        return self.client.patch(f"{path}/not-before", body)

    def job(self, job_id: str) -> Job:
        return Job.from_json(self.client.get(f"/v1/jobs/{job_id}"))

    def stage(self, stage_id: str) -> Stage:
        return Stage.from_json(self.client.get(f"/v1/stages/{stage_id}"))

    def _status(self, job_id: str, status: str, reason: str | None) -> None:
        self.client.put(f"/v1/jobs/{job_id}/status", _with_reason({"status": status}, reason))

    def pause(self, job_id: str, *, reason: str | None = None) -> None:
        """`reason` (on every operator command here): recorded in the job's history."""
        self._status(job_id, "PAUSED", reason)

    def resume(self, job_id: str, *, reason: str | None = None) -> None:
        self._status(job_id, "PENDING", reason)

    def abort(self, job_id: str, *, reason: str | None = None) -> None:
        """Cancel the job, its stages and queued tasks; running handlers are told to stop."""
        self._status(job_id, "ABORTED", reason)

    def set_priority(self, job_id: str, priority: str, *, reason: str | None = None) -> None:
        body = _with_reason({"priority": priority}, reason)
        self.client.patch(f"/v1/jobs/{job_id}/priority", body)

    def delete_job(self, job_id: str, *, reason: str | None = None) -> None:
        """Delete a job that has ended; its history stays."""
        params = {"reason": reason} if reason is not None else None
        self.client.request("DELETE", f"/v1/jobs/{job_id}", params=params)

    def rerun_task(self, task_id: str, *, reason: str | None = None) -> Rerun:
        """Run a FAILED or ABORTED task again with a fresh attempt budget (its stage and job
        reopen); refused (ApiError) while other tasks of its stage failed: rerun the stage."""
        return Rerun.from_json(
            self.client.post(f"/v1/tasks/{task_id}/rerun", _with_reason({}, reason))
        )

    def rerun_stage(self, stage_id: str, *, reason: str | None = None) -> Rerun:
        """Run every FAILED and ABORTED task of the stage again; the stage and its job reopen."""
        return Rerun.from_json(
            self.client.post(f"/v1/stages/{stage_id}/rerun", _with_reason({}, reason))
        )

    def rerun_job(
        self, job_id: str, *, from_stage_id: str | None = None, reason: str | None = None
    ) -> Rerun:
        """Run a FAILED or ABORTED job again from its first unfinished stage, or from the
        earlier stage `from_stage_id` (whose tasks, and those of the stages after it that had
        completed, all run again)."""
        body = _with_reason({}, reason)
        if from_stage_id is not None:
            body["fromStageId"] = from_stage_id
        return Rerun.from_json(self.client.post(f"/v1/jobs/{job_id}/rerun", body))

    def release_stage(self, stage_id: str) -> None:
        """Move a WAITING (or CREATED) stage to PENDING once the previous stage completed."""
        self.client.put(f"/v1/stages/{stage_id}/status", {"status": "PENDING"})

    def update_job_user_metadata(self, job_id: str, metadata: Mapping[str, Any]) -> None:
        self.client.patch(f"/v1/jobs/{job_id}/user-metadata", dict(metadata))

    def update_stage_user_metadata(self, stage_id: str, metadata: Mapping[str, Any]) -> None:
        self.client.patch(f"/v1/stages/{stage_id}/user-metadata", dict(metadata))

    def update_task_user_metadata(self, task_id: str, metadata: Mapping[str, Any]) -> None:
        self.client.patch(f"/v1/tasks/{task_id}/user-metadata", dict(metadata))

    # -- schedules ------------------------------------------------------------------------

    def create_schedule(
        self,
        name: str,
        job: Mapping[str, Any],
        *,
        cron: str | None = None,
        timezone: str = "UTC",
        interval_seconds: int | None = None,
        overlap_policy: str | None = None,
        catchup_policy: str | None = None,
        catchup_window_seconds: int | None = None,
    ) -> Schedule:
        """A schedule running `job` (a template: `name`, `data`, `priority`, `userMetadata`,
        and `stages` with their `tasks` and an optional `delaySeconds` that holds a stage's tasks
        back after the run starts and `scheduleToStartSeconds` after which a task not started
        expires, or a `hook` stage type) at each time of `cron` in
        `timezone`, or every `interval_seconds`. Policies: overlap skip (default), bufferOne,
        allowAll, cancelPrevious; catch-up latest (default) or all."""
        body: dict[str, Any] = {"name": name, "job": dict(job), "timezone": timezone}
        optional = {
            "cron": cron,
            "intervalSeconds": interval_seconds,
            "overlapPolicy": overlap_policy,
            "catchupPolicy": catchup_policy,
            "catchupWindowSeconds": catchup_window_seconds,
        }
        body.update({k: v for k, v in optional.items() if v is not None})
        return Schedule.from_json(self.client.post("/v1/schedules", body))

    def schedules(self, *, name: str | None = None) -> list[Schedule]:
        """Every schedule (or the one named `name`), by name."""
        params = {} if name is None else {"name": name}
        return [Schedule.from_json(s) for s in self._every("/v1/schedules", params)]

    def _every(self, path: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        """Every item of a paged list (`{total, items}`), a page of 100 at a time."""
        found: list[dict[str, Any]] = []
        page = 1
        while True:
            answer = self.client.get(path, params={**params, "page": page, "page_size": 100})
            found += answer["items"]
            if not answer["items"] or len(found) >= answer["total"]:
                return found
            page += 1

    def schedule(self, schedule_id: str, *, next_fires: int = 5) -> Schedule:
        return Schedule.from_json(
            self.client.get(f"/v1/schedules/{schedule_id}", params={"next": next_fires})
        )

    def schedule_runs(
        self, schedule_id: str, *, before: datetime | None = None, limit: int = 20
    ) -> list[ScheduleRun]:
        """The schedule's runs, latest nominal time first (before `before`, if given)."""
        params: dict[str, Any] = {"limit": limit}
        if before is not None:
            params["before"] = before.isoformat()
        answer = self.client.get(f"/v1/schedules/{schedule_id}/runs", params=params)
        return [ScheduleRun.from_json(r) for r in answer["items"]]

    def pause_schedule(self, schedule_id: str, *, reason: str | None = None) -> Schedule:
        path = f"/v1/schedules/{schedule_id}/pause"
        return Schedule.from_json(self.client.post(path, _with_reason({}, reason)))

    def resume_schedule(self, schedule_id: str, *, reason: str | None = None) -> Schedule:
        """The clock goes on from now: what fell due while paused does not run."""
        path = f"/v1/schedules/{schedule_id}/resume"
        return Schedule.from_json(self.client.post(path, _with_reason({}, reason)))

    def trigger_schedule(self, schedule_id: str, *, reason: str | None = None) -> ScheduleRun:
        """A run now, whatever the overlap policy."""
        path = f"/v1/schedules/{schedule_id}/trigger"
        return ScheduleRun.from_json(self.client.post(path, _with_reason({}, reason)))

    def backfill_schedule(
        self, schedule_id: str, start: datetime, end: datetime, *, reason: str | None = None
    ) -> list[ScheduleRun]:
        """A run for each nominal time from `start` to `end` (both included, aware datetimes,
        `end` not after now) that has none yet; at most 100 nominal times."""
        body = _with_reason({"start": start.isoformat(), "end": end.isoformat()}, reason)
        answer = self.client.post(f"/v1/schedules/{schedule_id}/backfill", body)
        return [ScheduleRun.from_json(r) for r in answer["runs"]]

    def delete_schedule(self, schedule_id: str, *, reason: str | None = None) -> None:
        """Stop the schedule (an operator's); its runs' jobs and history stay."""
        params = {"reason": reason} if reason is not None else None
        self.client.request("DELETE", f"/v1/schedules/{schedule_id}", params=params)

    # -- limits and queue orders (an operator's) ----------------------------------------------

    def limits(self) -> list[Limit]:
        """The stage types with a limit or a fair queue order, by stage type."""
        return [Limit.from_json(b) for b in self._every("/v1/limits", {})]

    def limit(self, stage_type: str) -> Limit:
        """`stage_type`'s limit (ApiError LIMIT_NOT_FOUND when it has none)."""
        return Limit.from_json(self.client.get(f"/v1/limits/{quote(stage_type, safe='')}"))

    def set_limit(
        self, stage_type: str, max_in_progress: int, *, reason: str | None = None
    ) -> Limit:
        """At most `max_in_progress` tasks of `stage_type` in progress at once."""
        body = _with_reason({"maxInProgress": max_in_progress}, reason)
        return Limit.from_json(self.client.put(f"/v1/limits/{quote(stage_type, safe='')}", body))

    def remove_limit(self, stage_type: str, *, reason: str | None = None) -> None:
        self._remove(f"/v1/limits/{quote(stage_type, safe='')}", reason)

    def set_rate(
        self, stage_type: str, starts: int, interval_seconds: int, *, reason: str | None = None
    ) -> Limit:
        """At most `starts` task starts of `stage_type` per `interval_seconds`."""
        body = _with_reason({"starts": starts, "intervalSeconds": interval_seconds}, reason)
        path = f"/v1/limits/{quote(stage_type, safe='')}/rate"
        return Limit.from_json(self.client.put(path, body))

    def remove_rate(self, stage_type: str, *, reason: str | None = None) -> None:
        self._remove(f"/v1/limits/{quote(stage_type, safe='')}/rate", reason)

    def set_key_limit(
        self, stage_type: str, max_in_progress: int, *, reason: str | None = None
    ) -> Limit:
        """At most `max_in_progress` tasks of `stage_type` in progress at once per concurrency
        key: a job's `concurrency_key`, or, without one, the job itself."""
        body = _with_reason({"maxInProgress": max_in_progress}, reason)
        path = f"/v1/limits/{quote(stage_type, safe='')}/keys"
        return Limit.from_json(self.client.put(path, body))

    def remove_key_limit(self, stage_type: str, *, reason: str | None = None) -> None:
        self._remove(f"/v1/limits/{quote(stage_type, safe='')}/keys", reason)

    def set_key_rate(
        self, stage_type: str, starts: int, interval_seconds: int, *, reason: str | None = None
    ) -> Limit:
        """At most `starts` task starts of `stage_type` per `interval_seconds` per concurrency
        key (a bucket per key)."""
        body = _with_reason({"starts": starts, "intervalSeconds": interval_seconds}, reason)
        path = f"/v1/limits/{quote(stage_type, safe='')}/keys/rate"
        return Limit.from_json(self.client.put(path, body))

    def remove_key_rate(self, stage_type: str, *, reason: str | None = None) -> None:
        self._remove(f"/v1/limits/{quote(stage_type, safe='')}/keys/rate", reason)

    def set_order(self, stage_type: str, order: str, *, reason: str | None = None) -> Limit:
        """Dequeue `stage_type`'s tasks in `order` after priority: "fifo" (first in, first out,
        the default) or "fair" (the jobs of one priority take turns)."""
        body = _with_reason({"order": order}, reason)
        path = f"/v1/limits/{quote(stage_type, safe='')}/order"
        return Limit.from_json(self.client.put(path, body))

    def _remove(self, path: str, reason: str | None) -> None:
        params = {"reason": reason} if reason is not None else None
        self.client.request("DELETE", path, params=params)
