"""Every install command the documentation and the deployment recipes show works from a clone:
jobnik is not published on a package index, so each `pip install` names a checkout (`.`, a
path), with extras pyproject.toml defines and options pip knows."""

from __future__ import annotations

import re
import shlex
import tomllib
from pathlib import Path

import pytest

from jobnik.workers.tracing import INSTALL_HINT

ROOT = Path(__file__).resolve().parents[2]
SOURCES = sorted(
    [ROOT / "README.md", *(ROOT / "docs").rglob("*.md"), *(ROOT / "deploy").rglob("*")]
    + [p for p in (ROOT / "Containerfile",) if p.exists()],
)
# `pip install ARGS`, as `pip`, `.venv/bin/pip`, `python3 -m pip` or `$VENV/bin/pip` run it
COMMAND = re.compile(r"(?:\S*/)?(?:pip3?|python3?\s+-m\s+pip)\s+install\s+([^`\n&;|#]+)")
TARGET = re.compile(r"^(?P<path>\.|\.?/[\w./$-]*)(?:\[(?P<extras>[\w,-]+)\])?$")
OPTIONS = {
    "-e",
    "--editable",
    "-q",
    "--quiet",
    "--no-cache-dir",
    "--upgrade",
    "-U",
    "--disable-pip-version-check",
}
EXTRAS = set(
    tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
)


def install_lines() -> list[tuple[str, str]]:
    """(where, the arguments) of every pip install shown in the sources and the SDK's hint."""
    found = [
        ("jobnik.workers.tracing.INSTALL_HINT", m.group(1)) for m in COMMAND.finditer(INSTALL_HINT)
    ]
    for path in SOURCES:
        if not path.is_file():
            continue
        text = path.read_text(errors="replace")
        for n, line in enumerate(text.splitlines(), 1):
            for m in COMMAND.finditer(line):
                found.append((f"{path.relative_to(ROOT)}:{n}", m.group(1)))
    return found


LINES = install_lines()


def test_the_documentation_shows_install_lines_at_all() -> None:
    where = {w.split(":")[0] for w, _ in LINES}

    assert "README.md" in where
    assert "jobnik.workers.tracing.INSTALL_HINT" in where


@pytest.mark.parametrize(("where", "arguments"), LINES, ids=[w for w, _ in LINES])
def test_each_install_line_installs_a_checkout_with_extras_it_defines(
    where: str, arguments: str
) -> None:
    words = [w for w in shlex.split(arguments) if not w.startswith("$")]  # (a recipe's variables)
    targets = [w for w in words if not w.startswith("-")]
    options = {w for w in words if w.startswith("-")}

    assert options <= OPTIONS, f"{where}: unknown pip options {options - OPTIONS}"
    assert targets, f"{where}: installs nothing: {arguments!r}"
    for target in targets:
        shape = TARGET.match(target)
        assert shape, f"{where}: {target!r} is not a checkout (jobnik is on no package index)"
        extras = set((shape["extras"] or "").split(",")) - {""}
        assert extras <= EXTRAS, f"{where}: no extra {sorted(extras - EXTRAS)} in pyproject.toml"
        if shape["path"] == ".":
            assert (ROOT / "pyproject.toml").is_file()
