#!/usr/bin/env bash
# The official-SDK suite: a virtual environment under target/, the pinned
# requirements, the emulator binary, pytest.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
venv="${SDK_VENV:-$root/target/sdk-venv}"
if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
fi
"$venv/bin/pip" install --quiet --disable-pip-version-check -r "$root/tests/sdk/requirements.txt"
if [ -z "${GEMINI_EMULATOR_BIN:-}" ]; then
    cargo build --quiet -p gemini-emulator --manifest-path "$root/Cargo.toml"
fi
cd "$root/tests/sdk"
"$venv/bin/ruff" format --check --quiet .
"$venv/bin/ruff" check --quiet .
"$venv/bin/mypy" --no-error-summary --cache-dir "$root/target/sdk-mypy-cache" .
exec "$venv/bin/python" -m pytest -q -p no:cacheprovider "$@"
