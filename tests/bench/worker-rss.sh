#!/usr/bin/env bash
# Peak RSS of tally-worker running JOBS jobs of ROWS rows of ~KB KB each at
# once (issue 29, item 5; defaults 4 x 1000 x 50 KB): a scratch database
# and tally-server (claims and messages up to 64 MiB; no enqueued-token
# admission unless ENQUEUED_TOKENS is set, so every job is one batch of
# ROWS rows), gemini-emulator,
# then one `tally-worker --max-jobs JOBS --claim-size ROWS --exit-when-idle`
# under /usr/bin/time -v. Compare builds by pointing BIN at each:
#
#   cargo build -p tally-server -p tally-worker -p tallyctl -p gemini-emulator
#   DATABASE_URL=postgres://root@127.0.0.1:5432/postgres tests/bench/worker-rss.sh [JOBS ROWS KB]
#
# With MEDIA_KB set, each row instead sends one MEDIA_KB KB image file from a
# media root (a prompt with a media variable; files above the worker's
# inline bound are uploaded once and referenced), and KB is ignored:
#
#   MEDIA_KB=1024 DATABASE_URL=... tests/bench/worker-rss.sh 1 1000
#
# PROVIDER=openai or anthropic runs the same at that provider's emulator
# (whose media go inline in the batch, never uploaded):
#
#   PROVIDER=openai MEDIA_KB=1024 DATABASE_URL=... tests/bench/worker-rss.sh 1 300
set -euo pipefail
PROVIDER=${PROVIDER:-gemini}
JOBS=${1:-4}
ROWS=${2:-1000}
KB=${3:-50}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=${BIN:-$ROOT/target/debug}
ADMIN=${DATABASE_URL:?set DATABASE_URL to a server where a scratch database can be created}
DB=tally_worker_rss_bench
PORT=${PORT:-50073}
EMU_PORT=${EMU_PORT:-50074}
WORK=$(mktemp -d)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
  psql "$ADMIN" -qc "DROP DATABASE IF EXISTS $DB" >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT
psql "$ADMIN" -qc "DROP DATABASE IF EXISTS $DB" >/dev/null
psql "$ADMIN" -qc "CREATE DATABASE $DB" >/dev/null
URL="${ADMIN%/*}/$DB"
"$BIN/tally-server" --database-url "$URL" --grpc-addr "127.0.0.1:$PORT" \
  --metrics-addr 127.0.0.1:0 --auth disabled --log-format json \
  --max-message-bytes 67108864 --max-response-bytes 67108864 \
  --provider-enqueued-tokens "${ENQUEUED_TOKENS:-0}" >"$WORK/server.log" 2>&1 &
PIDS+=($!)
case "$PROVIDER" in
  gemini)
    GEMINI_API_KEY=bench "$BIN/gemini-emulator" --addr "127.0.0.1:$EMU_PORT" \
      --pending 100ms --running 300ms >"$WORK/emulator.log" 2>&1 &
    MODEL=gemini-2.5-flash KEY_ENV=GEMINI_API_KEY BASE="http://127.0.0.1:$EMU_PORT" ;;
  openai)
    OPENAI_API_KEY=bench "$BIN/openai-emulator" --listen "127.0.0.1:$EMU_PORT" \
      --in-progress 300ms >"$WORK/emulator.log" 2>&1 &
    MODEL=gpt-4o-mini KEY_ENV=OPENAI_API_KEY BASE="http://127.0.0.1:$EMU_PORT/v1" ;;
  anthropic)
    ANTHROPIC_API_KEY=bench "$BIN/anthropic-emulator" --listen "127.0.0.1:$EMU_PORT" \
      --in-progress 300ms >"$WORK/emulator.log" 2>&1 &
    MODEL=claude-haiku-4-5 KEY_ENV=ANTHROPIC_API_KEY BASE="http://127.0.0.1:$EMU_PORT" ;;
  *) echo "PROVIDER is gemini, openai or anthropic" >&2; exit 2 ;;
