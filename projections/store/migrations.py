"""Schema creation and upgrades, run at start-up under a lock so concurrent starts are safe."""

from __future__ import annotations

import zlib
from typing import TYPE_CHECKING, Final

from jobnik.projections.store.schema import (
    ddl,
    ddl_freshness,
    ddl_history,
    ddl_idempotency,
    ddl_leases,
    ddl_projections,
    ddl_seeds,
    ddl_tokens,
)

if TYPE_CHECKING:
    from jobnik.projections.store.base import SqlStore

LOCK_KEY: Final = zlib.crc32(b"jobnik-migrations")

# Each migration is applied once, in order, and recorded in jobnik_migrations.
MIGRATIONS: Final = [
    (1, "inline read models v1", ddl),
    (2, "task leases and logs", ddl_leases),
    (3, "history index", ddl_history),
    (4, "projection registry", ddl_projections),
    (5, "idempotency keys", ddl_idempotency),
    (6, "delegation, job modes, completion stages, task results", ddl_seeds),
    (7, "optimistic write sessions: freshness check, WAL flush rows", ddl_freshness),
    (8, "access control: tokens, the holder of a task's attempt", ddl_tokens),
]
# After these, rows written before them are rebuilt from the log (through the upcasters).
REBUILD_AFTER: Final = frozenset({2, 3})

_META = (
    "CREATE TABLE IF NOT EXISTS jobnik_migrations "
    "(version INTEGER PRIMARY KEY, description TEXT NOT NULL)"
)


def migrate(store: SqlStore) -> list[int]:
    """Create the library's event table and apply pending migrations; returns those applied."""
    if store.pg is not None:
        with store.pg.get_connection() as conn:  # a session lock, held across the library's DDL
            conn.execute("SELECT pg_advisory_lock(%s)", (LOCK_KEY,))
            try:
                store.create_tables()
                return _rebuild_if_needed(store, _apply(store))
            finally:
                conn.execute("SELECT pg_advisory_unlock(%s)", (LOCK_KEY,))
    store.create_tables()
    return _rebuild_if_needed(store, _apply(store))


def _rebuild_if_needed(store: SqlStore, applied: list[int]) -> list[int]:
    from jobnik.projections.catchup.registry import ensure

    ensure(store)  # register projections (and create catch-up tables) not registered yet
    if REBUILD_AFTER.intersection(applied) and store.recorder.max_notification_id():
        from jobnik.projections.rebuild.bluegreen import rebuild

        rebuild(store, names=["inline"], wait=600)
    return applied


def _apply(store: SqlStore) -> list[int]:
    applied: list[int] = []
    with store.cursor(write=True) as cur:
        cur.execute(_META)
        done = {r["version"] for r in cur.all("SELECT version FROM jobnik_migrations")}
        for version, description, statements in MIGRATIONS:
            if version in done:
                continue
            for statement in statements(store.backend):
                cur.execute(statement)
            p = store.dialect.param
            cur.execute(
                f"INSERT INTO jobnik_migrations (version, description) VALUES ({p('v')}, {p('d')})",
                {"v": version, "d": description},
            )
            applied.append(version)
    return applied
