"""The ASGI factory uvicorn imports (`--factory`): configuration from the environment."""

from __future__ import annotations

import os

from fastapi import FastAPI

from jobnik.api.main import app_from_env


def create() -> FastAPI:
    return app_from_env(os.environ)
