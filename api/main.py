"""`create_app`: the FastAPI application over a command service and its views."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any, Final

from fastapi import FastAPI
from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from jobnik.api import errors
from jobnik.api.routes import catchup, health, history, jobs, stages, tasks
from jobnik.api.sweeper import Sweeper
from jobnik.domain.application import Jobnik
from jobnik.domain.errors import PayloadTooLarge
from jobnik.domain.tasks import DEFAULT_LEASE_SECONDS
from jobnik.projections import positions
from jobnik.projections.audit import Audit
from jobnik.projections.catchup import CatchUpRunner
from jobnik.projections.catchup_views import DEFAULT_WAIT, CatchUpViews
from jobnik.projections.config import library_env
from jobnik.projections.idempotency import DEFAULT_TTL, IdempotencyKeys
from jobnik.projections.leader import LeaderLock
from jobnik.projections.rebuild import rebuild
from jobnik.projections.registry import CATCH_UP, INLINE, outdated, status
from jobnik.projections.store import SqlStore
from jobnik.projections.views import Views

log = logging.getLogger(__name__)

MAX_BODY: Final = 1024 * 1024  # rules §2: request bodies ≤ 1 MB
WORKER_ROUTES: Final = (stages.dequeue_task, tasks.update_task_status, tasks.heartbeat)


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


class RequestPositions:
    """Put the log positions a request reached on its response: `X-Jobnik-Position` (the last
    event its writes committed) and `X-Jobnik-Projection-Position` (the tracking position of the
    catch-up projection it read). The store and the catch-up reads note them in a dict this
    middleware puts in a ContextVar (projections/positions.py), error responses included."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        box: dict[str, int] = {}
        token = positions.REQUEST_POSITIONS.set(box)

        async def send_with_positions(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                if positions.WRITTEN in box:
                    headers["X-Jobnik-Position"] = str(box[positions.WRITTEN])
                if positions.SERVED in box:
                    headers["X-Jobnik-Projection-Position"] = str(box[positions.SERVED])
            await send(message)

        try:
            await self.app(scope, receive, send_with_positions)
        finally:
            positions.REQUEST_POSITIONS.reset(token)


def create_app(
    jobnik: Jobnik,
    views: Views,
    audit: Audit | None = None,
    catchup_views: CatchUpViews | None = None,
    idempotency: IdempotencyKeys | None = None,
    **fastapi: Any,
) -> FastAPI:
    """The v1 API over `jobnik` (commands) and `views` (queries)."""
    app = FastAPI(
        title="jobnik",
        version="0.1.0",
        description="Event-sourced workflow engine speaking Jobnik's v1 API.",
        **fastapi,
    )
    app.state.jobnik, app.state.views = jobnik, views
    app.state.audit = audit if audit is not None else Audit(views.store)
    app.state.catchup = catchup_views if catchup_views is not None else CatchUpViews(views.store)
    app.state.idempotency = idempotency if idempotency is not None else IdempotencyKeys(views.store)
    errors.install(app)
    for module in (jobs, stages, tasks, history, catchup, health):
        # The routes themselves, not `include_router`: FastAPI keeps an included router as a
        # nested one, which it matches twice per request and whose route list it re-walks for
        # changes each time (0.2 ms of CPU per request here). Each route already carries its
        # router's prefix, tags and dependencies.
        app.router.routes.extend(module.router.routes)
    # The worker's routes first: the router tries routes in order, a path match each, and
    # these carry most requests. No other route matches their paths and methods
    # (tests/api/test_endpoints.py), so the order changes nothing else.
    app.router.routes.sort(key=lambda r: getattr(r, "endpoint", None) not in WORKER_ROUTES)
    app.add_middleware(BodyLimit)
    app.add_middleware(RequestPositions)
    return app


REBUILD_MODES: Final = ("auto", "off")


def projections_at_start(store: SqlStore, env: Mapping[str, str]) -> CatchUpRunner | None:
    """Detect projections an older version built and, with JOBNIK_REBUILD_ON_START=auto (the
    default), rebuild them blue/green: the inline read models now, before this process serves
    (processes already serving keep serving the old tables until the swap), the catch-up ones
    in the background by their runner. `off` only logs them (`jobnik projections rebuild`).

    Returns the catch-up runner for the lifespan to start (None with JOBNIK_CATCHUP_INTERVAL=0:
    this process then runs no catch-up projection; another process must).
    """
    mode = env.get("JOBNIK_REBUILD_ON_START", "auto").strip().lower() or "auto"
    if mode not in REBUILD_MODES:
        raise ValueError(f"JOBNIK_REBUILD_ON_START must be one of {REBUILD_MODES}, not {mode!r}")
    for s in status(store):
        if s.stale:
            log.warning(
                "projection %s: rows built by version %s, code is version %s%s",
                s.name,
                s.built_version,
                s.version,
                " (rebuilding)" if mode == "auto" and s.outdated else "",
                extra={"action": "projection_stale", "projection": s.name},
            )
    if mode == "auto" and outdated(store, [INLINE]):  # re-checked under the rebuild lock
        rebuild(store, names=[INLINE.name], only_outdated=True, wait=3600)
    interval = float(env.get("JOBNIK_CATCHUP_INTERVAL", "0.2"))
    if interval <= 0:
        return None
    return CatchUpRunner(
        store,
        CATCH_UP,
        LeaderLock(store, "catchup"),
        interval=interval,
        rebuild_stale=mode == "auto",
    )


def app_from_env(env: Mapping[str, str]) -> FastAPI:
    """Open the configured store, migrate it, and serve it."""
    store = SqlStore(library_env(env))
    store.migrate()
    jobnik = Jobnik(
        store, lease_seconds=int(env.get("JOBNIK_LEASE_SECONDS", DEFAULT_LEASE_SECONDS))
    )
    keys = IdempotencyKeys(store, float(env.get("JOBNIK_IDEMPOTENCY_TTL", DEFAULT_TTL)))
    interval = float(env.get("JOBNIK_SWEEP_INTERVAL", "5"))
    sweeper = (
        Sweeper(jobnik, LeaderLock(store, "sweeper"), interval, purge=keys.purge)
        if interval > 0
        else None
    )
    runner = projections_at_start(store, env)
    wait = float(env.get("JOBNIK_MIN_POSITION_WAIT", DEFAULT_WAIT))

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        if sweeper:
            sweeper.start()
        if runner:
            runner.start()
        yield
        if runner:
            runner.stop()
        if sweeper:
            sweeper.stop()
        store.close()

    app = create_app(
        jobnik,
        Views(store),
        catchup_views=CatchUpViews(store, wait),
        idempotency=keys,
        lifespan=lifespan,
    )
    app.state.store, app.state.sweeper, app.state.catchup_runner = store, sweeper, runner
    return app
