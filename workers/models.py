"""What the API returns, as plain typed records (unknown fields are kept in `extra`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

# The fields `Task` names; any other goes to its `extra`.
_TASK_KEYS: Final = frozenset(
    {
        "id",
        "stageId",
        "status",
        "data",
        "userMetadata",
        "attempts",
        "maxAttempts",
        "attempt",
        "leaseExpiresAt",
        "result",
        "delegations",
        "traceparent",
        "tracestate",
        "notBefore",
    }
)


def _time(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value.replace("Z", "+00:00")) if value else None


@dataclass(frozen=True)
class Task:
    """A task as a worker sees it. `attempt` numbers its dequeues; reports carry it (fencing).
    `attempts` are the attempts spent (failures and expired leases, as Jobnik counts them):
    a task completed at its first dequeue has attempt 1 and attempts 0."""

    id: str
    stage_id: str
    status: str
    data: dict[str, Any]
    user_metadata: dict[str, Any]
    attempts: int
    max_attempts: int
    attempt: int | None = None
    lease_expires_at: datetime | None = None
    result: dict[str, Any] | None = None
    delegations: int = 0  # how many times it waited for child jobs: > 0 on a re-dispatch
    traceparent: str | None = None  # the W3C trace context it was created in
    tracestate: str | None = None
    not_before: datetime | None = None  # queued, not dequeued before (delayed, or a retry's wait)
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> Task:
        return cls(
            id=body["id"],
            stage_id=body["stageId"],
            status=body["status"],
            data=body.get("data") or {},
            user_metadata=body.get("userMetadata") or {},
            attempts=body.get("attempts", 0),
            max_attempts=body.get("maxAttempts", 1),
            attempt=body.get("attempt"),
            lease_expires_at=_time(body.get("leaseExpiresAt")),
            result=body.get("result"),
            delegations=body.get("delegations", 0),
            traceparent=body.get("traceparent"),
            tracestate=body.get("tracestate"),
            not_before=_time(body.get("notBefore")),
            extra={k: v for k, v in body.items() if k not in _TASK_KEYS},
        )


@dataclass(frozen=True)
class Stage:
    id: str
    job_id: str
    type: str
    order: int
    status: str
    data: dict[str, Any]
    user_metadata: dict[str, Any]
    summary: dict[str, int]
    percentage: int

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> Stage:
        return cls(
            id=body["id"],
            job_id=body["jobId"],
            type=body["type"],
            order=body["order"],
            status=body["status"],
            data=body.get("data") or {},
            user_metadata=body.get("userMetadata") or {},
            summary=body.get("summary") or {},
            percentage=body.get("percentage", 0),
        )


@dataclass(frozen=True)
class Job:
    id: str
    name: str
    status: str
    priority: str
    data: dict[str, Any]
    user_metadata: dict[str, Any]
    percentage: int
    fairness_key: str | None = None  # the jobs it takes turns with as one (a fair queue order)
    fairness_weight: int | None = None  # its tasks per turn under a fair queue order
    concurrency_key: str | None = None  # the jobs it shares per-key limits with

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> Job:
        return cls(
            id=body["id"],
            name=body["name"],
            status=body["status"],
            priority=body["priority"],
            data=body.get("data") or {},
            user_metadata=body.get("userMetadata") or {},
            percentage=body.get("percentage", 0),
            fairness_key=body.get("fairnessKey"),
            fairness_weight=body.get("fairnessWeight"),
            concurrency_key=body.get("concurrencyKey"),
        )


@dataclass(frozen=True)
class Rerun:
    """What a rerun did: the job it reopened (and its status now), the stage it runs again from,
    the stages it reopened and how many tasks it put back in the queue."""

    job_id: str
    job_status: str
    from_stage_id: str | None
    reopened_stages: list[str]
    rerun_tasks: int

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> Rerun:
        return cls(
            job_id=body["jobId"],
            job_status=body["jobStatus"],
            from_stage_id=body.get("fromStageId"),
            reopened_stages=body.get("reopenedStages") or [],
            rerun_tasks=body.get("rerunTasks", 0),
        )


@dataclass(frozen=True)
class Heartbeat:
    """The server's answer to a heartbeat: the new lease, and whether the work was cancelled."""

    status: str
    attempt: int
    lease_expires_at: datetime | None
    cancelled: bool

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> Heartbeat:
        return cls(
            status=body["status"],
            attempt=body["attempt"],
            lease_expires_at=_time(body.get("leaseExpiresAt")),
            cancelled=body["cancelled"],
        )


@dataclass(frozen=True)
class ChildJob:
    """A child job of a delegated task: its outcome and its tasks' results."""

    id: str
    name: str
    status: str
    results: list[dict[str, Any]]  # each: taskId, stageType, result (the first 100 by end time)
    more_results: bool = False  # it has more tasks with a result than `results` holds

    @property
    def succeeded(self) -> bool:
        return self.status == "COMPLETED"

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> ChildJob:
        return cls(
            id=body["id"],
            name=body["name"],
            status=body["status"],
            results=body["results"],
            more_results=body.get("moreResults", False),
        )


class Delegated:
    """Return `DELEGATED` from a handler that created child jobs: the task waits for them, then
    comes back to a handler (`context.children` holds their outcomes)."""

    def __repr__(self) -> str:
        return "DELEGATED"


