# Sourced by scripts/gpu-check.sh and scripts/gpu-perf.sh: `part NAME LIMIT_S FUNCTION`
# runs FUNCTION with `set -e` under a time limit, its output in $work/NAME.log, its
# outcome (exit code, seconds) in $work/parts.jsonl; it never stops the calling script.
# With OUT set, the logs are appended to $OUT/$log_name and parts.jsonl copied there as
# each part ends (what comes back from a lent machine is a few files).
part() {
  local name=$1 limit=$2 fn=$3 start rc
  echo "== $name (at most ${limit}s)"
  start=$(date +%s)
  set +e
  timeout --kill-after=10 "$limit" bash -c "set -euo pipefail; $(declare -f "$fn"); $fn" \
    2>&1 | tee "$work/$name.log"
  rc=${PIPESTATUS[0]}
  set -e
  printf '{"part": "%s", "exit_code": %d, "seconds": %d}\n' "$name" "$rc" \
    "$(( $(date +%s) - start ))" >> "$work/parts.jsonl"
  [ "$rc" = 0 ] || echo "== $name FAILED (exit $rc)"
  if [ -n "${OUT:-}" ]; then
    { echo "== $name (exit $rc)"; cat "$work/$name.log"; } >> "$OUT/$log_name"
    cp "$work/parts.jsonl" "$OUT/"
  fi
}
