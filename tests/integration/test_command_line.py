"""The `jobnik` command's errors: one sentence and an exit status, never a traceback (unless
--debug asks), for every error a user can cause; commands that only read make nothing."""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import sys
import time
import uuid
from contextlib import closing
from pathlib import Path

import psycopg
import pytest
from typer.testing import CliRunner, Result

from jobnik.domain.application import Jobnik, NewJob
from jobnik.projections.store import migrations
from jobnik.projections.store.backends import open_store
from jobnik.projections.store.base import SqlStore
from jobnik.projections.store.config import library_env
from jobnik.scripts.cli import app as cli
from jobnik.scripts.failures import Failure

from .conftest import free_port
from .test_migrations import emptied
from .test_server_processes import POSTGRES_ONLY

LATEST = migrations.MIGRATIONS[-1].version
READERS = {
    "replay": ["replay", str(uuid.uuid4())],
    "history export": ["history", "export", str(uuid.uuid4())],
    "projections status": ["projections", "status"],
    "projections verify": ["projections", "verify"],
    "projections rebuild": ["projections", "rebuild"],
    "tokens list": ["tokens", "list"],
    "tokens revoke": ["tokens", "revoke", "ops"],
    "jobs redispatch": ["jobs", "redispatch"],
    "jobs erase": ["jobs", "erase", str(uuid.uuid4()), "--reason", "gone"],
    "archive run": ["archive", "run"],
    "archive verify": ["archive", "verify"],
    "archive retention": ["archive", "retention"],
}


def run(env: dict[str, str], *args: str) -> Result:
    return CliRunner().invoke(cli, list(args), env=env)


def one_sentence(result: Result) -> str:
    """The command's only line of output, checked to be no traceback."""
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    assert "Traceback" not in result.output
    return lines[0]


def made_anything(database_url: str) -> bool:
    """Whether the database holds anything: a SQLite file, or a table on PostgreSQL."""
    if database_url.startswith("sqlite:///"):
        path = Path(database_url.removeprefix("sqlite:///"))
        return any(p.name.startswith(path.name) for p in path.parent.iterdir())
    with psycopg.connect(database_url) as conn:
        tables = conn.execute(
            "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'"
        ).fetchone()
    return bool(tables and tables[0])


@pytest.mark.parametrize("args", READERS.values(), ids=READERS.keys())
def test_a_command_that_reads_says_there_is_no_database_and_makes_none(
    env: dict[str, str], database_url: str, args: list[str]
) -> None:
    result = run(env, *args)

    assert result.exit_code == 4
    assert one_sentence(result).startswith("jobnik: no jobnik database: ")
    assert "`jobnik migrate` creates it" in result.output
    assert not made_anything(database_url)


def test_in_a_directory_without_a_database_replay_names_the_file_it_looked_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)

    result = CliRunner().invoke(cli, ["replay", str(uuid.uuid4())], env={})

    assert result.exit_code == 4
    assert f"the SQLite file jobnik.db does not exist in {tmp_path}" in one_sentence(result)
    assert list(tmp_path.iterdir()) == []


def test_a_refused_serve_off_loopback_makes_no_database(
    env: dict[str, str], database_url: str
) -> None:
    result = run(env, "serve", "--host", "0.0.0.0")

    assert result.exit_code == 2
    assert "refusing to serve on 0.0.0.0" in one_sentence(result)
    assert not made_anything(database_url)


def test_migrate_says_whether_it_upgraded_left_or_created_the_schema(
    env: dict[str, str], database_url: str
) -> None:
    with closing(open_store(library_env(env))) as store:  # an older release's database
        store.create_tables()
        migrations.apply(store, until=LATEST - 1)
    upgraded = run(env, "migrate")
    again = run(env, "migrate")
    emptied(database_url)
    created = run(env, "migrate")

    assert created.exit_code == again.exit_code == upgraded.exit_code == 0
    assert one_sentence(upgraded).endswith(
        f": upgraded the schema from version {LATEST - 1} to {LATEST}"
    )
    assert one_sentence(again).endswith(f": the schema is at version {LATEST}: nothing to do")
    assert one_sentence(created).endswith(f": created the schema (version {LATEST})")


def test_an_unknown_job_is_one_sentence_and_a_bad_id_a_usage_error(
    env: dict[str, str], store: SqlStore
) -> None:
    job = str(uuid.uuid4())

    replayed = run(env, "replay", job)
    exported = run(env, "history", "export", job)
    malformed = run(env, "replay", "123")

    assert replayed.exit_code == exported.exit_code == 1
    assert (
        one_sentence(replayed)
        == one_sentence(exported)
        == (f"jobnik: no job {job} in this database (nor in its history)")
    )
    assert malformed.exit_code == 2
    assert "Traceback" not in malformed.output


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("JOBNIK_LEASE_SECONDS", "abc"),
        ("JOBNIK_DATABASE_URL", "mysql://app:s3cret@db/jobs"),
        ("JOBNIK_DATABASE_URL", "postgresql://app:s3cret@db:port/jobs"),
    ],
)
def test_a_setting_that_does_not_parse_is_named_by_its_variable(
    tmp_path: Path, variable: str, value: str
) -> None:
    env = {"JOBNIK_DATABASE_URL": f"sqlite:///{tmp_path / 'jobnik.db'}", variable: value}

    result = run(env, "migrate")

    assert result.exit_code == 2
    assert one_sentence(result).startswith(f"jobnik: a setting does not parse: {variable}")
    assert "s3cret" not in result.output
    assert list(tmp_path.iterdir()) == []


