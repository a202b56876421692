"""`create_app`: the FastAPI application over a command service and its views."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any, Final

from fastapi import FastAPI
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from jobnik.api import errors
from jobnik.api.routes import health, history, jobs, stages, tasks
from jobnik.api.sweeper import Sweeper
from jobnik.domain.application import Jobnik
from jobnik.domain.errors import PayloadTooLarge
from jobnik.domain.tasks import DEFAULT_LEASE_SECONDS
from jobnik.projections.audit import Audit
from jobnik.projections.config import library_env
from jobnik.projections.leader import LeaderLock
from jobnik.projections.store import SqlStore
from jobnik.projections.views import Views

MAX_BODY: Final = 1024 * 1024  # rules §2: request bodies ≤ 1 MB


class BodyLimit:
    """Refuse request bodies over `limit` bytes, declared or streamed (413 with a JSON body)."""

    def __init__(self, app: ASGIApp, limit: int = MAX_BODY) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            await errors.error_response(413, _too_large(self.limit), "PAYLOAD_TOO_LARGE")(
                scope, receive, send
            )
            return
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.limit:
                raise PayloadTooLarge(_too_large(self.limit))
            return message

        await self.app(scope, counted, send)


def _too_large(limit: int) -> str:
    return f"request body is larger than {limit} bytes"


def create_app(jobnik: Jobnik, views: Views, audit: Audit | None = None, **fastapi: Any) -> FastAPI:
    """The v1 API over `jobnik` (commands) and `views` (queries)."""
    app = FastAPI(
        title="jobnik",
        version="0.1.0",
        description="Event-sourced workflow engine speaking Jobnik's v1 API.",
        **fastapi,
    )
    app.state.jobnik, app.state.views = jobnik, views
    app.state.audit = audit if audit is not None else Audit(views.store)
    errors.install(app)
    for module in (jobs, stages, tasks, history, health):
        app.include_router(module.router)
    app.add_middleware(BodyLimit)
    return app


def app_from_env(env: Mapping[str, str]) -> FastAPI:
    """Open the configured store, migrate it, and serve it."""
    store = SqlStore(library_env(env))
    store.migrate()
    jobnik = Jobnik(
        store, lease_seconds=int(env.get("JOBNIK_LEASE_SECONDS", DEFAULT_LEASE_SECONDS))
    )
    interval = float(env.get("JOBNIK_SWEEP_INTERVAL", "5"))
    sweeper = Sweeper(jobnik, LeaderLock(store, "sweeper"), interval) if interval > 0 else None

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        if sweeper:
            sweeper.start()
        yield
        if sweeper:
            sweeper.stop()
        store.close()

    app = create_app(jobnik, Views(store), lifespan=lifespan)
    app.state.store, app.state.sweeper = store, sweeper
    return app
