#!/usr/bin/env bash
# Data parallelism on this machine (docs/distributed.md, "Measured"): Gloo all-reduce
# throughput of SmolLM2-135M's gradient between two ranks on 127.0.0.1, and the math
# team's training step with 2 ranks × 1 thread against 1 rank × 2 threads, split into
# rollout / advantages / update (forward, loss, backward, optimizer incl. all-reduce).
# Run it on a quiet machine: both halves share its cores.
#
#   scripts/bench-dist.sh [CONFIG] [STEPS]     # default configs/math-drmas.toml, 3 steps
#
# The first step warms up (allocator, page cache): the table is the median of the others.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
config=${1:-configs/math-drmas.toml}
steps=${2:-3}
scripts/setup.sh --test-deps >/dev/null
cargo build --release -p drmas -p drmas-dist --example all_reduce_bench >/dev/null 2>&1 ||
  cargo build --release -p drmas -p drmas-dist --example all_reduce_bench
out=$(mktemp -d "${TMPDIR:-/tmp}/drmas-bench-dist.XXXXXX")
trap 'rm -rf "$out"' EXIT

echo "== all-reduce of SmolLM2-135M's gradient (134,515,008 f32), 2 ranks, Gloo, 127.0.0.1"
OMP_NUM_THREADS=1 target/release/examples/all_reduce_bench 134515008 3 | tail -1

run() { # NAME RANKS THREADS
  local name=$1 ranks=$2 threads=$3
  local set=(--set "experiment.output_dir=\"$out/$name\"" --set "trainer.steps=$steps"
    --set trainer.eval_every=0 --set "trainer.save_every=$((steps + 1))" --quiet)
  if [ "$ranks" = 1 ]; then
    OMP_NUM_THREADS=$threads target/release/drmas train "$config" "${set[@]}"
  else
    OMP_NUM_THREADS=$threads .venv/bin/torchrun --no-python --nproc-per-node "$ranks" \
      --master-port "$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')" \
      target/release/drmas train "$config" "${set[@]}"
  fi
}
echo "== $config, $steps steps: 1 rank × 2 threads"
run one 1 2
echo "== $config, $steps steps: 2 ranks × 1 thread"
run two 2 1
.venv/bin/python - "$out/one/metrics.jsonl" "$out/two/metrics.jsonl" <<'EOF'
import json, statistics, sys

def split(path):
    lines = [json.loads(l) for l in open(path)][1:]
    med = lambda f: statistics.median(f(l) for l in lines)
    row = {k: med(lambda l, k=k: l["time"][k]) for k in ("total", "rollout", "advantages", "update")}
    for phase in ("forward", "loss", "backward", "optimizer"):
        row[phase] = med(lambda l, p=phase: sum(m["update_phases"][p] for m in l["models"].values()))
    row["tokens"] = med(lambda l: l["tokens_generated"])
    return row

one, two = split(sys.argv[1]), split(sys.argv[2])
keys = ["total", "rollout", "advantages", "update", "forward", "loss", "backward", "optimizer"]
print(f"{'seconds per step (median)':28} {'1 rank × 2 thr':>15} {'2 ranks × 1 thr':>16} {'ratio':>6}")
for k in keys:
    print(f"{k:28} {one[k]:15.2f} {two[k]:16.2f} {two[k] / max(one[k], 1e-9):6.2f}")
print(f"{'tokens generated':28} {one['tokens']:15.0f} {two['tokens']:16.0f}")
EOF
