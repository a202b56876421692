"""GET /metrics: Prometheus' scrape."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

router = APIRouter(tags=["operations"])


@router.get("/metrics", response_class=Response)
def metrics(request: Request) -> Response:
    """The server's metrics in Prometheus' text format (OpenMetrics when the Accept header
    asks): HTTP requests by route template, method and status, their latency, requests in
    flight, process metrics; summed over the server's processes."""
    body, content_type = request.app.state.telemetry.metrics.render(request.headers.get("accept"))
    return Response(body, media_type=content_type)
