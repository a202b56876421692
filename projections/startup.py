"""Before a process serves: the schema up to date, every projection registered, rows rebuilt where
a migration changed what they hold."""

from __future__ import annotations

from jobnik.projections.catchup.registry import INLINE, ensure
from jobnik.projections.rebuild.bluegreen import rebuild
from jobnik.projections.store import migrations
from jobnik.projections.store.base import SqlStore


def migrate(store: SqlStore, processes: int | None = None) -> list[int]:
    """Create or upgrade every table; safe when several processes start at once. Returns the
    migrations this call applied.

    Under the migration lock: the library's event table, the pending migrations, the projections
    not registered yet (a catch-up projection's tables with them), and, when a migration changed
    what the inline read models hold, their rebuild from the log (`processes`: see `rebuild`)."""
    with store.migration_lock():
        store.create_tables()
        applied = migrations.apply(store)
        ensure(store)
        if migrations.REBUILD_AFTER.intersection(applied) and store.head():
            rebuild(store, names=[INLINE.name], wait=600, processes=processes)
    return applied
