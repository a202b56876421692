#!/usr/bin/env bash
# Run the tests: `bash scripts/test.sh [pytest args]`, from a fresh clone with nothing installed.
# The project and its test extras live in ./.venv, (re)installed when it is missing or when
# pyproject.toml changed since the last install. PostgreSQL: see tests/conftest.py.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

stamp=.venv/.jobnik-installed            # written only after a complete install
want=$(sha256sum pyproject.toml | cut -d' ' -f1)
if [ ! -x .venv/bin/python ]; then
  "${PYTHON:-python3}" -m venv .venv
fi
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  .venv/bin/python -m pip install --disable-pip-version-check -q -e ".[test]"
  echo "$want" >"$stamp"
fi

exec .venv/bin/python -m pytest "$@"
