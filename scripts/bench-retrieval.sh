#!/usr/bin/env bash
# Retrieval latency, in-process against over loopback: builds the BM25 index of the
# corpus if it is not built yet, serves it with `drmas index serve` on a free loopback
# port, runs the same questions one at a time against the folder and against the server,
# prints both and the server's resident memory, then stops the server.
# Usage: scripts/bench-retrieval.sh [CORPUS.jsonl] [INDEX_DIR] [QUERIES.jsonl] [N] [K]
# (defaults: data/wiki/corpus.jsonl data/wiki/index data/nq/test.jsonl 1000 3).
# DRMAS=path/to/drmas uses that binary instead of building target/release/drmas.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# Paths given are relative to where the script is run; the defaults, to the checkout.
corpus=${1:-$root/data/wiki/corpus.jsonl}
index=${2:-$root/data/wiki/index}
queries=${3:-$root/data/nq/test.jsonl}
n=${4:-1000}
k=${5:-3}
if [ -z "${DRMAS:-}" ]; then
  cargo build --release --quiet --manifest-path "$root/Cargo.toml" -p drmas --bin drmas
  DRMAS=$root/target/release/drmas
fi
[ -f "$queries" ] || { echo "no queries at $queries (JSONL with a \"question\" field)" >&2; exit 1; }
if [ ! -f "$index/drmas-index.json" ]; then
  [ -f "$corpus" ] || { echo "no index at $index and no corpus at $corpus to build it from" >&2; exit 1; }
  echo "building $index from $corpus"
  "$DRMAS" index build "$corpus" "$index"
fi

log=$(mktemp)
"$DRMAS" index serve "$index" --addr 127.0.0.1:0 >"$log" 2>&1 &
server=$!
stop() {
  if kill -0 "$server" 2>/dev/null; then
    kill -INT "$server" 2>/dev/null || true
    wait "$server" 2>/dev/null || true
  fi
  rm -f "$log"
}
trap stop EXIT
url=""
for _ in $(seq 1 600); do
  url=$(sed -n 's/^listening on //p' "$log")
  [ -n "$url" ] && break
  kill -0 "$server" 2>/dev/null || { cat "$log" >&2; exit 1; }
  sleep 0.1
done
[ -n "$url" ] || { echo "the server did not start in 60 s:" >&2; cat "$log" >&2; exit 1; }
memory() {
  # VmRSS: resident now (RssAnon: heap, RssFile: mapped files, the binary and the
  # index pages read so far); VmHWM: the peak so far.
  awk '/^VmRSS|^VmHWM|^RssAnon|^RssFile/ {printf "%s %.0f MiB  ", $1, $2 / 1024} END {print ""}' "/proc/$server/status"
}
echo "server $url (pid $server), after opening the index: $(memory)"
"$DRMAS" index bench --index "$index" --queries "$queries" --limit "$n" --k "$k"
"$DRMAS" index bench --url "$url" --queries "$queries" --limit "$n" --k "$k"
echo "server after the loopback bench: $(memory)"
