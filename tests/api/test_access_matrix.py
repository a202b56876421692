from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from fastapi.routing import APIRoute

from jobnik.api.access import PUBLIC_PATHS
from jobnik.api.permissions import authorize, permission_of
from jobnik.domain.principals import Permission, Role, roles_with

from .conftest import ROLES, Secured

Request = tuple[str, str, Any]


@dataclass(frozen=True)
class Targets:
    job: str
    stage: str
    task: str
    ended_job: str
    schedule: str


def arrange(s: Secured) -> Targets:
    """A pending job with a stage and a pending task, an aborted job, and a spare token."""
    s.issue("spare", "reader")
    job = s.api.create_job()
    stage = s.api.add_stage(job["id"], type="matrix")
    (task,) = s.api.add_tasks(stage["id"])
    ended = s.api.create_job(name="ended")
    s.api.set_job_status(ended["id"], "ABORTED")
    schedule = s.http.post("/v1/schedules", json=SCHEDULE).json()
    return Targets(job["id"], stage["id"], task["id"], ended["id"], schedule["id"])


SCHEDULE = {"name": "matrix", "intervalSeconds": 3600, "job": {"name": "matrix", "hook": "m"}}


def _requests(t: Targets) -> dict[str, Request]:
    job, stage, task = f"/v1/jobs/{t.job}", f"/v1/stages/{t.stage}", f"/v1/tasks/{t.task}"
    schedule = f"/v1/schedules/{t.schedule}"
    return {
        "create_schedule": ("POST", "/v1/schedules", {**SCHEDULE, "name": "another"}),
        "list_schedules": ("GET", "/v1/schedules", None),
        "get_schedule": ("GET", schedule, None),
        "list_runs": ("GET", f"{schedule}/runs", None),
        "pause_schedule": ("POST", f"{schedule}/pause", {"reason": "matrix"}),
        "resume_schedule": ("POST", f"{schedule}/resume", None),
        "trigger_schedule": ("POST", f"{schedule}/trigger", None),
        "backfill_schedule": (
            "POST",
            f"{schedule}/backfill",
            {"start": "2026-01-01T00:00:00Z", "end": "2026-01-01T01:00:00Z"},
        ),
        "delete_schedule": ("DELETE", schedule, None),
        "schedules": ("GET", "/ui/schedules", None),
        "schedule": ("GET", f"/ui/schedules/{t.schedule}", None),
        "retention_page": ("GET", "/ui/retention", None),
        "list_limits": ("GET", "/v1/limits", None),
        "get_limit": ("GET", "/v1/limits/matrix", None),
        "set_limit": ("PUT", "/v1/limits/matrix", {"maxInProgress": 2}),
        "remove_limit": ("DELETE", "/v1/limits/matrix", None),
        "erase_job": ("POST", f"{job}/erase", {"reason": "matrix"}),
        "get_retention_policy": ("GET", "/v1/retention", None),
        "set_retention": ("PUT", "/v1/retention/matrix", {"periodSeconds": 60}),
        "get_archive": ("GET", f"/v1/archives/{t.ended_job}", None),
        "set_rate": ("PUT", "/v1/limits/matrix/rate", {"starts": 5, "intervalSeconds": 60}),
        "set_order": ("PUT", "/v1/limits/matrix/order", {"order": "fair"}),
        "remove_rate": ("DELETE", "/v1/limits/matrix/rate", None),
        "set_key_limit": ("PUT", "/v1/limits/matrix/keys", {"maxInProgress": 2}),
        "remove_key_limit": ("DELETE", "/v1/limits/matrix/keys", None),
        "set_key_rate": ("PUT", "/v1/limits/matrix/keys/rate", {"starts": 2, "intervalSeconds": 9}),
        "remove_key_rate": ("DELETE", "/v1/limits/matrix/keys/rate", None),
        "find_jobs": ("GET", "/v1/jobs", None),
        "create_job": ("POST", "/v1/jobs", {"name": "matrix", "data": {}}),
        "finish_job": ("POST", f"{job}/finish", None),
        "get_job": ("GET", job, None),
        "delete_job": ("DELETE", job, None),
        "update_user_metadata": ("PATCH", f"{job}/user-metadata", {"a": 1}),
        "update_job_priority": ("PATCH", f"{job}/priority", {"priority": "HIGH"}),
        "update_status": ("PUT", f"{job}/status", {"status": "PAUSED"}),
        # (reruns of what has not ended: refused after the permission check, changing nothing)
        "rerun_job": ("POST", f"{job}/rerun", {"reason": "matrix"}),
        "rerun_stage": ("POST", f"{stage}/rerun", None),
        "rerun_task": ("POST", f"{task}/rerun", None),
        "get_stages_by_job_id": ("GET", f"{job}/stages", None),
        "add_stage": ("POST", f"{job}/stage", {"type": "more", "data": {}}),
        "get_stages": ("GET", "/v1/stages", None),
        "get_stage_by_id": ("GET", stage, None),
        "get_stage_summary": ("GET", f"{stage}/summary", None),
        "update_stage_user_metadata": ("PATCH", f"{stage}/user-metadata", {"b": 2}),
        "update_stage_status": ("PUT", f"{stage}/status", {"status": "PENDING"}),
        "get_tasks_by_stage_id": ("GET", f"{stage}/tasks", None),
        "add_tasks": ("POST", f"{stage}/tasks", [{"data": {}}]),
        "dequeue_task": ("PATCH", "/v1/stages/nothing-queued/tasks/dequeue", None),
        "get_tasks_by_criteria": ("GET", "/v1/tasks", None),
        "get_task_by_id": ("GET", task, None),
        "update_task_user_metadata": ("PATCH", f"{task}/user-metadata", {"c": 3}),
        "reschedule_job": ("PATCH", f"{job}/not-before", {"notBefore": None, "reason": "m"}),
        "reschedule_task": ("PATCH", f"{task}/not-before", {"notBefore": None, "reason": "m"}),
        "reschedule_stage": ("PATCH", f"{stage}/not-before", {"notBefore": None, "reason": "m"}),
        "update_task_status": ("PUT", f"{task}/status", {"status": "COMPLETED", "attempt": 1}),
        "update_task_statuses": (
            "PUT",
            "/v1/tasks/status",
            [{"id": task.rsplit("/", 1)[-1], "status": "COMPLETED", "attempt": 1}],
        ),
        "get_children": ("GET", f"{task}/children", None),
        "heartbeat": ("POST", f"{task}/heartbeat", {"attempt": 1}),
        "give_back": ("POST", f"{task}/release", {"attempt": 1}),
        "append_logs": ("POST", f"{task}/logs", {"lines": ["hello"], "attempt": 1}),
        "get_logs": ("GET", f"{task}/logs", None),
        "job_history": ("GET", f"{job}/history", None),
        "events": ("GET", "/v1/events", None),
        "job_stream": ("GET", f"/v1/jobs/{t.ended_job}/stream", None),  # ended: it closes
        "get_job_definition": ("GET", "/v1/job-definitions/nightly", None),
        "get_job_statistics": ("GET", f"{job}/statistics", None),
        "get_job_run": ("GET", f"{job}/run", None),
        "count_jobs": ("GET", "/v1/job-counts", None),
        "home": ("GET", "/ui", None),
        "jobs": ("GET", "/ui/jobs", None),
        "job": ("GET", f"/ui/jobs/{t.job}", None),
        "history": ("GET", f"/ui/jobs/{t.job}/history", None),
        "queues": ("GET", "/ui/queues", None),
        "search": ("GET", f"/ui/search?id={t.job}", None),
        "list_tokens": ("GET", "/v1/tokens", None),
        "revoke_token": ("DELETE", "/v1/tokens/spare", None),
        "metrics": ("GET", "/metrics", None),
        "service_metrics": ("GET", "/service-metrics", None),
        "get_queues": ("GET", "/v1/queues", None),
        "get_stuck": ("GET", "/v1/stuck", None),
        "get_activity_by_stage_type": ("GET", "/v1/activity", None),
        "get_job_activity": ("GET", f"{job}/activity", None),
    }


