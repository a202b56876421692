"""The ASGI factory uvicorn imports (`--factory`): settings from the environment."""

from __future__ import annotations

from fastapi import FastAPI

from jobnik.api.main import app_from_settings
from jobnik.api.settings import Settings


def create() -> FastAPI:
    return app_from_settings(Settings())
