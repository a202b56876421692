"""jobnik in memory, for tests: the whole API on a database of its own in this process's memory.

A worker's handler, or a client of the API, can be tested against the real service without a
database server or a file, as procrastinate's in-memory connector does for its users::

    from fastapi.testclient import TestClient
    from jobnik.api.testing import memory_app

    with TestClient(memory_app()) as http:
        job = http.post("/v1/jobs", json={"name": "nightly", "data": {}}).json()

Everything is there (the read models, the history, the sweeper and the catch-up projections)
and every app gets a new, empty database, gone when the app's lifespan ends. Settings are the
`JOBNIK_*` variables, given as keyword arguments (`lease_seconds=5` for JOBNIK_LEASE_SECONDS).
"""

from __future__ import annotations

from fastapi import FastAPI

from jobnik.api.main import app_from_env
from jobnik.projections.store.config import MEMORY


def memory_app(**settings: str | int | float | bool) -> FastAPI:
    """The API over a new database in memory, with these settings."""
    env = {f"JOBNIK_{name.upper()}": str(value) for name, value in settings.items()}
    return app_from_env({**env, "JOBNIK_DATABASE_URL": MEMORY})
