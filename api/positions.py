"""Log positions a request wrote or was served, carried from the store to the HTTP response.

The API's middleware sets `REQUEST_POSITIONS` to a fresh dict per request; the store's commit
listener notes the position each committed write session reached (`note_written`, registered by
`create_app`), and the catch-up reads note the tracking position they answered from
(`note_served`). FastAPI runs sync routes in a threadpool
with a copy of the context, so the copy holds the same dict and the middleware sees what the
thread wrote. Outside a request (CLI, tests, workers) the variable is unset and nothing is noted.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Final

WRITTEN: Final = "written"
SERVED: Final = "served"

REQUEST_POSITIONS: Final[ContextVar[dict[str, int] | None]] = ContextVar(
    "jobnik_request_positions", default=None
)


def note_written(position: int) -> None:
    """Record that this request committed events up to log position `position`."""
    box = REQUEST_POSITIONS.get()
    if box is not None:
        box[WRITTEN] = max(box.get(WRITTEN, 0), position)


def note_served(position: int) -> None:
    """Record the tracking position of the catch-up projection this request read."""
    box = REQUEST_POSITIONS.get()
    if box is not None:
        box[SERVED] = position
