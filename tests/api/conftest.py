"""The v1 API over HTTP, on a database in memory, and small factories that drive it into every
state.

Every factory drives the HTTP API only, so a test's arrange step is itself a use of the
contract. The event log is read (never written) for two checks: `Api.nothing_written()` asserts
its position did not move, `Api.events_of()` lists an aggregate's stored events.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from uuid import UUID

import pytest
from fastapi.testclient import TestClient

from jobnik.api.main import app_from_env
from jobnik.api.testing import memory_app
from jobnik.domain.application import Jobnik
from jobnik.domain.principals import Principal, Role
from jobnik.projections.store.config import MEMORY

NO_TRACE = "00-00000000000000000000000000000000-0000000000000000-00"
TRACE = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
OTHER_TRACE = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
Json = dict[str, Any]
# Jobnik's summary keys plus jobnik's `aborted` (abort cascades) and `delegated` (delegation).
SUMMARY_FIELDS = {"pending", "inProgress", "completed", "failed", "created", "retried", "aborted"}
SUMMARY_FIELDS |= {"total", "delegated"}
EMPTY_SUMMARY = dict.fromkeys(SUMMARY_FIELDS, 0)


def parse_time(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


@pytest.fixture
def database_url() -> str:
    """The HTTP tests run on a database in memory, a new one per app (storage behaviour is
    tested on SQLite files and PostgreSQL by tests/integration)."""
    return MEMORY


@pytest.fixture
def client() -> Iterator[TestClient]:
    # These tests read the filtered lists as SDK 0.3.x does, as plain arrays; the paged shape
    # (the default) has its own tests (test_pages.py).
    with TestClient(memory_app(list_shape="array")) as c:  # the lifespan closes the store
        yield c


@pytest.fixture
def api(client: TestClient) -> Api:
    return Api(client)


class Api:
    """Thin helpers over the HTTP client: each one asserts its own success status."""

    def __init__(self, client: TestClient) -> None:
        self.http = client
        self._types = itertools.count(1)

    # -- the event log --------------------------------------------------------------------

    @property
    def position(self) -> int:
        store = self.http.app.state.store  # type: ignore[attr-defined]
        return int(store.log_app.recorder.max_notification_id() or 0)

    @contextmanager
    def nothing_written(self) -> Iterator[None]:
        before = self.position
        yield
        assert self.position == before, "a refused request wrote events"

    @contextmanager
    def wrote_events(self) -> Iterator[None]:
        before = self.position
        yield
        assert self.position > before, "an accepted change wrote no events"

    def writes_iff(self, accepted: bool) -> AbstractContextManager[None]:
        return self.wrote_events() if accepted else self.nothing_written()

    def events_of(self, aggregate_id: str) -> list[str]:
        """Topic suffixes of an aggregate's stored events, oldest first."""
        store = self.http.app.state.store  # type: ignore[attr-defined]
        stored = store.log_app.recorder.select_events(UUID(aggregate_id))
        return [e.topic.rsplit(".", 1)[-1] for e in stored]

    # -- creating -------------------------------------------------------------------------

    def new_type(self) -> str:
        return f"type-{next(self._types)}"

    def create_job(self, name: str = "nightly", **fields: Any) -> Json:
        body = {"name": name, "data": {"source": "test"}, **fields}
        r = self.http.post("/v1/jobs", json=body)
        assert r.status_code == 201, r.text
        return r.json()  # type: ignore[no-any-return]

    def add_stage(self, job_id: str, type: str | None = None, **fields: Any) -> Json:
        body = {"type": type if type is not None else self.new_type(), "data": {"s": 1}, **fields}
        r = self.http.post(f"/v1/jobs/{job_id}/stage", json=body)
        assert r.status_code == 201, r.text
        return r.json()  # type: ignore[no-any-return]

    def add_tasks(self, stage_id: str, count: int = 1, **fields: Any) -> list[Json]:
        body = [{"data": {"i": i}, **fields} for i in range(count)]
        r = self.http.post(f"/v1/stages/{stage_id}/tasks", json=body)
        assert r.status_code == 201, r.text
        return r.json()  # type: ignore[no-any-return]

    # -- acting ---------------------------------------------------------------------------

    def dequeue(self, stage_type: str) -> Json:
        r = self.http.patch(f"/v1/stages/{stage_type}/tasks/dequeue")
        assert r.status_code == 200, r.text
        return r.json()  # type: ignore[no-any-return]

    def dequeue_nothing(self, stage_type: str) -> None:
        with self.nothing_written():
            r = self.http.patch(f"/v1/stages/{stage_type}/tasks/dequeue")
        assert (r.status_code, r.json()) == (
            404,
            {"message": "TASK_NOT_FOUND", "code": "TASK_NOT_FOUND"},
        ), r.text

    def report(self, task_id: str, status: str) -> Json:
        r = self.http.put(f"/v1/tasks/{task_id}/status", json={"status": status})
        assert r.status_code == 200, r.text
        return r.json()  # type: ignore[no-any-return]

    def set_job_status(self, job_id: str, status: str) -> None:
        r = self.http.put(f"/v1/jobs/{job_id}/status", json={"status": status})
        assert (r.status_code, r.json()) == (200, {"code": "JOB_MODIFIED_SUCCESSFULLY"}), r.text

    def release(self, stage_id: str) -> None:
        r = self.http.put(f"/v1/stages/{stage_id}/status", json={"status": "PENDING"})
        assert (r.status_code, r.json()) == (200, {"code": "STAGE_MODIFIED_SUCCESSFULLY"}), r.text

    def run_task(self, stage_type: str, status: str = "COMPLETED") -> Json:
        """Dequeue one task of `stage_type` and report `status` for it."""
        return self.report(self.dequeue(stage_type)["id"], status)

    # -- reading --------------------------------------------------------------------------

    def _get(self, url: str, **params: Any) -> Any:
        r = self.http.get(url, params=params)
        assert r.status_code == 200, r.text
        return r.json()

    def job(self, job_id: str, **params: Any) -> Json:
        return self._get(f"/v1/jobs/{job_id}", **params)  # type: ignore[no-any-return]

    def stage(self, stage_id: str, **params: Any) -> Json:
        return self._get(f"/v1/stages/{stage_id}", **params)  # type: ignore[no-any-return]

    def task(self, task_id: str) -> Json:
        return self._get(f"/v1/tasks/{task_id}")  # type: ignore[no-any-return]

    # -- whole states ---------------------------------------------------------------------

    def job_in(self, status: str) -> Json:
        """A job whose status is `status`, reached through the API only; re-read after."""
        job = self.create_job()
        if status == "PENDING":
            return self.job(job["id"])
        if status in ("PAUSED", "ABORTED"):
            self.set_job_status(job["id"], status)
            return self.job(job["id"])
        stage = self.add_stage(job["id"])
        if status == "FAILED":
            self.add_tasks(stage["id"], maxAttempts=1)
            self.run_task(stage["type"], "FAILED")
        else:
            self.add_tasks(stage["id"])
            task = self.dequeue(stage["type"])
            if status == "COMPLETED":
                self.report(task["id"], "COMPLETED")
        job = self.job(job["id"])
        assert job["status"] == status
        return job

    def task_in(self, status: str) -> Json:
        """A task whose status is `status` (FAILED ones have maxAttempts 1); re-read after."""
        job = self.create_job()
        stage = self.add_stage(job["id"])
        max_attempts = 1 if status == "FAILED" else 3
        (task,) = self.add_tasks(stage["id"], maxAttempts=max_attempts)
        if status == "ABORTED":
            self.set_job_status(job["id"], "ABORTED")
        elif status != "PENDING":
            self.dequeue(stage["type"])
            if status in ("COMPLETED", "FAILED", "RETRIED"):
                self.report(task["id"], "COMPLETED" if status == "COMPLETED" else "FAILED")
        task = self.task(task["id"])
        assert task["status"] == status
        return task


