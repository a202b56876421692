"""`create_app`: the FastAPI application over a command service and its views."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from types import ModuleType
from typing import Any, Final

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware
from fastapi_offline import FastAPIOffline
from prometheus_client import CollectorRegistry

from jobnik.api import console, errors, positions
from jobnik.api.access import Access, Authenticate, TokenTable
from jobnik.api.archives import Archiver
from jobnik.api.bodies import Bounds
from jobnik.api.grouping import GroupCommit
from jobnik.api.headers import DocsHeaders
from jobnik.api.idempotency import IdempotencyKeys
from jobnik.api.input_gate import InputGate
from jobnik.api.input_values import Limits
from jobnik.api.middleware import RequestMiddleware
from jobnik.api.openapi import document_errors
from jobnik.api.permissions import document_security
from jobnik.api.routes import (
    activity,
    archives,
    catchup,
    health,
    history,
    jobs,
    limits,
    metrics,
    queues,
    schedules,
    stages,
    tasks,
    tokens,
)
from jobnik.api.settings import Settings
from jobnik.api.streams import Streams
from jobnik.api.sweeper import Sweeper
from jobnik.api.telemetry import Telemetry
from jobnik.api.telemetry.commands import ObservedCommands
from jobnik.api.telemetry.limit_metrics import LimitMetrics
from jobnik.api.telemetry.metrics import (
    GROUP_COMMANDS,
    WRITER_LOCK_WAIT,
    Scrapes,
    ServerMetrics,
)
from jobnik.api.telemetry.schedule_metrics import ScheduleMetrics
from jobnik.api.telemetry.service_metrics import JobnikServiceGauges, QueueMetrics
from jobnik.api.telemetry.tracing import (
    background_rounds,
    instrument_app,
    instrument_database,
    provider_from,
)
from jobnik.api.waiters import Waiters
from jobnik.domain.application import Jobnik
from jobnik.domain.archives import RetentionCommands
from jobnik.domain.errors import StoreInUse
from jobnik.domain.limit_commands import LimitCommands
from jobnik.domain.schedule_commands import ScheduleCommands
from jobnik.projections.catchup.registry import CATCH_UP, INLINE, outdated, status
from jobnik.projections.catchup.runner import CatchUpRunner
from jobnik.projections.queries.activity import ActivityViews
from jobnik.projections.queries.audit import Audit
from jobnik.projections.queries.catchup_views import CatchUpViews
from jobnik.projections.queries.limits import LimitViews
from jobnik.projections.queries.operations import OperationsViews, Thresholds
from jobnik.projections.queries.schedules import ScheduleViews
from jobnik.projections.queries.tokens import TokenViews
from jobnik.projections.queries.views import Views
from jobnik.projections.rebuild.bluegreen import rebuild, rebuild_outdated
from jobnik.projections.startup import migrate
from jobnik.projections.store.backends import open_store
from jobnik.projections.store.base import SqlStore
from jobnik.projections.store.leader import Round, unobserved

log = logging.getLogger(__name__)

DESCRIPTION: Final = (
    "jobnik is an event-sourced workflow engine. Jobs hold ordered stages, stages hold tasks, "
    "and workers anywhere dequeue tasks by stage type "
    "(`PATCH /v1/stages/{stageType}/tasks/dequeue`) and report how they went "
    "(`PUT /v1/tasks/{taskId}/status`). The `/v1` API is the contract of Jobnik's job manager, "
    "so Jobnik's SDK and workers work against it unchanged; what jobnik adds is optional: "
    "leases with heartbeats, child jobs, open-ended jobs with completion stages, idempotent "
    "creation (`Idempotency-Key`), each job's full history, live event streams, and reads as of "
    "any past moment (`as_of`). Errors answer `{message, code}` with Jobnik's codes, and every "
    "write answers the event-log position it reached in `X-Jobnik-Position`."
)
TAGS: Final = [
    {"name": "jobs", "description": "Create, find, steer and delete jobs; add their stages."},
    {"name": "stages", "description": "Stages, their summaries and tasks; the workers' dequeue."},
    {"name": "tasks", "description": "Tasks: reports, heartbeats, hand-backs, logs, children."},
    {
        "name": "history",
        "description": "The event log: audit trails, feeds, live streams, and "
        "the views derived from it (lastStatus, run statistics).",
    },
    {
        "name": "schedules",
        "description": "Recurring jobs: cron expressions in a time zone or intervals, their "
        "runs, pause, resume, trigger and backfill.",
    },
    {
        "name": "limits",
        "description": "Concurrency limits per stage type: at most N tasks in progress at once.",
    },
    {
        "name": "archives",
        "description": "Retention: how long ended jobs stay in the live log, and where "
        "archived jobs' events are.",
    },
    {"name": "health", "description": "Liveness."},
    {
        "name": "operations",
        "description": "What operators watch: Prometheus scrapes, queues, stuck work.",
    },
]


def create_app(
    jobnik: Jobnik,
    views: Views,
    audit: Audit | None = None,
    catchup_views: CatchUpViews | None = None,
    idempotency: IdempotencyKeys | None = None,
    access: Access | None = None,
    settings: Settings | None = None,
    telemetry: Telemetry | None = None,
    **fastapi: Any,
) -> FastAPI:
    """The v1 API over `jobnik` (commands) and `views` (queries), limited by `settings`;
    `access` decides who a request is (default: tokens once any exists in the store, as with
    JOBNIK_AUTH unset); `telemetry` what it records (default: metrics and request logs, no
    traces)."""
    settings = settings if settings is not None else Settings.from_env({})
    app = FastAPIOffline(  # /docs with Swagger UI's files served from /docs/assets, no CDN
        redoc_url=None,
        static_url="/docs/assets",
        swagger_ui_parameters={"validatorUrl": None},  # (an image from swagger.io otherwise)
        title="jobnik",
        version="0.1.0",
        description=DESCRIPTION,
        openapi_tags=TAGS,
        **fastapi,
    )
    telemetry = telemetry if telemetry is not None else Telemetry()
    if telemetry.provider is not None:
        telemetry.tracer = instrument_app(app, telemetry.provider)
    app.state.telemetry, app.state.settings = telemetry, settings
    app.state.jobnik, app.state.views = ObservedCommands(jobnik, telemetry.tracer), views
    app.state.audit = audit if audit is not None else Audit(views.store, settings.event_page_bytes)
    app.state.catchup = (
        catchup_views
        if catchup_views is not None
        else CatchUpViews(views.store, on_served=positions.note_served)
    )
    if positions.note_written not in views.store.on_commit:  # a write's X-Jobnik-Position
        views.store.on_commit.append(positions.note_written)
    app.state.work = GroupCommit(
        app.state.jobnik, GROUP_COMMANDS.observe, None if settings.group_commit else 1
    )
    app.state.idempotency = idempotency if idempotency is not None else IdempotencyKeys(views.store)
    app.state.token_views = TokenViews(views.store)
    app.state.access = (
        access if access is not None else Access(None, TokenTable(app.state.token_views.all))
    )
    app.state.waiters = Waiters(views.store, settings.max_waiters, settings.min_position_wait)
    app.state.streams = Streams(
        settings.max_streams, settings.max_streams_per_token, views.store.head
    )
    app.state.operations, app.state.clock = OperationsViews(views.store), _now
    app.state.activity = ActivityViews(views.store)
    app.state.schedules = ScheduleCommands(jobnik)
    app.state.schedule_views = ScheduleViews(views.store)
    app.state.limits = LimitCommands(views.store, jobnik.clock)
    app.state.limit_views = LimitViews(views.store)
    app.state.archiver = Archiver.of(views.store, settings)
    app.state.retention = RetentionCommands(jobnik.store, jobnik.clock)
    if telemetry.metrics is not None:
        _add_store_metrics(app, telemetry.metrics)
    errors.install(app)
    modules: tuple[ModuleType, ...] = (jobs, stages, tasks, history, catchup, tokens, queues)
    modules = (*modules, activity, schedules, limits, archives, health)
    for module in (*modules, metrics) if telemetry.metrics is not None else modules:
        # The routes themselves, not `include_router`: FastAPI keeps an included router as a
        # nested one, which it matches twice per request and whose route list it re-walks for
        # changes each time (0.2 ms of CPU per request here). Each route already carries its
        # router's prefix, tags and dependencies.
        app.router.routes.extend(module.router.routes)
    console.install(app)
    document_errors(app)
    app.add_middleware(DocsHeaders)
    app.add_middleware(
        InputGate, limits=Limits.of(settings), check=Bounds.of(app.router.routes, settings)
    )
    app.add_middleware(Authenticate, access=app.state.access)  # before any body is read
    # the request id is set while the others run
    app.add_middleware(RequestMiddleware, metrics=telemetry.metrics is not None)
    if settings.cors_origins:  # outermost: a browser's preflight carries no token
        app.add_middleware(
            CORSMiddleware,
            allow_origins=list(settings.cors_origins),
            allow_methods=["*"],
            allow_headers=["*"],
            expose_headers=["X-Request-Id", "X-Jobnik-Position", "X-Jobnik-Projection-Position"],
        )
    _document_security(app)
    return app


def _now() -> datetime:
    return datetime.now(UTC)


def _add_store_metrics(app: FastAPI, metrics: ServerMetrics) -> None:
    """The gauges read from the read models: in /metrics, and Jobnik's also in
    /service-metrics. The clock and the stuck-work thresholds are the app's at scrape time."""
    state = app.state

    def thresholds() -> Thresholds:
        s = state.settings
        return Thresholds(
            s.stuck_lease_expiries,
            s.stuck_job_idle_seconds,
            s.stuck_queue_idle_seconds,
            s.stuck_schedule_failures,
        )

    store = state.operations.store
    if WRITER_LOCK_WAIT.observe not in store.on_lock_wait:
        store.on_lock_wait.append(WRITER_LOCK_WAIT.observe)
    limit = state.settings.metrics_stage_types
    gauges = JobnikServiceGauges(state.operations, limit)
    metrics.add(gauges)
    metrics.add(QueueMetrics(state.operations, lambda: state.clock(), thresholds, limit))
    metrics.add(ScheduleMetrics(state.schedule_views, state.settings.metrics_schedules))
    metrics.add(LimitMetrics(state.limit_views, limit))
    state.service_metrics = CollectorRegistry(auto_describe=True)
    state.service_metrics.register(gauges)
    state.scrapes = Scrapes()


