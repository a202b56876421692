"""`jobnik schedules create --job FILE`: a file that holds no job template is named, exit 2,
before anything is sent to the API."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from jobnik.scripts.cli import app


@pytest.mark.parametrize(
    ("content", "why"),
    [(b"", "is not JSON"), (b"\xff", "is not JSON"), (b"[1]", "holds no JSON object")],
)
def test_a_job_file_that_holds_no_template_is_refused_naming_it(
    tmp_path: Path, content: bytes, why: str
) -> None:
    job = tmp_path / "job.json"
    job.write_bytes(content)

    result = CliRunner().invoke(
        app,
        ["schedules", "create", "nightly", "--every", "1h", "--job", str(job)],
        env={"JOBNIK_API_URL": "http://127.0.0.1:9", "COLUMNS": "200"},
    )

    assert result.exit_code == 2, result.output
    assert why in result.output
    assert "unexpected error" not in result.output


def test_a_job_file_that_does_not_exist_is_refused_naming_it(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app,
        ["schedules", "create", "nightly", "--every", "1h", "--job", str(tmp_path / "no.json")],
        env={"COLUMNS": "200"},
    )

    assert result.exit_code == 2
    assert "does not exist" in result.output
