from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from jobnik.api.main import app_from_env
from jobnik.domain.errors import StoreInUse
from jobnik.scripts.cli import app as cli

SQLITE_ONLY = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
ROOT = Path(__file__).resolve().parents[2]


@SQLITE_ONLY
def test_a_second_server_on_one_sqlite_file_is_refused(database_url: str) -> None:
    env = {"JOBNIK_DATABASE_URL": database_url}
    first = app_from_env(env)

    with pytest.raises(StoreInUse) as refused:
        app_from_env(env)
    first.state.store.close()
    with TestClient(app_from_env(env)) as again:
        served = again.get("/liveness")

    assert "SQLite is for one server process" in refused.value.message
    assert served.status_code == 200


@SQLITE_ONLY
def test_a_second_server_process_on_one_sqlite_file_exits_with_the_reason(
    database_url: str, spawn_server: Callable[..., Any]
) -> None:
    spawn_server(database_url)
    env = {**os.environ, "JOBNIK_DATABASE_URL": database_url}
    factory = ["-m", "uvicorn", "jobnik.scripts.asgi:create", "--factory", "--port", "0"]

    second = subprocess.run(
        [sys.executable, *factory], env=env, capture_output=True, text=True, timeout=60
    )

    assert second.returncode == 2
    assert "another jobnik server already serves" in second.stderr
    assert "Traceback" not in second.stderr


@SQLITE_ONLY
def test_serve_with_several_workers_on_sqlite_is_refused(database_url: str) -> None:
    result = CliRunner().invoke(
        cli, ["serve", "--workers", "2"], env={"JOBNIK_DATABASE_URL": database_url}
    )

    assert result.exit_code != 0
    assert "SQLite serves one process" in result.output


@SQLITE_ONLY
def test_git_ignores_every_file_a_sqlite_server_leaves_beside_its_database(
    database_url: str,
) -> None:
    path = Path(database_url.removeprefix("sqlite:///"))
    app = app_from_env({"JOBNIK_DATABASE_URL": database_url})
    with TestClient(app) as client:
        client.post("/v1/jobs", json={"name": "ab", "data": {}})  # the -wal and -shm files
        store = app.state.store
        for name in ("sweeper", "catchup", "rebuild"):  # each leader lock's file
            store.leader_lock(name).acquire()
        left = sorted(p.name for p in path.parent.iterdir())
        ignored = subprocess.run(
            ["git", "check-ignore", "--no-index", "--verbose", "--non-matching", *left],
            cwd=ROOT,
            capture_output=True,
            text=True,
        )

    assert {"jobnik.db", "jobnik.db.server.lock", "jobnik.db.sweeper.lock"} <= set(left)
    unmatched = [line for line in ignored.stdout.splitlines() if line.startswith("::")]
    assert unmatched == [], ignored.stdout
