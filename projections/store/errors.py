"""Driver and library errors, wrapped once where the store calls them."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
import psycopg_pool
from eventsourcing.domain import EventSourcingError

from jobnik.domain.errors import DatabaseError

# The drivers' roots, and the library's (its persistence errors, a closed pool, ...).
DRIVER_ERRORS = (sqlite3.Error, psycopg.Error, psycopg_pool.PoolTimeout, EventSourcingError)


@contextmanager
def wrapped() -> Iterator[None]:
    """Raise the drivers' and the eventsourcing library's errors as the server's DatabaseError
    (`JobnikError`'s family); the domain's own errors pass as they are."""
    try:
        yield
    except DRIVER_ERRORS as e:
        raise DatabaseError(f"database error: {e}") from e
