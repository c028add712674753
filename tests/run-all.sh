#!/usr/bin/env bash
# The whole test suite: every Rust test of the workspace, the Markdown
# links (tests/links.py), then the Python suites (the official Gemini SDK
# against the emulator; the Python client and its Prefect flow against a
# real tally-server, tally-worker and emulator). Extra arguments go to
# `cargo test`. Needs a Rust toolchain, PostgreSQL and Python 3.10+ with
# venv; Python packages go into a virtual environment under target/.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
cargo test --workspace "$@"
echo "== Markdown links (tests/links.py) =="
python3 tests/links.py
echo "== official SDK suite (tests/sdk) =="
tests/sdk/run.sh
echo "== official OpenAI SDK suite (tests/sdk-openai) =="
tests/sdk-openai/run.sh
echo "== Python client (clients/python) =="
clients/python/run-tests.sh