def test_debug_shows_the_error_itself(env: dict[str, str]) -> None:
    by_option = run(env, "--debug", "replay", str(uuid.uuid4()))
    by_variable = run({**env, "JOBNIK_DEBUG": "1"}, "replay", str(uuid.uuid4()))

    for result in (by_option, by_variable):
        assert result.exception is not None
        assert "no jobnik database" in str(result.exception)


def test_an_unknown_job_under_debug_is_the_failure_itself(
    env: dict[str, str], store: SqlStore
) -> None:
    result = run(env, "--debug", "replay", str(uuid.uuid4()))

    assert isinstance(result.exception, Failure)


@POSTGRES_ONLY
def test_a_missing_postgresql_database_is_named_at_once_and_made_when_asked(
    database_url: str,
) -> None:
    name = f"jobnik_missing_{secrets.token_hex(4)}"
    url = database_url.rsplit("/", 1)[0] + f"/{name}"
    env = {"JOBNIK_DATABASE_URL": url}  # and the default connection timeout, 30 s
    try:
        started = time.monotonic()
        refused = run(env, "migrate")
        took = time.monotonic() - started
        made = run(env, "migrate", "--create-database")
        again = run(env, "migrate")
    finally:
        with psycopg.connect(database_url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    assert refused.exit_code == 4
    sentence = one_sentence(refused)
    assert f"the PostgreSQL database {name} on " in sentence
    assert "does not exist" in sentence
    assert "createdb -h " in sentence
    assert "--create-database" in sentence
    assert took < 10  # the pools would have waited the whole connection timeout
    assert made.exit_code == 0, made.output
    assert one_sentence(made).endswith(f": created the schema (version {LATEST})")
    assert one_sentence(again).endswith("nothing to do")


@POSTGRES_ONLY
def test_an_unreachable_postgresql_server_is_one_sentence(database_url: str) -> None:
    url = f"postgresql://postgres@127.0.0.1:{free_port()}/jobnik"

    result = run({"JOBNIK_DATABASE_URL": url}, "migrate")

    assert result.exit_code == 4
    assert "cannot connect to the PostgreSQL database jobnik on 127.0.0.1:" in one_sentence(result)
    assert "Connection refused" in result.output


def test_a_module_that_does_not_load_is_one_sentence(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def missing(*args: object, **kwargs: object) -> None:
        raise ImportError("libstdc++.so.6: cannot open shared object file")

    monkeypatch.setattr("jobnik.scripts.cli.migrated", missing)

    result = run(env, "migrate")

    assert result.exit_code == 1
    assert one_sentence(result) == (
        "jobnik: a module jobnik needs does not load: libstdc++.so.6: cannot open shared "
        "object file"
    )


def test_serve_reads_its_host_and_workers_from_the_environment(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'jobnik.db'}"

    exposed = run({"JOBNIK_DATABASE_URL": url, "JOBNIK_HOST": "0.0.0.0"}, "serve")
    several = run({"JOBNIK_DATABASE_URL": url, "JOBNIK_WORKERS": "2"}, "serve")

    assert exposed.exit_code == 2
    assert "refusing to serve on 0.0.0.0" in one_sentence(exposed)
    assert several.exit_code == 2
    assert "SQLite serves one process" in several.output


@pytest.mark.parametrize(
    ("variable", "value", "option"),
    [
        ("JOBNIK_PORT", "70000", "--port"),
        ("JOBNIK_PORT", "-1", "--port"),
        ("JOBNIK_WORKERS", "0", "--workers"),
    ],
)
def test_serve_refuses_a_port_or_process_count_that_cannot_be_and_makes_nothing(
    tmp_path: Path, variable: str, value: str, option: str
) -> None:
    url = f"sqlite:///{tmp_path / 'jobnik.db'}"

    result = run({"JOBNIK_DATABASE_URL": url, variable: value}, "serve")

    assert result.exit_code == 2
    assert option in result.output
    assert not made_anything(url)


def test_serve_on_a_port_in_use_says_so_and_exits_1_not_as_a_busy_rebuild(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'jobnik.db'}"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]

        result = run({"JOBNIK_DATABASE_URL": url}, "serve", "--port", str(port))

    assert result.exit_code == 1
    assert f"jobnik: the server did not start on 127.0.0.1:{port}" in result.output


@pytest.mark.parametrize("lifetime", ["0d", "0", "nan", "inf", "99999999d"])
def test_a_token_lifetime_that_cannot_be_is_refused_and_nothing_is_made(
    env: dict[str, str], database_url: str, lifetime: str
) -> None:
    result = run(env, "tokens", "create", "ops", "--role", "admin", "--expires", lifetime)

    assert result.exit_code == 2, result.output
    assert "Invalid value" in result.output
    assert not made_anything(database_url)


def test_a_reader_that_goes_away_stops_the_command_quietly(
    env: dict[str, str], jobnik: Jobnik
) -> None:
    job = jobnik.create_job(NewJob(name="piped", data={}))
    command = [sys.executable, "-c", "from jobnik.scripts.cli import main; main()"]
    with subprocess.Popen(
        [*command, "history", "export", str(job.id)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, **env},
    ) as proc:
        assert proc.stdout is not None
        assert proc.stderr is not None
        proc.stdout.close()  # (`jobnik history export ... | head -0`)
        said = proc.stderr.read().decode()
        status = proc.wait(timeout=60)

    assert status == 1
    assert said == ""
