#!/usr/bin/env bash
# The Python client's checks and tests: a virtual environment under target/,
# the package installed with its test extra, ruff, mypy, then pytest against
# the workspace's tally-server (built here unless TALLY_SERVER_BIN is set).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
venv="${PYTHON_CLIENT_VENV:-$root/target/python-client-venv}"
if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
fi
"$venv/bin/pip" install --quiet --disable-pip-version-check "$root/clients/python[test]"
if [ -z "${TALLY_SERVER_BIN:-}" ]; then
    cargo build --quiet -p tally-server --manifest-path "$root/Cargo.toml"
fi
cd "$root/clients/python"
"$venv/bin/ruff" format --check --quiet .
"$venv/bin/ruff" check --quiet .
"$venv/bin/mypy" --no-error-summary --cache-dir "$root/target/python-client-mypy-cache" src tests generate.py
exec "$venv/bin/python" -m pytest -q -p no:cacheprovider "$@"
