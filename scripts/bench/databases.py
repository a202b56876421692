"""Throwaway PostgreSQL databases for the benchmarks: created fresh, dropped afterwards."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlparse, urlunparse


@contextmanager
def fresh_database(pg_url: str, name: str) -> Iterator[str]:
    """An empty database `name` on `pg_url`'s server (dropped first if left over); its URL."""
    import psycopg

    admin_url = urlunparse(urlparse(pg_url)._replace(path="/postgres"))
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        admin.execute(f"CREATE DATABASE {name}")
    try:
        yield urlunparse(urlparse(pg_url)._replace(path=f"/{name}"))
    finally:
        with psycopg.connect(admin_url, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
