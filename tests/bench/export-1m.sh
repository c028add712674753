#!/usr/bin/env bash
# Export throughput at scale: enrolls ROWS rows (default 1,000,000) into a
# scratch database through the release tally-server and tallyctl, marks
# them SUCCEEDED with a result (one SQL UPDATE: the worker's path is not
# what is measured here), then times `tallyctl export` in each format with
# /usr/bin/time -v (elapsed, peak RSS of tallyctl).
#
#   cargo build --release -p tally-server -p tallyctl
#   DATABASE_URL=postgres://root@127.0.0.1:5432/postgres tests/bench/export-1m.sh [ROWS]
set -euo pipefail
ROWS=${1:-1000000}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=${BIN:-$ROOT/target/release}
ADMIN=${DATABASE_URL:?set DATABASE_URL to a server where a scratch database can be created}
DB=tally_export_bench
PORT=${PORT:-50071}
WORK=$(mktemp -d)
SERVER_PID=
cleanup() {
  [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null && wait "$SERVER_PID" 2>/dev/null
  psql "$ADMIN" -qc "DROP DATABASE IF EXISTS $DB" >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT
psql "$ADMIN" -qc "DROP DATABASE IF EXISTS $DB" >/dev/null
psql "$ADMIN" -qc "CREATE DATABASE $DB" >/dev/null
URL="${ADMIN%/*}/$DB"
"$BIN/tally-server" --database-url "$URL" --grpc-addr "127.0.0.1:$PORT" \
  --metrics-addr 127.0.0.1:0 --auth disabled --log-format json 2>"$WORK/server.log" &
SERVER_PID=$!
CTL=("$BIN/tallyctl" --server "http://127.0.0.1:$PORT")
for _ in $(seq 100); do "${CTL[@]}" ledgers list >/dev/null 2>&1 && break; sleep 0.2; done
"${CTL[@]}" ledgers create bench --model gemini-2.5-flash >/dev/null
python3 - "$ROWS" >"$WORK/rows.jsonl" <<'PY'
import json, sys
for i in range(int(sys.argv[1])):
    print(json.dumps({"key": f"row-{i:08d}", "payload": {"contents": [{"role": "user", "parts": [{"text": f"Summarize review {i}: the product arrived on time and works as described, five stars."}]}]}}))
PY
start=$(date +%s.%N)
"${CTL[@]}" enroll bench "$WORK/rows.jsonl" --chunk 5000 >/dev/null
echo "enrolled $ROWS rows in $(echo "$(date +%s.%N) - $start" | bc) s"
# SUCCEEDED (4) with a ~120-byte JSON result and token counts.
psql "$URL" -qc "UPDATE rows SET status = 4, rule = 'success', attempts = 1,
  result = '{\"summary\":\"On-time delivery, works as described; the reviewer is fully satisfied.\",\"stars\":5}',
  input_tokens = 40, output_tokens = 30" >/dev/null
psql "$URL" -qc "VACUUM ANALYZE rows" >/dev/null
for format in jsonl openai csv parquet; do
  out="$WORK/out.$format"
  /usr/bin/time -v "${CTL[@]}" export bench --format "$format" -o "$out" 2>"$WORK/time.$format" >/dev/null
  secs=$(awk -F': ' '/Elapsed \(wall clock\)/ {print $2}' "$WORK/time.$format")
  rss=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$WORK/time.$format")
  line=$(grep '^exported' "$WORK/time.$format" || true)
  printf '%-8s %s | wall %s | peak RSS %s KiB | file %s bytes\n' "$format" "$line" "$secs" "$rss" "$(stat -c %s "$out")"
done
