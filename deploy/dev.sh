#!/usr/bin/env bash
# tally on one machine, for a first run: tally-server (a private PostgreSQL
# under .tally-dev/), a provider's emulator (Gemini and OpenAI post signed
# webhooks to it), and one tally-worker on a ledger, until Ctrl-C (which
# stops all three).
#
#   deploy/dev.sh [--provider gemini|openai|anthropic] [LEDGER]
#                                     LEDGER defaults to "dev"; made if missing
#                                     (for the provider's model); the provider
#                                     defaults to $TALLY_DEV_PROVIDER, else gemini
#
# Then, in another shell:
#   tallyctl enroll dev rows.jsonl    # {"key": "r1", "payload": {"contents": [...]}} per line
#   tallyctl watch dev                # live progress until every row is final
#
# Binaries: $TALLY_BIN_DIR, else those beside this script (the tally-bin
# wheel installs it as tally-dev with them), else those on PATH, else this
# checkout's, built with cargo (release) on first use.
# Addresses (defaults in brackets), for when those ports are taken:
#   TALLY_DEV_GRPC_ADDR [127.0.0.1:50051]   TALLY_DEV_HTTP_ADDR [127.0.0.1:8080] (webhooks)
#   TALLY_DEV_METRICS_ADDR [127.0.0.1:9090] TALLY_DEV_EMULATOR_ADDR [127.0.0.1:8090]
#   TALLY_DEV_DIR [./.tally-dev]: the database, the logs
set -euo pipefail
provider="${TALLY_DEV_PROVIDER:-gemini}"
ledger=""
while [ $# -gt 0 ]; do
    case "$1" in
        --provider) [ $# -ge 2 ] || { echo "dev.sh: --provider needs gemini, openai or anthropic" >&2; exit 2; }
            provider="$2"; shift 2 ;;
        --provider=*) provider="${1#--provider=}"; shift ;;
        -h|--help) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        -*) echo "dev.sh: unknown option $1 (--provider gemini|openai|anthropic, then the ledger)" >&2; exit 2 ;;
        *) [ -z "$ledger" ] || { echo "dev.sh: one ledger only, got $ledger and $1" >&2; exit 2; }
            ledger="$1"; shift ;;
    esac
done
ledger="${ledger:-dev}"
grpc="${TALLY_DEV_GRPC_ADDR:-127.0.0.1:50051}"
http="${TALLY_DEV_HTTP_ADDR:-127.0.0.1:8080}"
metrics="${TALLY_DEV_METRICS_ADDR:-127.0.0.1:9090}"
emulator_addr="${TALLY_DEV_EMULATOR_ADDR:-127.0.0.1:8090}"
dir="${TALLY_DEV_DIR:-$PWD/.tally-dev}"
# Each provider: its emulator, the key it takes (its default; a real key is
# never needed, nor sent anywhere, here), the environment variable the worker
# reads it from, its model, the base URL the worker is given, and a row in
# its request shape.
case "$provider" in
    gemini)
        emulator=gemini-emulator key="emulator-key" key_env=GEMINI_API_KEY
        model="" base_url="http://$emulator_addr"
        row='{"key": "hello", "payload": {"contents": [{"role": "user", "parts": [{"text": "Say hello"}]}]}}' ;;
    openai)
        emulator=openai-emulator key="sk-emulator" key_env=OPENAI_API_KEY
        model="gpt-4o-mini" base_url="http://$emulator_addr/v1"
        row='{"key": "hello", "payload": {"messages": [{"role": "user", "content": "Say hello"}]}}' ;;
    anthropic)
        emulator=anthropic-emulator key="sk-ant-emulator" key_env=ANTHROPIC_API_KEY
        model="claude-haiku-4-5" base_url="http://$emulator_addr"
        row='{"key": "hello", "payload": {"messages": [{"role": "user", "content": "Say hello"}], "max_tokens": 256}}' ;;
    *) echo "dev.sh: unknown provider \"$provider\": gemini, openai or anthropic" >&2; exit 2 ;;
esac

find_bin() {
    local name="$1"
    local here
    here="$(cd "$(dirname "$0")" && pwd)"
    if [ -n "${TALLY_BIN_DIR:-}" ]; then
        echo "$TALLY_BIN_DIR/$name"
    elif [ -x "$here/$name" ]; then
        # Installed beside them (tally-dev from the tally-bin wheel).
        echo "$here/$name"
    elif command -v "$name" > /dev/null 2>&1; then
        command -v "$name"
    else
        local root
        root="$(cd "$(dirname "$0")/.." && pwd)"
        if [ ! -x "$root/target/release/$name" ]; then
            command -v cargo > /dev/null 2>&1 || {
                echo "dev.sh: no $name on PATH and no cargo to build it: install the tally-bin wheel (.ci/release builds it into dist/; pip install dist/tally_bin-*.whl), or install Rust" >&2
                exit 1
            }
            echo "dev.sh: building $name (cargo build --release, once)" >&2
            cargo build --release --quiet --manifest-path "$root/Cargo.toml" -p "$name" >&2
        fi
        echo "$root/target/release/$name"
    fi
}
server_bin="$(find_bin tally-server)"
worker_bin="$(find_bin tally-worker)"
emulator_bin="$(find_bin "$emulator")"
tallyctl_bin="$(find_bin tallyctl)"
for b in "$server_bin" "$worker_bin" "$emulator_bin" "$tallyctl_bin"; do
    [ -x "$b" ] || { echo "dev.sh: $b is not an executable" >&2; exit 1; }
done

