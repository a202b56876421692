"""The ASGI factory uvicorn imports (`--factory`): settings from the environment."""

from __future__ import annotations

import gc
import sys

from fastapi import FastAPI

from jobnik.api.main import app_from_settings
from jobnik.api.settings import InvalidSettings, Settings
from jobnik.domain.errors import DatabaseError, StoreInUse
from jobnik.scripts.failures import explain


def create() -> FastAPI:
    """The app, or an exit with the reason when it cannot start (a setting that does not parse,
    a database missing or out of reach, another server on its SQLite file): a sentence for the
    operator, not a traceback."""
    try:
        app = app_from_settings(Settings())
    except (InvalidSettings, DatabaseError, StoreInUse) as exc:
        failure = explain(exc)
        print(f"jobnik serve: {failure.message}", file=sys.stderr)
        raise SystemExit(failure.status) from None
    # What exists now (modules, the app, its routes and schemas) lives as long as the process: the
    # garbage collector stops scanning it, so a full collection, which requests that allocate much
    # set off, scans what requests made and not the whole application on the event loop's time.
    gc.freeze()
    return app
