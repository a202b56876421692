"""The database a store lives in, looked at before any store opens: is it there, and making it.

Opening a store on a PostgreSQL database that does not exist would have its pools retry until
the connection timeout, and opening one on a SQLite file that does not exist creates it; a look
first answers at once, and tells a missing database from a server that cannot be reached. One
class per backend: `SqliteFile`, `PostgresDatabase`; `database_of` picks one from the library's
persistence settings (store/config.py makes them).
"""

from __future__ import annotations

import os
import re
import sqlite3
from abc import ABC, abstractmethod
from collections.abc import Mapping
from contextlib import closing
from typing import Any, Final

import psycopg
from psycopg import sql

from jobnik.domain.errors import DatabaseError, DatabaseMissing, DatabaseUnreachable

MAINTENANCE_DB: Final = "postgres"  # the database every PostgreSQL server has, to ask about others


class Database(ABC):
    """A database named by the settings, not opened."""

    @abstractmethod
    def exists(self) -> bool:
        """Whether it is there (DatabaseUnreachable when that cannot be told)."""

    @property
    @abstractmethod
    def created_on_open(self) -> bool:
        """Whether opening a store makes it when it is not there."""

    @abstractmethod
    def missing(self) -> DatabaseMissing:
        """The error saying it is not there, and how to make it."""

    @abstractmethod
    def create(self) -> None:
        """Make it, empty (DatabaseError when this user may not)."""


class SqliteFile(Database):
    """A SQLite file: it exists when the file does; opening a store creates it."""

    def __init__(self, name: str) -> None:
        self.memory = name == ":memory:" or "mode=memory" in name
        self.path = name.removeprefix("file:").split("?", 1)[0]

    def __str__(self) -> str:
        return f"the SQLite file {self.path}"

    def exists(self) -> bool:
        return self.memory or os.path.isfile(self.path)

    @property
    def created_on_open(self) -> bool:
        return os.path.isdir(os.path.dirname(os.path.abspath(self.path)))

    def missing(self) -> DatabaseMissing:
        if not self.created_on_open:
            folder = os.path.dirname(os.path.abspath(self.path))
            return DatabaseMissing(f"cannot make {self}: the directory {folder} does not exist")
        where = "" if os.path.isabs(self.path) else f" in {os.getcwd()}"
        return DatabaseMissing(
            f"no jobnik database: {self} does not exist{where} (`jobnik migrate` creates it; "
            "JOBNIK_DATABASE_URL names another)"
        )

    def create(self) -> None:
        if not self.created_on_open:
            raise self.missing()
        with closing(sqlite3.connect(self.path)):
            pass


class PostgresDatabase(Database):
    """A database on a PostgreSQL server: whether it exists is asked of the server, through
    its maintenance database when a connection to it fails."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.name = env["POSTGRES_DBNAME"]
        self.host, self.port = env["POSTGRES_HOST"], env["POSTGRES_PORT"]
        self.user = env["POSTGRES_USER"]
        self.params: dict[str, Any] = {
            "host": self.host,
            "port": self.port,
            "user": self.user,
            "connect_timeout": int(float(env.get("POSTGRES_CONNECT_TIMEOUT", "30"))),
        }
        if env.get("POSTGRES_PASSWORD"):
            self.params["password"] = env["POSTGRES_PASSWORD"]

    def __str__(self) -> str:
        return f"the PostgreSQL database {self.name} on {self.host}:{self.port}"

    def exists(self) -> bool:
        try:
            with psycopg.connect(dbname=self.name, **self.params):
                return True
        except psycopg.Error as e:
            refused = e
        if self.name != MAINTENANCE_DB and self._listed() is False:
            return False
        raise self._unreachable(refused) from refused  # the server, or these credentials

    def _listed(self) -> bool | None:
        """Whether the server lists the database; None when it cannot be asked."""
        try:
            with psycopg.connect(dbname=MAINTENANCE_DB, **self.params) as conn:
                found = conn.execute(
                    "SELECT 1 FROM pg_database WHERE datname = %s", (self.name,)
                ).fetchone()
        except psycopg.Error:
            return None
        return found is not None

    @property
    def created_on_open(self) -> bool:
        return False

    def missing(self) -> DatabaseMissing:
        return DatabaseMissing(
            f"{self} does not exist: create it (createdb -h {self.host} -p {self.port} "
            f"-U {self.user} {self.name}), or let `jobnik migrate --create-database` do it"
        )

    def create(self) -> None:
        try:
            with psycopg.connect(dbname=MAINTENANCE_DB, autocommit=True, **self.params) as conn:
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(self.name)))
        except psycopg.errors.DuplicateDatabase:
            return  # made meanwhile by another
        except psycopg.Error as e:
            raise DatabaseError(f"cannot create {self} as {self.user}: {_reason(e)}") from e

    def _unreachable(self, e: psycopg.Error) -> DatabaseUnreachable:
        return DatabaseUnreachable(f"cannot connect to {self} as {self.user}: {_reason(e)}")


def _reason(e: psycopg.Error) -> str:
    """The driver's message as one line: what the server or the network answered."""
    text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    text = text.removeprefix("connection failed: ")
    text = re.sub(r'^connection to server at "[^"]*", port \d+ failed: ', "", text)
    return re.sub(r"\s+", " ", text.replace("FATAL:", "")).strip()


def database_of(env: Mapping[str, str]) -> Database:
    """The database the library's persistence settings `env` name."""
    if env.get("PERSISTENCE_MODULE") == "eventsourcing.postgres":
        return PostgresDatabase(env)
    return SqliteFile(env.get("SQLITE_DBNAME", ":memory:"))
