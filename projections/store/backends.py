"""Opening a store: the backend the library's persistence settings name."""

from __future__ import annotations

from collections.abc import Mapping

from eventsourcing.postgres import PostgresApplicationRecorder
from eventsourcing.sqlite import SQLiteApplicationRecorder

from jobnik.projections.store.base import SqlStore
from jobnik.projections.store.databases import database_of
from jobnik.projections.store.errors import wrapped
from jobnik.projections.store.eventlog import open_log
from jobnik.projections.store.postgres import PostgresStore
from jobnik.projections.store.sqlite import SqliteStore


def open_store(env: Mapping[str, str], *, create: bool = True) -> SqlStore:
    """The store over the library's persistence settings `env` (store/config.py makes them
    from jobnik's): PostgreSQL or SQLite.

    The database is looked at first: DatabaseMissing when it is not there and opening would not
    make it (`create` False, a PostgreSQL database, a SQLite file's missing directory),
    DatabaseUnreachable when its server cannot be reached."""
    database = database_of(env)
    if not database.exists() and not (create and database.created_on_open):
        raise database.missing()
    with wrapped():
        log = open_log(env)
    recorder = log.recorder
    if isinstance(recorder, PostgresApplicationRecorder):
        return PostgresStore(env, log, recorder)
    if isinstance(recorder, SQLiteApplicationRecorder):
        return SqliteStore(env, log, recorder)
    log.close()
    raise TypeError(f"unsupported recorder {type(recorder).__name__}")


def store_class(env: Mapping[str, str]) -> type[SqlStore]:
    """The class of the store `open_store(env)` opens, without opening it."""
    postgres = env.get("PERSISTENCE_MODULE") == "eventsourcing.postgres"
    return PostgresStore if postgres else SqliteStore
