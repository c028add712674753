#!/usr/bin/env bash
# The whole test suite: every Rust test of the workspace, the Markdown
# links (tests/links.py), no import circle (tests/circles.py), every
# crate's map current (tests/maps.py), then the
# Python suites (the official Gemini, OpenAI and Anthropic SDKs against their
# emulators; the Python client and its Prefect flow against a real
# tally-server, tally-worker and emulator). Extra arguments go to
# `cargo test`. Needs a Rust toolchain, PostgreSQL and Python 3.10+ with
# venv; Python packages go into a virtual environment under target/.
#
# A whole-workspace run (no arguments) builds everything first, then runs
# the Python suites beside the Rust tests: both mostly wait (on servers,
# emulators, leases and package downloads), so side by side they take about
# as long as the longest of them. Each Python suite's output is kept in
# target/run-all/<suite>.log and printed once the Rust tests are done.
# RUN_ALL_SERIAL=1 runs everything one after another instead.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
target="${CARGO_TARGET_DIR:-$root/target}"

suites=(
    "official SDK suite (tests/sdk)|tests/sdk/run.sh"
    "official OpenAI SDK suite (tests/sdk-openai)|tests/sdk-openai/run.sh"
    "official Anthropic SDK suite (tests/sdk-anthropic)|tests/sdk-anthropic/run.sh"
    "Python client (clients/python)|clients/python/run-tests.sh"
)

static_checks() {
    echo "== Markdown links (tests/links.py) =="
    python3 tests/links.py
    echo "== import circles (tests/circles.py) =="
    python3 tests/circles.py
    echo "== crate maps (tests/maps.py) =="
    python3 tests/maps.py
}

# `cargo test --workspace` builds every binary the Python suites run (a
# package's integration tests need its binaries), with the workspace's
# features: hand them over rather than let each suite build its own (a
# build of a few packages unifies features differently and recompiles much
# of the dependency tree).
hand_over() {
    local bin="$target/debug" pair name file
    for pair in TALLY_SERVER_BIN:tally-server TALLY_WORKER_BIN:tally-worker \
        TALLYCTL_BIN:tallyctl GEMINI_EMULATOR_BIN:gemini-emulator \
        OPENAI_EMULATOR_BIN:openai-emulator \
        ANTHROPIC_EMULATOR_BIN:anthropic-emulator; do
        name="${pair%%:*}" file="$bin/${pair#*:}"
        if [ -x "$file" ] && [ -z "${!name:-}" ]; then
            export "$name=$file"
        fi
    done
}

# With extra arguments (a package, a profile) the binaries may not be this
# run's: every suite then builds its own. Either way one after another.
if [ "$#" -gt 0 ] || [ -n "${RUN_ALL_SERIAL:-}" ]; then
    cargo test --workspace "$@"
    if [ "$#" -eq 0 ]; then
        hand_over
    fi
    static_checks
    for suite in "${suites[@]}"; do
        echo "== ${suite%%|*} =="
        "${suite#*|}"
    done
    exit 0
fi

cargo test --workspace --no-run
hand_over
static_checks

logs="$target/run-all"
rm -rf "$logs"
mkdir -p "$logs"
# Two chains in the background, beside the Rust tests: the three SDK suites
# one after another (small installs, quick tests), and the Python client
# (the largest install, the longest tests). Each suite installs into its own
# virtual environment.
run_suites() {
    local i
    set +e
    for i in "$@"; do
        "${suites[$i]#*|}" > "$logs/$i.log" 2>&1
        echo $? > "$logs/$i.rc"
    done
}
run_suites 0 1 2 &
sdk_suites=$!
run_suites 3 &
python_suites=$!
# The Rust tests wait mostly on servers, emulators and leases: more test
# threads than the 2 cores of the CI machine (libtest's default) cut their
# time there by about a third. Their result waits for the Python suites'
# (which are bounded), and every test executable runs (--no-fail-fast):
# every failure is reported, not just the first. (The load once made worker
# end-to-end tests stall; what it exposed were two races in the store, a
# batch's first webhook racing MarkSubmitted and a refusal's pause committed
# apart from its job, both fixed: the worker suite passes at 8 threads.)
export RUST_TEST_THREADS="${RUST_TEST_THREADS:-$(($(nproc) > 4 ? $(nproc) : 4))}"
rust=0
cargo test --workspace --no-fail-fast || rust=$?
wait "$sdk_suites" "$python_suites" || true

failed=()
for i in "${!suites[@]}"; do
    echo "== ${suites[$i]%%|*} =="
    cat "$logs/$i.log"
    rc="$(cat "$logs/$i.rc" 2> /dev/null || echo 1)"
    if [ "$rc" != 0 ]; then
        failed+=("${suites[$i]%%|*} (exit $rc)")
    fi
done
if [ "$rust" != 0 ]; then
    failed=("Rust tests (cargo test exit $rust)" "${failed[@]}")
fi
if [ "${#failed[@]}" -gt 0 ]; then
    printf 'FAILED: %s\n' "${failed[@]}" >&2
    exit 1
fi
echo "== all suites passed =="
