"""A lock at most one process of a database holds: who runs the lease sweeper, the catch-up
projections, a rebuild, when many processes serve one database. Freed if the process dies."""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import threading
import zlib
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import IO, Any, ClassVar

import psycopg

log = logging.getLogger(__name__)


class LeaderLock(ABC):
    """`acquire` is true while this process holds the lock (cheap to call again: it re-checks)."""

    def __init__(self, name: str) -> None:
        self.name = name

    @abstractmethod
    def acquire(self) -> bool: ...

    @abstractmethod
    def release(self) -> None: ...


class AdvisoryLock(LeaderLock):
    """PostgreSQL: a session advisory lock on a connection of its own."""

    def __init__(self, name: str, connection_kwargs: Callable[[], dict[str, Any]]) -> None:
        super().__init__(name)
        self.key = zlib.crc32(f"jobnik:{name}".encode())
        self._kwargs = connection_kwargs
        self._conn: psycopg.Connection[Any] | None = None

    def acquire(self) -> bool:
        try:
            if self._conn is not None and not self._conn.closed:
                self._conn.execute("SELECT 1")
                return True
            kwargs = self._kwargs()
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

    def release(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(psycopg.Error):
                # unlocked before the close: a closed connection's lock goes only once its
                # server process has exited, which a quick acquire elsewhere can beat
                self._conn.execute("SELECT pg_advisory_unlock_all()")
            with contextlib.suppress(psycopg.Error):
                self._conn.close()
            self._conn = None


class FileLock(LeaderLock):
    """SQLite: an exclusive flock on a file beside the database."""

    def __init__(self, name: str, database: str) -> None:
        super().__init__(name)
        self.path = f"{database}.{name}.lock"
        self._file: IO[str] | None = None

    def acquire(self) -> bool:
        if self._file is not None:
            return True
        handle = open(self.path, "a")  # noqa: SIM115 - held open while leader
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
        if self._file is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self._file.fileno(), fcntl.LOCK_UN)
                self._file.close()
            self._file = None


class ProcessLock(LeaderLock):
    """A database only this process opens (SQLite in memory): a lock of the process's own."""

    _held: ClassVar[set[tuple[str, str]]] = set()
    _guard: ClassVar = threading.Lock()

    def __init__(self, name: str, database: str) -> None:
        super().__init__(name)
        self.key = (database, name)
        self._mine = False

    def acquire(self) -> bool:
        with self._guard:
            if not self._mine and self.key not in self._held:
                self._held.add(self.key)
                self._mine = True
            return self._mine

    def release(self) -> None:
        with self._guard:
            if self._mine:
                self._held.discard(self.key)
                self._mine = False
