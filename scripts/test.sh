#!/usr/bin/env bash
# Run the tests: `bash scripts/test.sh [pytest args]`, from a fresh clone with nothing installed,
# spread over the machine's cores (pytest-xdist; `-n 0` runs them in this process, one by one).
# `bash scripts/test.sh --fast [pytest args]`: the inner loop, a few minutes: the unit tests, the
# HTTP tests (on a database in memory) and the storage contract on SQLite.
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

# Debian packages some tests drive: promtool (the alert rules' tests), chromium (the console's
# browser tests) and systemd-analyze (the systemd unit's test). Installed when missing and this is
# a root shell with apt-get; else named, and those tests fail saying what is missing.
need=()
command -v promtool >/dev/null 2>&1 || need+=(prometheus)
[ -x /usr/bin/chromium ] || need+=(chromium fonts-liberation)
command -v systemd-analyze >/dev/null 2>&1 || need+=(systemd)
source scripts/debian.sh
debian_packages "the tests" "${need[@]}" || true

if [ "${1:-}" = "--fast" ]; then
  shift
  export JOBNIK_TEST_BACKENDS=sqlite
  exec .venv/bin/python -m pytest -n auto -m "not slow" tests/unit tests/api \
    tests/integration/test_session_contract.py "$@"
fi
exec .venv/bin/python -m pytest -n auto "$@"
