#!/usr/bin/env bash
# The Python client's checks and tests: a virtual environment under target/,
# the package installed with its test extra (which pulls in the prefect
# extra), ruff, mypy, then pytest against the workspace's tally-server,
# tally-worker, tallyctl and gemini-emulator (each built here unless its
# TALLY_SERVER_BIN, TALLY_WORKER_BIN, TALLYCTL_BIN or GEMINI_EMULATOR_BIN is set).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
# Cargo's target directory (CARGO_TARGET_DIR when set): the binaries the
# tests run and the virtual environment live there.
target="${CARGO_TARGET_DIR:-$root/target}"
export CARGO_TARGET_DIR="$target"
venv="${PYTHON_CLIENT_VENV:-$target/python-client-venv}"
if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
fi
"$venv/bin/pip" install --quiet --disable-pip-version-check "$root/clients/python[test]"
packages=()
[ -z "${TALLY_SERVER_BIN:-}" ] && packages+=(-p tally-server)
[ -z "${TALLY_WORKER_BIN:-}" ] && packages+=(-p tally-worker)
[ -z "${TALLYCTL_BIN:-}" ] && packages+=(-p tallyctl)
[ -z "${GEMINI_EMULATOR_BIN:-}" ] && packages+=(-p gemini-emulator)
# The tally-bin wheel's test packs every program the wheel ships.
packages+=(-p tally-demo -p openai-emulator -p anthropic-emulator)
if [ ${#packages[@]} -gt 0 ]; then
    cargo build --quiet "${packages[@]}" --manifest-path "$root/Cargo.toml"
fi
cd "$root/clients/python"
# And the tally-bin wheel's package and builder (clients/python-bin).
"$venv/bin/ruff" format --check --quiet . ../python-bin
"$venv/bin/ruff" check --quiet . ../python-bin
"$venv/bin/mypy" --no-error-summary --cache-dir "$target/python-client-mypy-cache" src tests generate.py
"$venv/bin/mypy" --no-error-summary --cache-dir "$target/python-client-mypy-cache" --strict ../python-bin/tally_bin ../python-bin/build_wheel.py
exec "$venv/bin/python" -m pytest -q -p no:cacheprovider "$@"
