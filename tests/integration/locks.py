"""Who holds a leader lock, counted in the test's own database (another jobnik may share it).

PostgreSQL scopes advisory locks by database: `pg_locks.database` tells them apart.
"""

from __future__ import annotations

import zlib

import psycopg

HELD_HERE = (
    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted "
    "AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
    "AND ((classid::bigint << 32) | objid::bigint) = %s"
)


def advisory_holders(database_url: str, lock: str) -> int:
    """How many sessions hold the leader lock named `lock` in this database."""
    key = zlib.crc32(f"jobnik:{lock}".encode())
    with psycopg.connect(database_url, autocommit=True) as conn:
        row = conn.execute(HELD_HERE, (key,)).fetchone()
    return int(row[0]) if row else 0
