"""jobnik's Python SDK: a typed HTTP client (Producer, Consumer) and a worker runtime (Worker).

Workers talk only to the `/v1` HTTP API, so they run on any machine that can reach it.
"""

from __future__ import annotations

from jobnik.workers.backoff import Backoff
from jobnik.workers.client import JobnikClient
from jobnik.workers.consumer import Consumer
from jobnik.workers.context import TaskContext
from jobnik.workers.errors import AccessRefused, ApiError, FatalTaskError, TransportError
from jobnik.workers.loop import Handler, Worker, WorkerStats
from jobnik.workers.models import (
    DELEGATED,
    ChildJob,
    Delegated,
    Heartbeat,
    Job,
    Limit,
    Report,
    Reported,
    Rerun,
    Schedule,
    ScheduleRun,
    Stage,
    Task,
)
from jobnik.workers.producer import Producer
from jobnik.workers.timing import RetryPolicy

__all__ = [
    "DELEGATED",
    "AccessRefused",
    "ApiError",
    "Backoff",
    "ChildJob",
    "Consumer",
    "Delegated",
    "FatalTaskError",
    "Handler",
    "Heartbeat",
    "Job",
    "JobnikClient",
    "Limit",
    "Producer",
    "Report",
    "Reported",
    "Rerun",
    "RetryPolicy",
    "Schedule",
    "ScheduleRun",
    "Stage",
    "Task",
    "TaskContext",
    "TransportError",
    "Worker",
    "WorkerStats",
]
