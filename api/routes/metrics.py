"""GET /metrics: Prometheus' scrape."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request, Response

from jobnik.api.permissions import authorize, needs
from jobnik.domain.principals import Permission

router = APIRouter(tags=["operations"], dependencies=[Depends(authorize)])


@router.get("/metrics", response_class=Response, openapi_extra=needs(Permission.READ))
def metrics(request: Request) -> Response:
    """The server's metrics in Prometheus' text format (OpenMetrics when the Accept header
    asks): HTTP requests by route template, method and status, their latency, requests in
    flight, process metrics; summed over the server's processes. With access control on, a
    token with the read permission (Prometheus' `authorization` scrape setting)."""
    body, content_type = request.app.state.telemetry.metrics.render(request.headers.get("accept"))
    return Response(body, media_type=content_type)
