"""Opening a store: the backend the library's persistence settings name."""

from __future__ import annotations

from collections.abc import Mapping

from eventsourcing.postgres import PostgresApplicationRecorder
from eventsourcing.sqlite import SQLiteApplicationRecorder

from jobnik.projections.store.base import SqlStore
from jobnik.projections.store.errors import wrapped
from jobnik.projections.store.eventlog import open_log
from jobnik.projections.store.postgres import PostgresStore
from jobnik.projections.store.sqlite import SqliteStore


def open_store(env: Mapping[str, str]) -> SqlStore:
    """The store over the library's persistence settings `env` (store/config.py makes them
    from jobnik's): PostgreSQL or SQLite."""
    with wrapped():
        log = open_log(env)
    recorder = log.recorder
    if isinstance(recorder, PostgresApplicationRecorder):
        return PostgresStore(env, log, recorder)
    if isinstance(recorder, SQLiteApplicationRecorder):
        return SqliteStore(env, log, recorder)
    log.close()
    raise TypeError(f"unsupported recorder {type(recorder).__name__}")
