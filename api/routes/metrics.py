"""GET /metrics and GET /service-metrics: Prometheus' scrapes."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request, Response
from prometheus_client import CollectorRegistry

from jobnik.api.permissions import authorize, needs
from jobnik.api.telemetry.metrics import Scrapes
from jobnik.domain.principals import Permission

router = APIRouter(tags=["operations"], dependencies=[Depends(authorize)])


@router.get("/metrics", response_class=Response, openapi_extra=needs(Permission.READ))
async def metrics(request: Request) -> Response:
    """The server's metrics in Prometheus' text format (OpenMetrics when the Accept header
    asks): HTTP requests by route template, method and status, their latency, requests in
    flight, process metrics, summed over the server's processes; the service gauges of
    `/service-metrics`; and per stage type the queue (queued tasks, the oldest one's age,
    leased tasks, expired leases, retries and failures by cause), events appended by type,
    catch-up lag and stuck work by kind (docs/operations.md lists them all). With access control
    on, a token with the read permission (Prometheus' `authorization` scrape setting). Scrapes
    that arrive while another is being answered share its answer."""
    return await _scrape(request, request.app.state.telemetry.metrics.registry)


@router.get("/service-metrics", response_class=Response, openapi_extra=needs(Permission.READ))
async def service_metrics(request: Request) -> Response:
    """Jobnik's manager's service gauges, under its names and labels: `jobnik_jobs_by_status`,
    `jobnik_stages_by_status`, `jobnik_tasks_by_status` and `jobnik_tasks_count`, read from
    the stages' task summaries (a scrape costs the same at any number of tasks)."""
    return await _scrape(request, request.app.state.service_metrics)


async def _scrape(request: Request, registry: CollectorRegistry) -> Response:
    scrapes: Scrapes = request.app.state.scrapes
    body, content_type = await scrapes.render(registry, request.headers.get("accept"))
    return Response(body, media_type=content_type)