esac
PIDS+=($!)
CTL=("$BIN/tallyctl" --server "http://127.0.0.1:$PORT")
for _ in $(seq 150); do "${CTL[@]}" ledgers list >/dev/null 2>&1 && break; sleep 0.2; done
"${CTL[@]}" ledgers create bench --model "$MODEL" --max-active-jobs "$JOBS" >/dev/null
MEDIA_FLAGS=()
if [ -n "${MEDIA_KB:-}" ]; then
  mkdir -p "$WORK/media"
  echo 'Transcribe page {{ n }}.' >"$WORK/ocr.j2"
  "${CTL[@]}" prompts register ocr v1 --template-file "$WORK/ocr.j2" --media page >/dev/null
  MEDIA_FLAGS=(--media-root "$WORK/media")
  python3 - "$((JOBS * ROWS))" "$MEDIA_KB" "$WORK/media" >"$WORK/rows.jsonl" <<'PY'
import hashlib, json, os, sys
n, kb, root = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
for i in range(n):
    data = os.urandom(kb * 1024)
    name = f"p{i:06d}.png"
    with open(os.path.join(root, name), "wb") as f:
        f.write(data)
    page = {"uri": name, "sha256": hashlib.sha256(data).hexdigest()}
    print(json.dumps({"key": f"row-{i:06d}", "prompt": "ocr@v1", "payload": {"n": i, "page": page}}))
PY
else
python3 - "$((JOBS * ROWS))" "$KB" >"$WORK/rows.jsonl" <<'PY'
import json, sys
n, kb = int(sys.argv[1]), int(sys.argv[2])
text = ("lorem ipsum dolor sit amet " * (kb * 1024 // 27 + 1))[: kb * 1024]
for i in range(n):
    print(json.dumps({"key": f"row-{i:06d}", "payload": {"contents": [{"role": "user", "parts": [{"text": f"{i} {text}"}]}]}}))
PY
fi
"${CTL[@]}" enroll bench "$WORK/rows.jsonl" --chunk 100 >/dev/null
echo "enrolled $((JOBS * ROWS)) rows of ${KB} KB ($(stat -c %s "$WORK/rows.jsonl") bytes)"
start=$(date +%s.%N)
env "$KEY_ENV=bench" /usr/bin/time -v "$BIN/tally-worker" --server "http://127.0.0.1:$PORT" \
  --ledger bench --provider "$PROVIDER" "--$PROVIDER-base-url" "$BASE" --max-jobs "$JOBS" \
  --claim-size "$ROWS" --max-rows-per-batch "$ROWS" --poll-interval 500ms --exit-when-idle \
  "${MEDIA_FLAGS[@]}" \
  >"$WORK/worker.log" 2>"$WORK/time.txt" || { tail -20 "$WORK/worker.log" "$WORK/time.txt"; exit 1; }
rss=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$WORK/time.txt")
"${CTL[@]}" status bench | sed -n "1,12p"
"${CTL[@]}" jobs list bench --limit 0 -o json 2>/dev/null | python3 -c '
import json, sys
jobs = json.load(sys.stdin)["jobs"]
claimed = sum((j.get("counts") or {}).get("rows", 0) for j in jobs)
batches = sum(1 for j in jobs if j.get("batch"))
print(f"jobs made: {len(jobs)} ({batches} batches); rows claimed (the jobs rows): {claimed}")
' 2>/dev/null || echo "jobs made: ?"
printf 'worker (%s): %s jobs x %s rows x %s KB%s: wall %.1f s, peak RSS %s KiB (%.0f MiB)\n' \
  "$PROVIDER" "$JOBS" "$ROWS" "$KB" "${MEDIA_KB:+ (media: one ${MEDIA_KB} KB file a row)}" \
  "$(echo "$(date +%s.%N) - $start" | bc)" "$rss" "$(echo "$rss / 1024" | bc -l)"
