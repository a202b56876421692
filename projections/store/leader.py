"""A lock at most one process holds: who runs the lease sweeper when many API processes run."""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import zlib
from typing import IO, Any

import psycopg

from jobnik.projections.store.base import SqlStore

log = logging.getLogger(__name__)


class LeaderLock:
    """PostgreSQL: a session advisory lock on a dedicated connection (freed if the process dies).
    SQLite: an exclusive flock on a file beside the database (freed if the process dies)."""

    def __init__(self, store: SqlStore, name: str) -> None:
        self.store = store
        self.key = zlib.crc32(f"jobnik:{name}".encode())
        self.name = name
        self._conn: psycopg.Connection[Any] | None = None
        self._file: IO[str] | None = None

    def acquire(self) -> bool:
        """True while this process holds the lock (cheap to call again: it re-checks)."""
        if self.store.pg is not None:
            return self._acquire_pg()
        return self._acquire_file()

    def _acquire_pg(self) -> bool:
        assert self.store.pg is not None
        try:
            if self._conn is not None and not self._conn.closed:
                self._conn.execute("SELECT 1")
                return True
            kwargs = self.store.connection_kwargs()
            kwargs.pop("row_factory", None)
            self._conn = psycopg.connect(autocommit=True, **kwargs)
            row = self._conn.execute("SELECT pg_try_advisory_lock(%s)", (self.key,)).fetchone()
            if row and row[0]:
                log.info("leader", extra={"action": "leader_acquired", "lock": self.name})
                return True
        except psycopg.Error as exc:
            log.warning("leader lock failed: %s", exc, extra={"action": "leader_lock_failed"})
        self.release()
        return False

    def _acquire_file(self) -> bool:
        if self._file is not None:
            return True
        path = f"{self.store.sqlite_path}.{self.name}.lock"
        handle = open(path, "a")  # noqa: SIM115 - held open while leader
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.close()
            return False
        handle.write(f"{os.getpid()}\n")
        handle.flush()
        self._file = handle
        return True

    def release(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(psycopg.Error):
                self._conn.close()
            self._conn = None
        if self._file is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self._file.fileno(), fcntl.LOCK_UN)
                self._file.close()
            self._file = None
