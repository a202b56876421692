"""jobnik's packages import each other at module level only: no import inside a function or
method dodges a cycle (the layers themselves: [tool.importlinter] in pyproject.toml)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("domain", "projections", "api", "workers")


def _nested_jobnik_imports(path: Path) -> list[str]:
    """`module:line` of each jobnik import below module level (TYPE_CHECKING blocks aside)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for inner in ast.walk(node):
            names = []
            if isinstance(inner, ast.ImportFrom) and inner.module:
                names = [inner.module]
            elif isinstance(inner, ast.Import):
                names = [a.name for a in inner.names]
            if any(n.startswith("jobnik") for n in names):
                found.append(f"{path.relative_to(ROOT)}:{inner.lineno}")
    return found


@pytest.mark.parametrize("package", PACKAGES)
def test_no_module_imports_jobnik_inside_a_function(package: str) -> None:
    modules = sorted((ROOT / package).rglob("*.py"))

    nested = [hit for path in modules for hit in _nested_jobnik_imports(path)]

    assert modules
    assert nested == []
