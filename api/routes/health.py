"""Liveness."""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter(tags=["health"])


@router.get("/liveness")
def liveness() -> dict[str, str]:
    """200 while the process serves requests."""
    return {"status": "ok"}