DELEGATED = Delegated()


@dataclass(frozen=True)
class Report:
    """One task's outcome for `Consumer.report_batch`: COMPLETED (with `result`), FAILED
    (with `reason`; `fatal` fails without retry) or DELEGATED."""

    task: Task
    status: str
    result: dict[str, Any] | None = None
    reason: str | None = None
    fatal: bool = False

    def body(self) -> dict[str, Any]:
        body: dict[str, Any] = {"id": self.task.id, "attempt": self.task.attempt}
        body["status"] = self.status
        if self.result:
            body["result"] = dict(self.result)
        if self.reason:
            body["reason"] = self.reason[:2000]
        if self.fatal:
            body["fatal"] = True
        return body


@dataclass(frozen=True)
class Reported:
    """One item's answer to a batched report: `ok` with the task's `status` after it, or the
    `http_status`, `code` and `message` a single report would have got."""

    id: str
    ok: bool
    http_status: int
    status: str | None = None
    code: str | None = None
    message: str | None = None

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> Reported:
        return cls(
            id=body["id"],
            ok=bool(body["ok"]),
            http_status=int(body["httpStatus"]),
            status=body.get("status"),
            code=body.get("code"),
            message=body.get("message"),
        )


@dataclass(frozen=True)
class Schedule:
    """A schedule: its timing (`cron` in `timezone`, or `interval_seconds`), the job template
    its runs create, its policies, its next fire times, its last run and its counts."""

    id: str
    name: str
    cron: str | None
    timezone: str
    interval_seconds: int | None
    job: dict[str, Any]
    overlap_policy: str
    catchup_policy: str
    catchup_window_seconds: int
    paused: bool
    pause_reason: str | None
    next_fire_times: list[datetime]
    last_fire_time: datetime | None
    last_job_id: str | None
    last_status: str | None
    counts: dict[str, int]
    failing_runs: int

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> Schedule:
        return cls(
            id=body["id"],
            name=body["name"],
            cron=body.get("cron"),
            timezone=body.get("timezone", "UTC"),
            interval_seconds=body.get("intervalSeconds"),
            job=body.get("job") or {},
            overlap_policy=body.get("overlapPolicy", ""),
            catchup_policy=body.get("catchupPolicy", ""),
            catchup_window_seconds=body.get("catchupWindowSeconds", 0),
            paused=bool(body.get("paused")),
            pause_reason=body.get("pauseReason"),
            next_fire_times=[t for t in map(_time, body.get("nextFireTimes") or []) if t],
            last_fire_time=_time(body.get("lastFireTime")),
            last_job_id=body.get("lastJobId"),
            last_status=body.get("lastStatus"),
            counts=body.get("counts") or {},
            failing_runs=body.get("failingRuns", 0),
        )


@dataclass(frozen=True)
class ScheduleRun:
    """A schedule's run: its nominal time, what started it (schedule, buffered, trigger,
    backfill), its job, and the job's status (None: just started by a trigger or backfill);
    `already_ran`: that nominal time had a run, this job's."""

    nominal_time: datetime
    job_id: str
    started_by: str | None = None
    status: str | None = None
    already_ran: bool = False

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> ScheduleRun:
        nominal = _time(body["nominalTime"])
        assert nominal is not None
        return cls(
            nominal_time=nominal,
            job_id=body["jobId"],
            started_by=body.get("startedBy"),
            status=body.get("status"),
            already_ran=bool(body.get("alreadyRan")),
        )


@dataclass(frozen=True)
class Limit:
    """A stage type's limits: at most `max_in_progress` of its tasks in progress at once (None:
    no such limit), at most `rate_starts` starts per `rate_interval_seconds` (None: no rate) with
    `rate_tokens` left now; at most `max_in_progress_per_key` in progress per concurrency key
    (None: no such limit) and `key_rate_starts` starts per `key_rate_interval_seconds` per key
    (None: no such rate), and the queued tasks they hold back now (`held_by_key`); `in_progress`
    now, the `room` a dequeue has; its queue `order` ("fifo" or "fair"); who changed them last
    and why."""

    stage_type: str
    max_in_progress: int | None
    in_progress: int
    room: int
    updated_by: str
    reason: str | None
    rate_starts: int | None = None
    rate_interval_seconds: int | None = None
    rate_tokens: int | None = None
    order: str = "fifo"
    max_in_progress_per_key: int | None = None
    key_rate_starts: int | None = None
    key_rate_interval_seconds: int | None = None
    held_by_key: int = 0

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> Limit:
        rate = body.get("rate") or {}
        per_key = body.get("perKey") or {}
        key_rate = per_key.get("rate") or {}
        return cls(
            stage_type=body["stageType"],
            max_in_progress=body.get("maxInProgress"),
            in_progress=body.get("inProgress", 0),
            room=body.get("room", 0),
            updated_by=body.get("updatedBy", ""),
            reason=body.get("reason"),
            rate_starts=rate.get("starts"),
            rate_interval_seconds=rate.get("intervalSeconds"),
            rate_tokens=rate.get("tokens"),
            order=body.get("order", "fifo"),
            max_in_progress_per_key=per_key.get("maxInProgress"),
            key_rate_starts=key_rate.get("starts"),
            key_rate_interval_seconds=key_rate.get("intervalSeconds"),
            held_by_key=per_key.get("heldBack", 0),
        )
