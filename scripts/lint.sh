#!/usr/bin/env bash
# ruff (lint + format), mypy --strict and the import contracts; run from the project root.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
"$PY" -m ruff check domain projections api workers scripts tests
"$PY" -m ruff format --check domain projections api workers scripts
"$PY" -m mypy
# the layers and acyclic packages: [tool.importlinter] in pyproject.toml
"$PY" -c 'import sys; from importlinter.cli import lint_imports; sys.exit(lint_imports())'
