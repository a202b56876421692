"""Schema creation and upgrades: numbered migration files, applied in order, once each.

`sql/migrations/NNN_name.sql` is migration NNN for both backends, `NNN_name.<backend>.sql` for one
backend only (the other records it and runs nothing). Its first line, a comment, describes it.
A new database gets `sql/schema.sql` (and `sql/schema.<backend>.sql`) in one go, with every
migration recorded as applied: tests/integration/test_migrations.py checks that a database
migrated step by step equals a new one. A statement ends with `;` at the end of a line (a `$$`
body may hold more); `{uuid}`, `{json}`, `{time}`, `{bool}` and `{false}` stand for the backend's
column types (`Dialect.types`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib.resources import files
from typing import TYPE_CHECKING, Final

from jobnik.projections.store.dialect import Dialect

if TYPE_CHECKING:
    from jobnik.projections.store.base import SqlStore

SQL: Final = files("jobnik.projections.store") / "sql"
_FILE: Final = re.compile(r"^(\d{3})_(\w+?)(?:\.(postgres|sqlite))?\.sql$")
META: Final = (
    "CREATE TABLE IF NOT EXISTS jobnik_migrations "
    "(version INTEGER PRIMARY KEY, description TEXT NOT NULL)"
)
# After these, rows written before them are rebuilt from the log (through the upcasters).
REBUILD_AFTER: Final = frozenset({2, 3, 11, 21})


def statements(text: str, dialect: Dialect) -> list[str]:
    """The statements of a file's `text`, its type placeholders filled in for `dialect`."""
    out: list[str] = []
    current: list[str] = []
    quoted = False  # inside a $$ body
    for line in text.format(**dialect.types).splitlines():
        if not current and (not line.strip() or line.lstrip().startswith("--")):
            continue
        current.append(line)
        quoted ^= line.count("$$") % 2 == 1
        if not quoted and line.rstrip().endswith(";"):
            out.append("\n".join(current).strip().removesuffix(";").rstrip())
            current = []
    if "".join(current).strip():
        out.append("\n".join(current).strip())
    return out


@dataclass(frozen=True)
class Migration:
    """One numbered migration: its text for both backends, or for one (`backend`)."""

    version: int
    description: str
    text: str
    backend: str | None

    def statements(self, dialect: Dialect) -> list[str]:
        if self.backend not in (None, dialect.name):
            return []
        return statements(self.text, dialect)


def _load() -> list[Migration]:
    found = []
    for entry in (SQL / "migrations").iterdir():
        match = _FILE.match(entry.name)
        if match is None:
            continue
        text = entry.read_text(encoding="utf-8")
        description = text.splitlines()[0].removeprefix("--").strip()
        found.append(Migration(int(match.group(1)), description, text, match.group(3)))
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if versions != list(range(1, len(found) + 1)):
        raise RuntimeError(f"migrations must be numbered 1, 2, 3, ... without gaps: {versions}")
    return found


MIGRATIONS: Final = _load()


def schema(dialect: Dialect) -> list[str]:
    """The statements that create a new database's schema on `dialect`'s backend."""
    out = statements((SQL / "schema.sql").read_text(encoding="utf-8"), dialect)
    own = SQL / f"schema.{dialect.name}.sql"
    if own.is_file():
        out += statements(own.read_text(encoding="utf-8"), dialect)
    return out


def apply(store: SqlStore, until: int | None = None) -> list[int]:
    """Apply the pending migrations (up to `until`) in one transaction; returns their versions.

    A database with none applied and no `until` gets the whole schema at once instead."""
    applied: list[int] = []
    dialect = store.dialect
    with store.cursor(write=True) as cur:
        cur.execute(META)
        done = {r["version"] for r in cur.all("SELECT version FROM jobnik_migrations")}
        pending = [m for m in MIGRATIONS if m.version not in done]
        if until is not None:
            pending = [m for m in pending if m.version <= until]
        if not done and until is None:
            for statement in schema(dialect):
                cur.execute(statement)
        else:
            for m in pending:
                for statement in m.statements(dialect):
                    cur.execute(statement)
        p = dialect.param
        for m in pending:
            cur.execute(
                f"INSERT INTO jobnik_migrations (version, description) VALUES ({p('v')}, {p('d')})",
                {"v": m.version, "d": m.description},
            )
            applied.append(m.version)
    return applied


def version(store: SqlStore) -> int | None:
    """The latest migration applied to the store's database; None when it holds no schema."""
    with store.cursor(write=False) as cur:
        if not store.columns_of(cur, "jobnik_migrations"):
            return None
        row = cur.one("SELECT MAX(version) AS version FROM jobnik_migrations")
    return int(row["version"] or 0) if row else 0