def _document_security(app: FastAPI) -> None:
    """The OpenAPI document with the bearer scheme and each operation's roles, 401 and 403."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        return document_security(build())

    app.openapi = openapi  # type: ignore[method-assign]


def projections_at_start(
    store: SqlStore, settings: Settings, round: Round = unobserved
) -> CatchUpRunner | None:
    """Detect projections an older version built and, with JOBNIK_REBUILD_ON_START=auto (the
    default), rebuild them blue/green: the inline read models now, before this process serves
    (processes already serving keep serving the old tables until the swap), the catch-up ones
    in the background by their runner. `off` only logs them (`jobnik projections rebuild`).

    Returns the catch-up runner for the lifespan to start (None with JOBNIK_CATCHUP_INTERVAL=0:
    this process then runs no catch-up projection; another process must).
    """
    mode = settings.rebuild_on_start
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
        rebuild(
            store,
            names=[INLINE.name],
            only_outdated=True,
            wait=3600,
            processes=settings.rebuild_processes,
        )
    if settings.catchup_interval <= 0:
        return None
    return CatchUpRunner(
        store,
        CATCH_UP,
        store.leader_lock("catchup"),
        interval=settings.catchup_interval,
        rebuild=(
            (lambda p: rebuild_outdated(store, p.name, settings.rebuild_processes))
            if mode == "auto"
            else None
        ),
        round=round,
    )


def app_from_env(env: Mapping[str, str]) -> FastAPI:
    """`app_from_settings` with the settings `env` holds."""
    return app_from_settings(Settings.from_env(env))


def app_from_settings(settings: Settings) -> FastAPI:
    """Open the configured store, migrate it, and serve it."""
    metrics_dir = settings.prometheus_multiproc_dir
    telemetry = Telemetry(
        ServerMetrics(metrics_dir) if settings.metrics else None, provider_from(settings)
    )
    if telemetry.provider is not None:
        instrument_database(telemetry.provider)  # before the store opens its connections
    store = open_store(settings.library_env())
    try:
        store.claim_server()
    except StoreInUse:
        store.close()
        raise
    migrate(store, settings.rebuild_processes)
    jobnik = Jobnik(
        store,
        lease_seconds=settings.lease_seconds,
        max_batch=settings.max_batch_size,
        max_child_jobs=settings.max_child_jobs,
        retry_policy=settings.retry_policy(),
    )
    keys = IdempotencyKeys(store, settings.idempotency_ttl)
    archiver = Archiver.of(store, settings)
    interval = settings.sweep_interval
    sweeper = (
        Sweeper(
            jobnik,
            store.leader_lock("sweeper"),
            interval,
            purge=keys.purge,
            round=background_rounds(telemetry.provider),
            schedules=ScheduleCommands(jobnik),
            archive=archiver.sweep,
            archive_every=settings.archive_interval,
        )
        if interval > 0
        else None
    )
    runner = projections_at_start(store, settings, background_rounds(telemetry.provider))
    wait = settings.min_position_wait

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if sweeper:
            sweeper.start()
        if runner:
            runner.start()
        yield
        if runner:
            runner.stop()
        if sweeper:
            sweeper.stop()
        app.state.streams.close()
        store.close()
        telemetry.close()

    app = create_app(
        jobnik,
        Views(store),
        catchup_views=CatchUpViews(store, wait, on_served=positions.note_served),
        idempotency=keys,
        access=Access(settings.auth, TokenTable(TokenViews(store).all)),
        settings=settings,
        telemetry=telemetry,
        lifespan=lifespan,
    )
    app.state.store, app.state.sweeper, app.state.catchup_runner = store, sweeper, runner
    app.state.archiver = archiver
    return app