# A port another process holds fails its program later with a line in its
# log only: say which address is taken, and how to move it, before starting.
taken() { (exec 3<> "/dev/tcp/${1%:*}/${1##*:}") 2> /dev/null; }
for pair in "tally-server gRPC|$grpc|TALLY_DEV_GRPC_ADDR" \
    "tally-server webhooks|$http|TALLY_DEV_HTTP_ADDR" \
    "tally-server metrics|$metrics|TALLY_DEV_METRICS_ADDR" \
    "$emulator|$emulator_addr|TALLY_DEV_EMULATOR_ADDR"; do
    IFS='|' read -r what addr var <<< "$pair"
    if taken "$addr"; then
        echo "dev.sh: $addr ($what) is taken by another process: stop it, or set $var to a free address" >&2
        exit 1
    fi
done

mkdir -p "$dir/logs"
chmod 700 "$dir"
# A fresh signing secret per run: whsec_ and 32 random bytes in base64.
secret="whsec_$(head -c 32 /dev/urandom | base64 | tr -d '\n')"
pids=()
# The name and log of each started process, by its place in pids.
names=()
logs=()
stop() {
    trap - EXIT INT TERM
    for pid in "${pids[@]}"; do kill -TERM "$pid" 2> /dev/null || true; done
    for pid in "${pids[@]}"; do wait "$pid" 2> /dev/null || true; done
}
trap stop EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

TALLY_WEBHOOK_SECRETS="$secret" "$server_bin" --auth disabled --data-dir "$dir/db" \
    --grpc-addr "$grpc" --http-addr "$http" --metrics-addr "$metrics" \
    > "$dir/logs/server.log" 2>&1 &
pids+=($!) names+=(tally-server) logs+=("$dir/logs/server.log")
for _ in $(seq 1 600); do
    "$server_bin" health --grpc-addr "$grpc" > /dev/null 2>&1 && break
    kill -0 "${pids[0]}" 2> /dev/null || { echo "dev.sh: tally-server exited; see $dir/logs/server.log" >&2; tail -5 "$dir/logs/server.log" >&2; exit 1; }
    sleep 0.2
done
"$server_bin" health --grpc-addr "$grpc" > /dev/null || { echo "dev.sh: tally-server is not serving after 2 minutes" >&2; exit 1; }

# Batches finish in about a second; Gemini's and OpenAI's post every state
# change, signed, to tally's webhook listener, which is how the worker learns
# it at once (Anthropic has no batch webhooks: the worker polls).
case "$provider" in
    gemini)
        GEMINI_API_KEY="$key" GEMINI_EMULATOR_WEBHOOK_SECRET="$secret" "$emulator_bin" \
            --addr "$emulator_addr" --webhook-url "http://$http/webhooks/gemini" --running 1s \
            > "$dir/logs/emulator.log" 2>&1 & ;;
    openai)
        OPENAI_API_KEY="$key" OPENAI_WEBHOOK_SECRET="$secret" "$emulator_bin" \
            --listen "$emulator_addr" --webhook-url "http://$http/webhooks/openai" --in-progress 1s \
            > "$dir/logs/emulator.log" 2>&1 & ;;
    anthropic)
        ANTHROPIC_API_KEY="$key" "$emulator_bin" --listen "$emulator_addr" --in-progress 1s \
            > "$dir/logs/emulator.log" 2>&1 & ;;
esac
pids+=($!) names+=("$emulator") logs+=("$dir/logs/emulator.log")
# Serving before anything is sent to it (or it exited: say so).
for _ in $(seq 1 100); do
    taken "$emulator_addr" && break
    kill -0 "${pids[1]}" 2> /dev/null || { echo "dev.sh: $emulator exited; see $dir/logs/emulator.log" >&2; tail -5 "$dir/logs/emulator.log" >&2; exit 1; }
    sleep 0.1
done

export TALLY_SERVER="http://$grpc"
# The emulator's batches take a second: partial batches wait for more rows
# briefly (a real provider's defaults are 10m and 5s).
model_flag=()
[ -z "$model" ] || model_flag=(--model "$model")
"$tallyctl_bin" ledgers get "$ledger" > /dev/null 2>&1 \
    || "$tallyctl_bin" ledgers create "$ledger" "${model_flag[@]}" \
        --batch-fill-wait 10s --batch-fill-quiet 1s > /dev/null

# --poll-interval 2s: the fallback when a webhook does not come, and how
# often an idle worker looks for work (the default, 30s, suits the real
# API, whose batches take minutes to hours, and spares its quota).
env "$key_env=$key" "$worker_bin" --server "http://$grpc" --ledger "$ledger" \
    --provider "$provider" "--$provider-base-url" "$base_url" --poll-interval 2s \
    > "$dir/logs/worker.log" 2>&1 &
pids+=($!) names+=(tally-worker) logs+=("$dir/logs/worker.log")

cat <<EOF
tally is running (Ctrl-C stops it):
  tally-server     $TALLY_SERVER (auth disabled: local only), webhooks http://$http, metrics http://$metrics/metrics
  $(printf '%-16s' "$emulator") $base_url, API key "$key"
  tally-worker     ledger $ledger ($provider), polling every 2s when no webhook comes
  logs             $dir/logs/
Try:
  export TALLY_SERVER=$TALLY_SERVER
  printf '%s\n' '$row' | tallyctl enroll $ledger -
  tallyctl watch $ledger
EOF
# Until one of them stops (then the rest are stopped) or Ctrl-C.
while :; do
    for i in "${!pids[@]}"; do
        if ! kill -0 "${pids[$i]}" 2> /dev/null; then
            echo "dev.sh: ${names[$i]} exited; stopping the others (its log: ${logs[$i]}):" >&2
            tail -5 "${logs[$i]}" >&2
            exit 1
        fi
    done
    sleep 1
done
