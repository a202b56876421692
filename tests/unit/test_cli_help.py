"""`jobnik ... --help` reads as one family: every command's help has the same sections, in the same
style, each option and argument says what it is, and `jobnik bench` is one of them."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from jobnik.projections.catchup.registry import ALL
from jobnik.scripts.bench import main as bench_main
from jobnik.scripts.cli import app


def commands() -> dict[str, typer.main.TyperGroup | typer.core.TyperCommand]:
    """Every command and group, by its path (`tokens create`), the root as ``."""
    found = {}

    def walk(path: str, command: object) -> None:
        found[path] = command
        for name, sub in getattr(command, "commands", {}).items():
            walk(f"{path} {name}".strip(), sub)

    walk("", typer.main.get_command(app))
    return found


COMMANDS = commands()


@pytest.mark.parametrize("path", sorted(COMMANDS), ids=lambda p: p or "jobnik")
def test_every_commands_help_has_the_same_sections(path: str) -> None:
    result = CliRunner().invoke(
        app, [*path.split(), "--help"], env={"COLUMNS": "100"}, prog_name="jobnik"
    )

    assert result.exit_code == 0, result.output
    lines = [line.strip() for line in result.output.splitlines() if line.strip()]
    assert lines[0].startswith(f"Usage: jobnik {path}".rstrip() + " [OPTIONS]"), lines[0]
    assert len(lines[1]) > 10  # a sentence says what the command does
    assert "╭─ Options" in result.output
    assert "usage:" not in result.output  # argparse's style


@pytest.mark.parametrize("path", sorted(COMMANDS), ids=lambda p: p or "jobnik")
def test_every_option_and_argument_says_what_it_is(path: str) -> None:
    command = COMMANDS[path]

    unexplained = [p.name for p in command.params if not getattr(p, "help", None)]

    assert unexplained == []


def test_bench_offers_the_options_of_the_suite_it_runs() -> None:
    shown = io.StringIO()
    with contextlib.redirect_stdout(shown), pytest.raises(SystemExit):
        bench_main(["--help"])
    suite = set(re.findall(r"(--[a-z][a-z-]+)", shown.getvalue())) - {"--help"}

    command = COMMANDS["bench"]
    offered = {o for p in command.params for o in p.opts} - {"--help"}

    assert offered == suite


@pytest.mark.parametrize("path", ["projections rebuild", "projections verify"])
def test_rebuild_and_verify_name_every_projection_they_take(path: str) -> None:
    (name,) = [p for p in COMMANDS[path].params if p.name == "name"]
    offered = re.findall(r"[a-z_]+", str(getattr(name, "help", "")).split("(")[0])

    assert [p.name for p in ALL] == [o for o in offered if o != "or"]


def test_the_root_help_names_the_document_that_lists_the_settings() -> None:
    shown = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "200"}, prog_name="jobnik")
    (document,) = re.findall(r"\(([\w/]+\.md) lists them\)", shown.output)

    settings = (Path(__file__).parents[2] / document).read_text()
    assert "| `JOBNIK_DATABASE_URL` |" in settings
