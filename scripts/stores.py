"""The store a command works on: the database the settings name, its schema up to date.

Commands that make a database (`serve`, `migrate`, `tokens create`) open it with `create`; the
others (`replay`, `history export`, `projections ...`, ...) find one or say that there is none,
and create nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from jobnik.api.settings import Settings
    from jobnik.projections.store.base import SqlStore


@dataclass(frozen=True)
class Schema:
    """What opening the store did to its schema: the migration versions before and after."""

    before: int | None  # None: there was no schema
    after: int

    def __str__(self) -> str:
        if self.before is None:
            return f"created the schema (version {self.after})"
        if self.before != self.after:
            return f"upgraded the schema from version {self.before} to {self.after}"
        return f"the schema is at version {self.after}: nothing to do"


def open_store(
    settings: Settings | None = None, *, create: bool = False, create_database: bool = False
) -> SqlStore:
    """The store the settings (by default the environment's) name, migrated; see `migrated`."""
    return migrated(settings, create=create, create_database=create_database)[0]


def migrated(
    settings: Settings | None = None, *, create: bool = False, create_database: bool = False
) -> tuple[SqlStore, Schema]:
    """The store the settings name with its schema created or upgraded, and what that did.

    Without `create`, a database that does not exist or holds no schema is DatabaseMissing
    and nothing is made. `create_database`: a PostgreSQL database that does not exist is
    created first (its user needs the CREATEDB privilege)."""
    from jobnik.api.settings import Settings
    from jobnik.domain.errors import DatabaseMissing
    from jobnik.projections.startup import migrate
    from jobnik.projections.store import migrations
    from jobnik.projections.store.backends import open_store as open_database
    from jobnik.projections.store.databases import database_of

    settings = settings or Settings()
    env = settings.library_env()
    database = database_of(env)
    if create_database and not database.exists():
        database.create()
    store = open_database(env, create=create)
    try:
        before = migrations.version(store)
        if before is None and not create:
            raise DatabaseMissing(
                f"no jobnik database: {database} holds no jobnik schema (`jobnik migrate` "
                "creates it)"
            )
        applied = migrate(store, settings.rebuild_processes)
    except BaseException:
        store.close()
        raise
    return store, Schema(before, max(applied, default=before or 0))
