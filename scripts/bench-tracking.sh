#!/usr/bin/env bash
# What tracking costs a training step on the math team (docs/tracking.md): trains
# configs/math-drmas.toml for STEPS steps with TensorBoard on and a sample table every
# step (each metrics line carries the trackers' time so far), then replays that run's
# lines and table as 100 steps through each sink — TensorBoard, and MLflow against a
# real `mlflow server` (sqlite store, 127.0.0.1) started here — beside the run's own
# step time. Prints one JSON line per measurement; files in OUT.
# Usage: scripts/bench-tracking.sh [STEPS] [OUT]   (default 3 steps, target/bench/tracking)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
steps=${1:-3}
out=${2:-target/bench/tracking}
case "$steps" in
  '' | *[!0-9]*) echo "bench-tracking: STEPS must be an integer >= 2, got '$steps'" >&2; exit 2 ;;
esac
[ "$steps" -ge 2 ] || { echo "bench-tracking: STEPS must be >= 2 (step 1 is warm-up), got $steps" >&2; exit 2; }
die() { echo "bench-tracking: $*" >&2; exit 1; }

scripts/setup.sh --test-deps >/dev/null || die "scripts/setup.sh --test-deps failed (mlflow is a test dependency)"
cargo build --release --quiet -p drmas || die "cargo build --release -p drmas failed"
DRMAS=target/release/drmas scripts/fetch-assets.sh >/dev/null || die "scripts/fetch-assets.sh failed"
target/release/drmas data prepare >/dev/null || die "drmas data prepare failed"
rm -rf "$out"
mkdir -p "$out"

echo "bench-tracking: training configs/math-drmas.toml for $steps steps" >&2
target/release/drmas train configs/math-drmas.toml --quiet \
  --set "experiment.output_dir=\"$out/run\"" --set "trainer.steps=$steps" \
  --set trainer.save_every=0 --set tracking.log_samples_every=1 \
  || die "drmas train failed"
python3 - "$out/run/metrics.jsonl" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
# Each line's `tracking.seconds` is the total before it: the last step's own handling
# is not in the file, so the cost per step is over the steps before the last.
total = lines[-1]["tracking"]["seconds"]
step = sum(l["time"]["total"] for l in lines[:-1])
print(json.dumps({"measure": "in-run (tensorboard + sample tables)", "steps": len(lines) - 1,
                  "tracking_seconds_per_step": total / (len(lines) - 1),
                  "step_seconds": step / (len(lines) - 1),
                  "percent_of_step": 100 * total / step,
                  "tensorboard_bytes_per_step": lines[-1]["tracking"]["tensorboard_bytes"] / (len(lines) - 1)}))
PY

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
.venv/bin/mlflow server --host 127.0.0.1 --port "$port" --workers 1 \
  --backend-store-uri "sqlite:///$root/$out/mlflow.db" --artifacts-destination "$root/$out/artifacts" \
  > "$out/mlflow.log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null || true' EXIT
for _ in $(seq 600); do
  curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
  kill -0 $server 2>/dev/null || die "mlflow server ended: $(tail -5 "$out/mlflow.log")"
  sleep 0.2
done
target/release/drmas bench tracking "$out/run" --steps 100 --samples-every 10 \
  --mlflow "http://127.0.0.1:$port" --out "$out/replay" || die "drmas bench tracking failed"
