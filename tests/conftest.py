"""Storage fixtures: every test that takes `database_url` runs on SQLite and on PostgreSQL.

PostgreSQL is found in this order, once per test session:
1. JOBNIK_TEST_DATABASE_URL: a server URL whose user may CREATE DATABASE (no fallback if it fails);
2. JOBNIK_TEST_PG_HOSTPORT (default 127.0.0.1:5432) as user postgres, if it accepts a connection;
3. a throwaway server started from the local PostgreSQL binaries, stopped at session end.
If none works, the PostgreSQL tests fail (never skip). JOBNIK_TEST_BACKENDS=sqlite (a comma list)
deselects the other backend for quick local runs; JOBNIK_REQUIRE_POSTGRES=1 (CI) forbids that.

Each session gets one database, `jobnik_test_<pid>_<random>`, dropped at the end; before each test
its schema is dropped and recreated, which is what makes each test's database fresh and empty.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import re
import secrets
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest

from jobnik.domain.application import Jobnik
from jobnik.projections.startup import migrate
from jobnik.projections.store.backends import open_store
from jobnik.projections.store.base import SqlStore
from jobnik.projections.store.config import library_env

BACKENDS = ["sqlite", "postgres"]
DEFAULT_HOSTPORT = "127.0.0.1:5432"
CONNECT_TIMEOUT = 3


def _selected_backends() -> list[str]:
    raw = os.environ.get("JOBNIK_TEST_BACKENDS", "").strip()
    chosen = [b.strip() for b in raw.split(",") if b.strip()] if raw else list(BACKENDS)
    unknown = sorted(set(chosen) - set(BACKENDS))
    if unknown:
        raise pytest.UsageError(
            f"JOBNIK_TEST_BACKENDS: unknown backend(s) {unknown}; use {BACKENDS}"
        )
    if os.environ.get("JOBNIK_REQUIRE_POSTGRES") == "1" and "postgres" not in chosen:
        raise pytest.UsageError("JOBNIK_REQUIRE_POSTGRES=1 but JOBNIK_TEST_BACKENDS leaves it out")
    return chosen


def pytest_configure(config: pytest.Config) -> None:
    _selected_backends()  # a bad switch is a usage error before anything runs


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    chosen = set(_selected_backends())
    keep: list[pytest.Item] = []
    drop: list[pytest.Item] = []
    for item in items:
        callspec = getattr(item, "callspec", None)
        backend = callspec.params.get("database_url") if callspec else None
        (drop if backend is not None and backend not in chosen else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


# -- finding a PostgreSQL server ----------------------------------------------------------------


def _with_db(url: str, dbname: str) -> str:
    """`url` with its database path replaced by `dbname`."""
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + dbname, parts.query, parts.fragment))


def _connect(url: str) -> psycopg.Connection[tuple[object, ...]]:
    return psycopg.connect(url, autocommit=True, connect_timeout=CONNECT_TIMEOUT)


def _try_server(url: str) -> str | None:
    """None when `url` accepts a connection, else why it did not."""
    try:
        with _connect(url) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as e:
        return f"{type(e).__name__}: {str(e).strip()}"
    return None


def _pg_bindirs() -> list[str]:
    """Directories that may hold initdb and pg_ctl, best first."""
    dirs: list[str] = []
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        out = subprocess.run(
            ["pg_config", "--bindir"], capture_output=True, text=True, check=True, timeout=10
        )
        dirs.append(out.stdout.strip())

    def version(path: str) -> tuple[int, ...]:
        return tuple(int(n) for n in re.findall(r"\d+", path))

    dirs += sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=version, reverse=True)
    initdb = shutil.which("initdb")
    if initdb:
        dirs.append(os.path.dirname(initdb))
    return [d for d in dict.fromkeys(dirs) if os.path.isfile(os.path.join(d, "initdb"))]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class ThrowawayServer:
    """A PostgreSQL cluster in a temp dir, on a free port, trusting local connections."""

    bindir: str
    root: str = field(default_factory=lambda: tempfile.mkdtemp(prefix="jobnik-pg-"))
    port: int = 0
    user: str | None = None  # initdb and postgres refuse to run as root: run them as this user

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, *args: str) -> None:
        log = os.path.join(self.root, "server.log")
        try:
            subprocess.run(
                [os.path.join(self.bindir, args[0]), *args[1:]],
                cwd=self.root,
                user=self.user,
                capture_output=True,
                text=True,
                check=True,
                timeout=120,
            )
        except subprocess.CalledProcessError as e:
            tail = Path(log).read_text()[-2000:] if os.path.exists(log) else ""
            raise RuntimeError(
                f"{' '.join(e.cmd)} exited {e.returncode}:\n{e.stdout}{e.stderr}{tail}"
            ) from None

    def start(self) -> None:
        if os.geteuid() == 0:
            self.user = next((u for u in ("postgres", "nobody") if _user_exists(u)), None)
            if self.user is None:
                raise RuntimeError("running as root and no 'postgres' or 'nobody' user to run as")
            pw = pwd.getpwnam(self.user)
            os.chown(self.root, pw.pw_uid, pw.pw_gid)
        data, log = os.path.join(self.root, "data"), os.path.join(self.root, "server.log")
        initdb = ("initdb", "-D", data, "-U", "postgres", "-A", "trust", "-E", "UTF8")
        self._run(*initdb, "--no-locale", "--no-sync")
        for attempt in range(3):  # the free port may be taken between probe and bind
            self.port = _free_port()
            options = (
                f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.root} "
                "-c fsync=off -c synchronous_commit=off -c full_page_writes=off"
            )
            try:
                self._run("pg_ctl", "-D", data, "-o", options, "-l", log, "-w", "-t", "60", "start")
                return
            except RuntimeError:
                if attempt == 2:
                    raise

    def stop(self) -> None:
        data = os.path.join(self.root, "data")
        with contextlib.suppress(RuntimeError, OSError, subprocess.SubprocessError):
            if os.path.exists(os.path.join(data, "postmaster.pid")):
                self._run("pg_ctl", "-D", data, "-m", "immediate", "-w", "stop")
        shutil.rmtree(self.root, ignore_errors=True)


def _user_exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


@pytest.fixture(scope="session")
def pg_server_url() -> Iterator[str]:
    """A PostgreSQL server URL whose user may CREATE DATABASE; fails the test if there is none."""
    explicit = os.environ.get("JOBNIK_TEST_DATABASE_URL", "").strip()
    if explicit:
        why = _try_server(explicit)
        if why:
            pytest.fail(
                f"JOBNIK_TEST_DATABASE_URL={explicit} does not accept connections: {why}",
                pytrace=False,
            )
        yield explicit
        return

    tried: list[str] = []
    hostport = os.environ.get("JOBNIK_TEST_PG_HOSTPORT", DEFAULT_HOSTPORT).strip()
    default = f"postgresql://postgres@{hostport}/postgres"
    why = _try_server(default)
    if why is None:
        yield default
        return
    tried.append(f"{default}: {why}")

    bindirs = _pg_bindirs()
    if not bindirs:
        tried.append("no initdb found (pg_config --bindir, /usr/lib/postgresql/*/bin, PATH)")
    for bindir in bindirs:
        server = ThrowawayServer(bindir)
        try:
            server.start()
        except (RuntimeError, OSError, subprocess.SubprocessError) as e:
            server.stop()
            tried.append(f"throwaway server from {bindir}: {e}")
            continue
        try:
            yield server.url
        finally:
            server.stop()
        return

    pytest.fail(
        "PostgreSQL tests need a server and none could be found or started. Tried:\n  "
        + "\n  ".join(tried)
        + "\nSet JOBNIK_TEST_DATABASE_URL=postgresql://user@host:port/db, or start PostgreSQL on "
        "127.0.0.1:5432, or install its server binaries (initdb, pg_ctl).",
        pytrace=False,
    )


@pytest.fixture(scope="session")
def pg_database_url(pg_server_url: str) -> Iterator[str]:
    """One database for this test session (and pytest-xdist worker), dropped at the end."""
    name = f"jobnik_test_{os.getpid()}_{secrets.token_hex(4)}"
    with _connect(pg_server_url) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield _with_db(pg_server_url, name)
    finally:
        with _connect(pg_server_url) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _reset(url: str) -> None:
    """Drop every table, type and function: the library's composite type lives in `public` too."""
    with _connect(url) as conn:
        conn.execute("SET lock_timeout = '10s'")  # a store left open by a test fails, not hangs
        conn.execute("DROP SCHEMA IF EXISTS public CASCADE")
        conn.execute("CREATE SCHEMA public")


# -- the fixtures the storage tests use --------------------------------------------------------


@pytest.fixture(params=BACKENDS, ids=BACKENDS)
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A JOBNIK_DATABASE_URL naming a fresh, empty database (build a new SqlStore on it)."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'jobnik.db'}"
    url: str = request.getfixturevalue("pg_database_url")
    _reset(url)
    return url


@pytest.fixture
def env(database_url: str) -> dict[str, str]:
    return {"JOBNIK_DATABASE_URL": database_url}


@pytest.fixture
def store(env: dict[str, str]) -> Iterator[SqlStore]:
    """A migrated store, closed after the test."""
    s = open_store(library_env(env))
    try:
        migrate(s)
        yield s
    finally:
        s.close()


@pytest.fixture
def pg_store(pg_database_url: str) -> Iterator[SqlStore]:
    """A migrated store on a fresh PostgreSQL database (tests of PostgreSQL-only code)."""
    _reset(pg_database_url)
    s = open_store(library_env({"JOBNIK_DATABASE_URL": pg_database_url}))
    try:
        migrate(s)
        yield s
    finally:
        s.close()


@pytest.fixture
def jobnik(store: SqlStore) -> Jobnik:
    return Jobnik(store)
