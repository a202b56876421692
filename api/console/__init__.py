"""The web console at /ui: server-rendered pages (Jinja2) over the `/v1` API's query objects,
and a little script (static/console.js) that follows the live streams and sends the `/v1`
commands. Its files ship inside the package; nothing is loaded from elsewhere."""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from jobnik.api.console import retention, schedules
from jobnik.api.console.render import STATIC
from jobnik.api.console.routes import entry, router


def install(app: FastAPI) -> None:
    """Add the console's pages and static files to `app`."""
    app.router.routes.extend(
        [*router.routes, *schedules.router.routes, *retention.router.routes, *entry.routes]
    )
    app.mount("/ui/static", StaticFiles(directory=STATIC), name="console-static")
