#!/usr/bin/env bash
# The official-Anthropic-SDK suite: a virtual environment under cargo's
# target directory, the pinned requirements, the emulator binary, pytest.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
target="${CARGO_TARGET_DIR:-$root/target}"
venv="${SDK_ANTHROPIC_VENV:-$target/sdk-anthropic-venv}"
if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
fi
"$venv/bin/pip" install --quiet --disable-pip-version-check -r "$root/tests/sdk-anthropic/requirements.txt"
if [ -z "${ANTHROPIC_EMULATOR_BIN:-}" ]; then
    CARGO_TARGET_DIR="$target" cargo build --quiet -p anthropic-emulator --manifest-path "$root/Cargo.toml"
fi
cd "$root/tests/sdk-anthropic"
"$venv/bin/ruff" format --check --quiet .
"$venv/bin/ruff" check --quiet .
"$venv/bin/mypy" --no-error-summary --cache-dir "$target/sdk-anthropic-mypy-cache" .
exec "$venv/bin/python" -m pytest -q -p no:cacheprovider "$@"
