"""The shipped example, `examples/create_map.py`, run as the README runs it, against a live server
with access control on: its two workers (`jobnik worker run`, each with a worker token for its
stage type) and its job creator (with a producer token), all finding the server and their token
in JOBNIK_API_URL and JOBNIK_TOKEN."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from jobnik.scripts.cli import app as cli

from .conftest import SpawnServer

ROOT = Path(__file__).resolve().parents[2]


def token(env: dict[str, str], name: str, *args: str) -> str:
    result = CliRunner().invoke(cli, ["tokens", "create", name, *args], env=env)
    assert result.exit_code == 0, result.output
    return result.stdout.strip()


def test_the_example_runs_to_completed_with_access_control_on(
    database_url: str, spawn_server: SpawnServer, tmp_path: Path
) -> None:
    env = {"JOBNIK_DATABASE_URL": database_url}
    creator = token(env, "map-creator", "--role", "producer")
    tiler = token(env, "tiler", "--role", "worker", "--stage-type", "process-tiles")
    uploader = token(env, "uploader", "--role", "worker", "--stage-type", "upload-tiles")
    server = spawn_server(database_url)
    client_env = {**os.environ, "JOBNIK_API_URL": server.url}
    logs = {name: (tmp_path / f"{name}.log").open("wb") for name in ("tiles", "upload")}
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", "from jobnik.scripts.cli import main; main()", "worker", "run",
             f"examples.create_map:{handler}", "--stage-type", stage_type, "--concurrency", "4"],
            cwd=ROOT,
            env={**client_env, "JOBNIK_TOKEN": secret},
            stdout=logs[name],
            stderr=subprocess.STDOUT,
        )
        for name, handler, stage_type, secret in (
            ("tiles", "process_tile", "process-tiles", tiler),
            ("upload", "upload", "upload-tiles", uploader),
        )
    ]  # fmt: skip
    try:
        created = subprocess.run(
            [sys.executable, "-m", "examples.create_map"],
            cwd=ROOT,
            env={**client_env, "JOBNIK_TOKEN": creator},
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        for worker in workers:
            worker.send_signal(signal.SIGTERM)
        for worker in workers:
            worker.wait(30)
        for log in logs.values():
            log.close()
    shown = {name: (tmp_path / f"{name}.log").read_text() for name in logs}

    assert created.returncode == 0, created.stderr
    assert created.stdout.strip().endswith(": COMPLETED (100 %)"), (created, shown)
    assert "failed 0" in shown["tiles"].splitlines()[-1], shown["tiles"]
    assert "done 1  failed 0" in shown["upload"].splitlines()[-1], shown["upload"]
