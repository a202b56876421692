"""Real jobnik servers as subprocesses, for the HTTP-level integration tests.

`serve(database_url, workers=N)` starts `python -m uvicorn jobnik.scripts.asgi:create --factory
--workers N` on a free port with JOBNIK_DATABASE_URL set, waits until every worker process has
finished its start-up (each one opens the store and runs the schema migration) and /liveness
answers, and stops the whole process group when the test ends.

The log format puts the process id in front of every line, access lines included, so a test can
tell which of the N processes served its requests (`Server.serving_pids()`).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from jobnik.domain.application import Jobnik
from jobnik.domain.limit_commands import LimitCommands
from jobnik.projections.store.backends import open_store
from jobnik.projections.store.base import SqlStore
from jobnik.projections.store.config import library_env

START_TIMEOUT = 60.0
STARTED = "Application startup complete."

LOG_CONFIG = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "default": {
            "()": "uvicorn.logging.DefaultFormatter",
            "fmt": "pid=%(process)d %(levelprefix)s %(message)s",
            "use_colors": False,
        },
        "access": {
            "()": "uvicorn.logging.AccessFormatter",
            "fmt": 'pid=%(process)d ACCESS "%(request_line)s" %(status_code)s',
            "use_colors": False,
        },
    },
    "handlers": {
        "default": {
            "formatter": "default",
            "class": "logging.StreamHandler",
            "stream": "ext://sys.stderr",
        },
        "access": {
            "formatter": "access",
            "class": "logging.StreamHandler",
            "stream": "ext://sys.stdout",
        },
    },
    "loggers": {
        "uvicorn": {"handlers": ["default"], "level": "INFO", "propagate": False},
        "uvicorn.error": {"level": "INFO"},
        "uvicorn.access": {"handlers": ["access"], "level": "INFO", "propagate": False},
    },
    "root": {"handlers": ["default"], "level": "WARNING"},
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Server:
    """One `uvicorn --workers N` process group serving jobnik."""

    database_url: str
    workers: int
    log_path: Path
    port: int = 0
    proc: subprocess.Popen[bytes] | None = None
    env: dict[str, str] = field(default_factory=dict)
    _log: object = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def spawn(self, log_config: Path) -> None:
        """Start the process group; does not wait (see `wait_ready`)."""
        self.port = free_port()
        # These tests read the filtered lists as plain arrays (SDK 0.3.x); tests/api has the
        # paged shape's tests.
        env = {**os.environ, "JOBNIK_DATABASE_URL": self.database_url, "JOBNIK_LIST_SHAPE": "array"}
        env.pop("JOBNIK_POOL_SIZE", None)
        env.update(self.env)
        self._log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "uvicorn",
                "jobnik.scripts.asgi:create",
                "--factory",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--workers",
                str(self.workers),
                "--log-config",
                str(log_config),
            ],
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,  # type: ignore[arg-type]
            start_new_session=True,  # its own process group: stopped as a whole
        )

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def started_pids(self) -> set[int]:
        return {int(m) for m in re.findall(rf"pid=(\d+) INFO: +{re.escape(STARTED)}", self.log())}

    def serving_pids(self, request_line: str = "") -> set[int]:
        """Processes that logged an access line containing `request_line`."""
        pids = set()
        for m in re.finditer(r'pid=(\d+) ACCESS "([^"]*)"', self.log()):
            if request_line in m.group(2):
                pids.add(int(m.group(1)))
        return pids

    def wait_ready(self, timeout: float = START_TIMEOUT) -> None:
        """Every worker started and /liveness answers; fails with the log if the group died."""
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"server exited with {self.proc.returncode}:\n{self.log()[-4000:]}")
            if len(self.started_pids()) >= self.workers:
                with contextlib.suppress(httpx.HTTPError):
                    if httpx.get(f"{self.url}/liveness", timeout=2).status_code == 200:
                        return
            time.sleep(0.05)
        pytest.fail(f"server not ready after {timeout}s:\n{self.log()[-4000:]}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=15)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if self.proc is not None:
                os.killpg(self.proc.pid, signal.SIGKILL)  # stragglers of the group, if any
        if self._log is not None:
            self._log.close()  # type: ignore[attr-defined]
            self._log = None


SpawnServer = Callable[..., Server]


@contextlib.contextmanager
def _spawner(directory: Path) -> Iterator[SpawnServer]:
    log_config = directory / "uvicorn-log.json"
    log_config.write_text(json.dumps(LOG_CONFIG))
    servers: list[Server] = []

    def spawn(
        database_url: str, workers: int = 1, wait: bool = True, env: dict[str, str] | None = None
    ) -> Server:
        server = Server(
            database_url, workers, directory / f"server-{len(servers)}.log", env=dict(env or {})
        )
        servers.append(server)
        server.spawn(log_config)
        if wait:
            server.wait_ready()
        return server

    try:
        yield spawn
    finally:
        for server in servers:
            server.stop()


@pytest.fixture
def spawn_server(tmp_path: Path) -> Iterator[SpawnServer]:
    """`spawn_server(database_url, workers=1, wait=True, env=None) -> Server`; all stopped at
    teardown. `env` adds to the server's environment (e.g. JOBNIK_SWEEP_INTERVAL)."""
    with _spawner(tmp_path) as spawn:
        yield spawn


@pytest.fixture(scope="module")
def spawn_module_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SpawnServer]:
    """The same, for servers that live as long as the test module."""
    with _spawner(tmp_path_factory.mktemp("servers")) as spawn:
        yield spawn


@pytest.fixture
def other(pg_database_url: str) -> Iterator[SqlStore]:
    """A second store on the same database: another server process, with its own memory."""
    s = open_store(library_env({"JOBNIK_DATABASE_URL": pg_database_url}))
    try:
        yield s
    finally:
        s.close()


@pytest.fixture
def limits(jobnik: Jobnik) -> LimitCommands:
    """The stage types' limit commands on the test's store."""
    return LimitCommands(jobnik.store, jobnik.clock)
