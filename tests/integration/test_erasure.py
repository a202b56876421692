"""Erasure on both backends: an ended job's user data leaves the log and every read model, its
events' skeleton stays, nothing returns the values again (read, history, export, archive,
rebuild), and a job that has not ended is refused by name."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from jobnik.api.main import app_from_env
from jobnik.projections.rebuild.bluegreen import rebuild
from jobnik.projections.rebuild.verify import verify
from jobnik.scripts.cli import app as cli

SECRET = "s3cr3t-value"


@pytest.fixture
def env(database_url: str, tmp_path: Path) -> dict[str, str]:
    (tmp_path / "archive").mkdir()
    return {
        "JOBNIK_DATABASE_URL": database_url,
        "JOBNIK_SWEEP_INTERVAL": "0",
        "JOBNIK_ARCHIVE_DIR": str(tmp_path / "archive"),
    }


@pytest.fixture
def client(env: dict[str, str]) -> Iterator[TestClient]:
    with TestClient(app_from_env(env)) as c:
        yield c


def job_with_secrets(http: Any, finish: bool = True) -> str:
    job = http.post(
        "/v1/jobs", json={"name": "private", "data": {"k": SECRET}, "userMetadata": {"m": SECRET}}
    ).json()
    stage = http.post(
        f"/v1/jobs/{job['id']}/stage",
        json={"type": "private", "data": {"k": SECRET}, "userMetadata": {"m": SECRET}},
    ).json()
    http.post(
        f"/v1/stages/{stage['id']}/tasks",
        json=[{"data": {"k": SECRET}, "userMetadata": {"m": SECRET}}],
    )
    if finish:
        task = http.patch("/v1/stages/private/tasks/dequeue").json()
        http.post(f"/v1/tasks/{task['id']}/logs", json={"lines": [SECRET]})
        http.put(
            f"/v1/tasks/{task['id']}/status", json={"status": "COMPLETED", "result": {"r": SECRET}}
        )
    return str(job["id"])


def everything(http: Any, job_id: str) -> str:
    """What the API answers about the job: the job with its stages, the tasks, the history."""
    parts = [
        http.get(f"/v1/jobs/{job_id}", params={"should_return_stages": "true"}).text,
        http.get("/v1/tasks").text,
        http.get(f"/v1/jobs/{job_id}/history", params={"limit": 1000}).text,
    ]
    for task in http.get("/v1/tasks").json().get("items", []):
        parts.append(http.get(f"/v1/tasks/{task['id']}/logs").text)
    return "\n".join(parts)


def test_an_ended_jobs_user_data_is_erased_everywhere_and_its_skeleton_stays(
    client: TestClient, env: dict[str, str]
) -> None:
    job_id = job_with_secrets(client)
    assert SECRET in everything(client, job_id)
    types = [e["type"] for e in client.get(f"/v1/jobs/{job_id}/history?limit=1000").json()["items"]]

    r = client.post(f"/v1/jobs/{job_id}/erase", json={"reason": "GDPR request 17"})

    assert r.status_code == 200, r.text
    assert SECRET not in everything(client, job_id)
    after = client.get(f"/v1/jobs/{job_id}/history?limit=1000").json()["items"]
    assert [e["type"] for e in after] == [*types, "JobErased"]
    assert (after[-1]["actor"], after[-1]["reason"]) == ("api", "GDPR request 17")
    store = client.app.state.store  # type: ignore[attr-defined]
    assert verify(store) == []
    rebuild(store)
    assert SECRET not in everything(client, job_id)
    exported = CliRunner().invoke(cli, ["history", "export", job_id], env=env)
    assert exported.exit_code == 0, exported.output
    assert SECRET not in exported.stdout
    archiver = client.app.state.archiver  # type: ignore[attr-defined]
    archiver.clock = lambda: datetime.now(UTC) + timedelta(days=2)
    archiver.default_seconds = 3600
    assert [str(j) for j in archiver.run().archived] == [job_id]
    assert all(SECRET not in line for line in archiver.lines(UUID(job_id)))


def test_a_running_job_is_not_erased_and_nothing_is_written(client: TestClient) -> None:
    job_id = job_with_secrets(client, finish=False)
    before = client.get(f"/v1/jobs/{job_id}/history?limit=1000").json()

    r = client.post(f"/v1/jobs/{job_id}/erase", json={"reason": "too early"})

    assert (r.status_code, r.json()["code"]) == (409, "JOB_NOT_ENDED")
    assert client.get(f"/v1/jobs/{job_id}/history?limit=1000").json() == before


def test_the_command_line_erases_with_a_reason(client: TestClient, env: dict[str, str]) -> None:
    job_id = job_with_secrets(client)

    result = CliRunner().invoke(cli, ["jobs", "erase", job_id, "--reason", "asked"], env=env)

    assert result.exit_code == 0, result.output
    assert SECRET not in everything(client, job_id)
    last = client.get(f"/v1/jobs/{job_id}/history?limit=1000").json()["items"][-1]
    assert (last["type"], last["actor"].startswith("cli:"), last["reason"]) == (
        "JobErased",
        True,
        "asked",
    )


def archive_ended(client: TestClient) -> list[Any]:
    """Archive, as if a day had passed, every ended job (a period of an hour for their name)."""
    client.put("/v1/retention/private", json={"periodSeconds": 3600, "reason": "test"})
    archiver = client.app.state.archiver  # type: ignore[attr-defined]
    archiver.clock = lambda: datetime.now(UTC) + timedelta(days=1)
    return list(archiver.run().archived)


def test_an_archived_jobs_archive_is_written_again_without_its_user_data(
    client: TestClient, env: dict[str, str]
) -> None:
    job_id = job_with_secrets(client)
    assert [str(j) for j in archive_ended(client)] == [job_id]
    before = client.get(f"/v1/archives/{job_id}").json()
    skeleton = [
        (e["type"], e["actor"], e["time"])
        for e in client.get(f"/v1/jobs/{job_id}/history", params={"limit": 1000}).json()["items"]
    ]
    assert SECRET in client.get(f"/v1/jobs/{job_id}/history", params={"limit": 1000}).text

    r = client.post(f"/v1/jobs/{job_id}/erase", json={"reason": "a data subject asked"})

    assert (r.status_code, r.json()["code"]) == (200, "JOB_ERASED"), r.text
    after = client.get(f"/v1/archives/{job_id}").json()
    assert after["location"] != before["location"]
    assert after["checksum"] != before["checksum"]
    assert after["events"] == before["events"]
    directory = Path(env["JOBNIK_ARCHIVE_DIR"])
    assert not (directory / before["location"]).exists()
    archived = client.get(f"/v1/jobs/{job_id}/history", params={"limit": 1000})
    assert SECRET not in archived.text
    assert [(e["type"], e["actor"], e["time"]) for e in archived.json()["items"]] == skeleton
    result = CliRunner().invoke(cli, ["archive", "verify"], env=env)
    assert result.exit_code == 0, result.output
    feed = client.get("/v1/events", params={"limit": 1000}).json()["items"]
    [erased] = [e for e in feed if e["type"] == "ArchiveErased"]
    assert erased["reason"] == "a data subject asked"
    assert verify(client.app.state.store) == []  # type: ignore[attr-defined]


def test_the_command_line_erases_an_archived_job_and_an_unknown_one_is_404(
    client: TestClient, env: dict[str, str]
) -> None:
    job_id = job_with_secrets(client)
    archive_ended(client)

    result = CliRunner().invoke(cli, ["jobs", "erase", job_id, "--reason", "asked"], env=env)

    assert result.exit_code == 0, result.output
    assert SECRET not in client.get(f"/v1/jobs/{job_id}/history", params={"limit": 1000}).text
    unknown = client.post(f"/v1/jobs/{UUID(int=7)}/erase", json={"reason": "x"})
    assert (unknown.status_code, unknown.json()["code"]) == (404, "JOB_NOT_FOUND")
    said = CliRunner().invoke(cli, ["jobs", "erase", str(UUID(int=7)), "--reason", "x"], env=env)
    assert said.exit_code == 1
    assert said.output.strip() == (
        f"jobnik: no job {UUID(int=7)} in this database, live or archived"
    )
