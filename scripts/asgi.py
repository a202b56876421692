"""The ASGI factory uvicorn imports (`--factory`): settings from the environment."""

from __future__ import annotations

import gc
import sys

from fastapi import FastAPI

from jobnik.api.main import app_from_settings
from jobnik.api.settings import Settings
from jobnik.domain.errors import StoreInUse


def create() -> FastAPI:
    """The app, or exit 2 with the reason when the store refuses this process (another server
    already serves its SQLite file): a sentence for the operator, not a traceback."""
    try:
        app = app_from_settings(Settings())
    except StoreInUse as exc:
        print(f"jobnik serve: {exc.message}", file=sys.stderr)
        raise SystemExit(2) from None
    # What exists now (modules, the app, its routes and schemas) lives as long as the process: the
    # garbage collector stops scanning it, so a full collection, which requests that allocate much
    # set off, scans what requests made and not the whole application on the event loop's time.
    gc.freeze()
    return app
