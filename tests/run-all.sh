#!/usr/bin/env bash
# The whole test suite: every Rust test of the workspace, the Markdown
# links (tests/links.py), no import circle (tests/circles.py), then the
# Python suites (the official Gemini, OpenAI and Anthropic SDKs against their
# emulators; the Python client and its Prefect flow against a real
# tally-server, tally-worker and emulator). Extra arguments go to
# `cargo test`. Needs a Rust toolchain, PostgreSQL and Python 3.10+ with
# venv; Python packages go into a virtual environment under target/.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
cargo test --workspace "$@"
# `cargo test --workspace` built every binary the Python suites run (a
# package's integration tests need its binaries), with the workspace's
# features: hand them over rather than let each suite build its own
# (a build of a few packages unifies features differently and recompiles
# much of the dependency tree). Only for a whole-workspace run: with extra
# arguments (a package, a profile) the binaries may not be this run's.
if [ "$#" -eq 0 ]; then
    bin="${CARGO_TARGET_DIR:-$root/target}/debug"
    for pair in TALLY_SERVER_BIN:tally-server TALLY_WORKER_BIN:tally-worker \
        TALLYCTL_BIN:tallyctl GEMINI_EMULATOR_BIN:gemini-emulator \
        OPENAI_EMULATOR_BIN:openai-emulator \
        ANTHROPIC_EMULATOR_BIN:anthropic-emulator; do
        name="${pair%%:*}" file="$bin/${pair#*:}"
        if [ -x "$file" ] && [ -z "${!name:-}" ]; then
            export "$name=$file"
        fi
    done
fi
echo "== Markdown links (tests/links.py) =="
python3 tests/links.py
echo "== import circles (tests/circles.py) =="
python3 tests/circles.py
echo "== official SDK suite (tests/sdk) =="
tests/sdk/run.sh
echo "== official OpenAI SDK suite (tests/sdk-openai) =="
tests/sdk-openai/run.sh
echo "== official Anthropic SDK suite (tests/sdk-anthropic) =="
tests/sdk-anthropic/run.sh
echo "== Python client (clients/python) =="
clients/python/run-tests.sh