# -- access control ------------------------------------------------------------------------

ISSUER = Principal("cli:tests", Role.ADMIN)
ROLES = [str(r) for r in Role]


@dataclass
class Secured:
    """The API with JOBNIK_AUTH=tokens and a bearer per role (`bearers["worker"]`, …)."""

    api: Api
    bearers: dict[str, str] = field(default_factory=dict)

    @property
    def http(self) -> TestClient:
        return self.api.http

    @property
    def jobnik(self) -> Jobnik:
        return self.http.app.state.jobnik  # type: ignore[attr-defined,no-any-return]

    def issue(self, name: str, role: str, **options: Any) -> str:
        return self.jobnik.issue_token(name, Role(role), by=ISSUER, **options).bearer

    def call(self, bearer: str, method: str, url: str, body: Any = None, **kw: Any) -> Any:
        headers = {"Authorization": f"Bearer {bearer}", **kw.pop("headers", {})}
        return self.http.request(method, url, json=body, headers=headers, **kw)

    def anonymous(self, method: str, url: str, body: Any = None, **kw: Any) -> Any:
        """A request without the arranging admin's default Authorization header."""
        arranger = self.http.headers.pop("Authorization")
        try:
            return self.http.request(method, url, json=body, **kw)
        finally:
            self.http.headers["Authorization"] = arranger


def secured_app(database_url: str, **env: str) -> TestClient:
    app = app_from_env({"JOBNIK_DATABASE_URL": database_url, "JOBNIK_SWEEP_INTERVAL": "0", **env})
    app.state.access.tokens.refresh = 0  # every request sees the tokens just issued
    return TestClient(app)


@pytest.fixture
def secured(database_url: str) -> Iterator[Secured]:
    with secured_app(database_url, JOBNIK_AUTH="tokens") as client:
        s = Secured(Api(client))
        s.bearers = {role: s.issue(f"the-{role}", role) for role in ROLES}
        client.headers["Authorization"] = f"Bearer {s.issue('arranger', 'admin')}"  # Api's
        yield s
