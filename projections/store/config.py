"""jobnik's settings (JOBNIK_*) → the eventsourcing library's persistence settings."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from urllib.parse import unquote, urlparse

DEFAULT_SQLITE_PATH = "jobnik.db"
MEMORY = "sqlite:///:memory:"


def library_env(env: Mapping[str, str]) -> dict[str, str]:
    """PostgreSQL when JOBNIK_DATABASE_URL is a postgresql:// URL, else a SQLite file.

    JOBNIK_DATABASE_URL  postgresql://user:pass@host:port/db, sqlite:///path/to/file.db, or
                         sqlite:///:memory: (a new database in this process's memory)
    JOBNIK_POOL_SIZE     PostgreSQL connections kept open (default 5; up to 2x under load)
    """
    url = env.get("JOBNIK_DATABASE_URL", "").strip()
    if url.startswith(("postgresql://", "postgres://")):
        u = urlparse(url)
        pool = env.get("JOBNIK_POOL_SIZE", "5")
        return {
            "PERSISTENCE_MODULE": "eventsourcing.postgres",
            "POSTGRES_DBNAME": (u.path or "/postgres").lstrip("/") or "postgres",
            "POSTGRES_HOST": u.hostname or "127.0.0.1",
            "POSTGRES_PORT": str(u.port or 5432),
            "POSTGRES_USER": unquote(u.username or "postgres"),
            "POSTGRES_PASSWORD": unquote(u.password or ""),
            "POSTGRES_POOL_SIZE": pool,
            "POSTGRES_MAX_OVERFLOW": pool,
            "POSTGRES_CONNECT_TIMEOUT": env.get("JOBNIK_DB_TIMEOUT", "30"),
        }
    path = DEFAULT_SQLITE_PATH
    if url == MEMORY:  # a database of its own, in this process's memory, gone when closed
        path = f"file:jobnik-{uuid.uuid4().hex}?mode=memory&cache=shared"
    elif url.startswith("sqlite:///"):
        path = url[len("sqlite:///") :]
    elif url:
        raise ValueError(
            f"JOBNIK_DATABASE_URL must start with postgresql:// or sqlite:///, got {url!r}"
        )
    return {
        "PERSISTENCE_MODULE": "eventsourcing.sqlite",
        "SQLITE_DBNAME": path,
        "SQLITE_LOCK_TIMEOUT": env.get("JOBNIK_DB_TIMEOUT", "30"),
    }