# The global stream never ends, and the test client reads an answer whole: it is served to
# every role (all read) and tested over a live server (tests/integration/test_access.py).
ENDLESS: Callable[[str], bool] = {"events_stream"}.__contains__


def routes(s: Secured) -> list[APIRoute]:
    return [
        r
        for r in s.http.app.routes  # type: ignore[attr-defined]
        if isinstance(r, APIRoute) and r.path not in PUBLIC_PATHS
    ]


def test_every_route_declares_its_permission_and_is_checked_by_the_one_dependency(
    secured: Secured,
) -> None:
    for route in routes(secured):
        assert "x-jobnik-permission" in (route.openapi_extra or {}), route.name
        assert authorize in [d.call for d in route.dependant.dependencies], route.name


@pytest.mark.parametrize("role", ROLES)
def test_each_role_reaches_exactly_the_routes_its_permissions_allow(
    secured: Secured, role: str
) -> None:
    requests = _requests(arrange(secured))
    bearer = secured.bearers[role]
    seen = set()

    for route in routes(secured):
        if ENDLESS(route.name):
            continue
        method, url, body = requests[route.name]
        seen.add(route.name)
        if Role(role) in roles_with(permission_of(route)):
            r = secured.call(bearer, method, url, body)
            assert r.status_code not in (401, 403), (route.name, r.text)
        else:
            with secured.api.nothing_written():
                r = secured.call(bearer, method, url, body)
            assert (r.status_code, r.json()["code"]) == (403, "FORBIDDEN"), route.name
    assert seen == set(requests)


def test_the_roles_hold_what_their_names_promise() -> None:
    def holders(p: Permission) -> set[str]:
        return {str(r) for r in roles_with(p)}

    assert holders(Permission.READ) == {"reader", "producer", "operator", "admin", "worker"}
    assert holders(Permission.PRODUCE) == {"producer", "operator", "admin"}
    assert holders(Permission.OPERATE) == {"operator", "admin"}
    assert holders(Permission.WORK) == {"worker", "admin"}
    assert holders(Permission.ADMIN) == {"admin"}
