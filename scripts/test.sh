#!/usr/bin/env bash
# Run the tests: `bash scripts/test.sh [pytest args]`, from a fresh clone with nothing installed.
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

# Debian packages some tests drive: promtool (the alert rules' tests) and chromium (the console's
# browser tests). Installed when missing and this is a root shell with apt-get; else named, and
# those tests fail saying what is missing.
need=()
command -v promtool >/dev/null 2>&1 || need+=(prometheus)
[ -x /usr/bin/chromium ] || need+=(chromium fonts-liberation)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing Debian packages the tests use: ${need[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  else
    echo "the tests need Debian packages: ${need[*]} (apt-get install them as root)" >&2
  fi
fi

if [ "${1:-}" = "--fast" ]; then
  shift
  export JOBNIK_TEST_BACKENDS=sqlite
  exec .venv/bin/python -m pytest -m "not slow" tests/unit tests/api \
    tests/integration/test_session_contract.py "$@"
fi
exec .venv/bin/python -m pytest "$@"
