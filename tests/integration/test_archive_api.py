"""Retention and archives over HTTP and the command line, on both backends: an archived job's
history answers from its archive (410 ARCHIVED naming it when it cannot be read), periods per
job name are set by operators, and `jobnik archive` / `jobnik history export` read the same."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from jobnik.api.main import app_from_env
from jobnik.api.settings import InvalidSettings, Settings
from jobnik.domain import archives
from jobnik.scripts.cli import app as cli

from .test_history import history, run_job


@pytest.fixture
def archive_env(database_url: str, tmp_path: Path) -> dict[str, str]:
    (tmp_path / "archive").mkdir()
    return {
        "JOBNIK_DATABASE_URL": database_url,
        "JOBNIK_SWEEP_INTERVAL": "0",
        "JOBNIK_ARCHIVE_DIR": str(tmp_path / "archive"),
        "JOBNIK_RETENTION_SECONDS": "3600",
    }


@pytest.fixture
def client(archive_env: dict[str, str]) -> Iterator[TestClient]:
    with TestClient(app_from_env(archive_env)) as c:
        yield c


def archive_all(client: TestClient) -> list[Any]:
    """Archive, as if two hours had passed, every job that ended an hour before."""
    archiver = client.app.state.archiver  # type: ignore[attr-defined]
    archiver.clock = lambda: datetime.now(UTC) + timedelta(hours=2)
    done = archiver.run()
    return list(done.archived)


def test_an_archived_jobs_history_answers_from_its_archive_as_before(
    client: TestClient, archive_env: dict[str, str]
) -> None:
    job = run_job(client, "tiles", tasks=3)
    before = history(client, job["id"], limit=1000)

    assert [str(j) for j in archive_all(client)] == [job["id"]]

    assert client.get(f"/v1/jobs/{job['id']}").status_code == 404
    assert history(client, job["id"], limit=1000) == before
    first = history(client, job["id"], limit=4)
    rest = history(client, job["id"], after=first["next"], limit=1000)
    assert first["items"] + rest["items"] == before["items"]
    record = client.get(f"/v1/archives/{job['id']}").json()
    assert (record["events"], record["archivedBy"]) == (len(before["items"]), "system")
    statistics = client.get(f"/v1/jobs/{job['id']}/statistics")
    assert (statistics.status_code, statistics.json()["code"]) == (410, "ARCHIVED")
    assert f"/v1/jobs/{job['id']}/history" in statistics.json()["message"]


def test_an_archive_that_cannot_be_read_answers_410_archived_naming_it(
    client: TestClient, archive_env: dict[str, str]
) -> None:
    job = run_job(client, "tiles")
    archive_all(client)
    record = client.get(f"/v1/archives/{job['id']}").json()
    (Path(archive_env["JOBNIK_ARCHIVE_DIR"]) / record["location"]).unlink()

    r = client.get(f"/v1/jobs/{job['id']}/history")

    assert r.status_code == 410
    assert r.json()["code"] == "ARCHIVED"
    assert record["location"] in r.json()["message"]


def test_operators_set_a_names_period_and_zero_or_less_is_refused_by_name(
    client: TestClient,
) -> None:
    set_ = client.put("/v1/retention/nightly", json={"periodSeconds": 60, "reason": "scratch"})
    refused = [client.put("/v1/retention/nightly", json={"periodSeconds": p}) for p in (0, -5)]

    assert set_.status_code == 200
    assert set_.json()["defaultSeconds"] == 3600
    assert [(n["name"], n["periodSeconds"]) for n in set_.json()["names"]] == [("nightly", 60)]
    assert {(r.status_code, r.json()["code"]) for r in refused} == {
        (400, "INVALID_RETENTION_PERIOD")
    }
    cleared = client.put("/v1/retention/nightly", json={"periodSeconds": None})
    assert cleared.json()["names"] == []
    assert client.get("/v1/retention").json() == {"defaultSeconds": 3600, "names": []}


def test_a_period_for_a_name_no_job_can_have_is_refused(client: TestClient) -> None:
    refused = [
        client.put(f"/v1/retention/{name}", json={"periodSeconds": 60}) for name in ("x", "x" * 51)
    ]

    assert {(r.status_code, r.json()["code"]) for r in refused} == {(400, "VALIDATION_ERROR")}
    assert client.get("/v1/retention").json()["names"] == []


def test_the_names_with_a_period_of_their_own_are_bounded(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(archives, "MAX_NAMES", 2)
    for name in ("aa", "bb"):
        assert client.put(f"/v1/retention/{name}", json={"periodSeconds": 60}).status_code == 200

    refused = client.put("/v1/retention/cc", json={"periodSeconds": 60})
    changed = client.put("/v1/retention/aa", json={"periodSeconds": 120})  # not one more name

    assert (refused.status_code, refused.json()["code"]) == (409, "TOO_MANY_RETENTION_PERIODS")
    assert changed.status_code == 200
    assert client.put("/v1/retention/bb", json={"periodSeconds": None}).status_code == 200
    assert client.put("/v1/retention/cc", json={"periodSeconds": 60}).status_code == 200
    names = client.get("/v1/retention").json()["names"]
    assert [(n["name"], n["periodSeconds"]) for n in names] == [("aa", 120), ("cc", 60)]


def test_the_command_line_exports_verifies_and_sets_periods(
    client: TestClient, archive_env: dict[str, str]
) -> None:
    job = run_job(client, "tiles")
    live = history(client, job["id"], limit=1000)["items"]
    archive_all(client)
    runner = CliRunner()

    exported = runner.invoke(cli, ["history", "export", job["id"]], env=archive_env)
    checked = runner.invoke(cli, ["archive", "verify"], env=archive_env)
    dry = runner.invoke(cli, ["archive", "run", "--dry-run"], env=archive_env)
    unpaced = runner.invoke(cli, ["archive", "run", "--share", "1"], env=archive_env)
    no_share = runner.invoke(cli, ["archive", "run", "--share", "0"], env=archive_env)
    set_ = runner.invoke(
        cli, ["archive", "retention", "audit", "--seconds", "86400"], env=archive_env
    )
    zero = runner.invoke(cli, ["archive", "retention", "audit", "--seconds", "0"], env=archive_env)
    no_job_has = [
        runner.invoke(cli, ["archive", "retention", name, "--seconds", "60"], env=archive_env)
        for name in ("a", "a" * 51)
    ]

    assert exported.exit_code == 0, exported.output
    assert [json.loads(line) for line in exported.stdout.splitlines()] == live
    assert checked.exit_code == 0, checked.output
    assert (dry.exit_code, dry.stdout) == (0, "")
    assert (unpaced.exit_code, unpaced.stdout) == (0, ""), unpaced.output
    assert "0 job(s) archived" in unpaced.output
    assert no_share.exit_code == 2
    assert "--share" in no_share.output
    assert set_.exit_code == 0, set_.output
    assert "audit: 86400 s" in set_.stdout
    assert zero.exit_code == 2  # a bad argument
    assert "retention period" in zero.output
    for refused in no_job_has:  # (a period for a name no job can have would never apply)
        assert refused.exit_code == 2, refused.output
        assert "a job name is 2 to 50 characters" in refused.output
    assert [n["name"] for n in client.get("/v1/retention").json()["names"]] == ["audit"]


def test_an_archive_directory_that_is_not_writable_is_refused_at_start_up(
    tmp_path: Path,
) -> None:
    (tmp_path / "file").write_text("")

    with pytest.raises(InvalidSettings, match="JOBNIK_ARCHIVE_DIR"):
        Settings.from_env({"JOBNIK_ARCHIVE_DIR": str(tmp_path / "file")})
    with pytest.raises(InvalidSettings, match="JOBNIK_RETENTION_SECONDS"):
        Settings.from_env({"JOBNIK_RETENTION_SECONDS": "0"})
