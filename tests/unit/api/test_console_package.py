"""A non-editable `pip install` ships every file the console serves: the package data globs in
pyproject.toml cover each template and static file, and nothing in them points off the server."""

from __future__ import annotations

import re
import tomllib
from fnmatch import fnmatch
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
CONSOLE = ROOT / "api" / "console"


def test_every_template_and_static_file_is_package_data() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    globs = config["tool"]["setuptools"]["package-data"]["jobnik.api.console"]
    files = [
        p.relative_to(CONSOLE).as_posix()
        for folder in ("templates", "static")
        for p in (CONSOLE / folder).iterdir()
    ]

    assert len(files) >= 8
    assert [f for f in files if not any(fnmatch(f, g) for g in globs)] == []


def test_the_console_loads_nothing_from_another_host() -> None:
    text = "\n".join(
        p.read_text() for folder in ("templates", "static") for p in (CONSOLE / folder).iterdir()
    )

    assert re.findall(r"""(?:src|href)=["']?(?:https?:)?//""", text) == []
    assert re.findall(r"""url\(\s*["']?(?:https?:)?//""", text) == []
    assert "@import" not in text
