#!/usr/bin/env bash
# Rollouts of the math team on llama-server against drmas's in-process generator
# (docs/engines.md, "Measured"): the same experiment, STEPS steps of P prompts × G, both
# models on their own llama-server (2 threads each: one generates while the other waits; F32 exports) or in-process (2
# threads); prints the rollout tokens/s, the update and the sync time per step.
#
#   scripts/bench-engine.sh [STEPS] [P] [G]      # default 3 steps of 4 × 4
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
steps=${1:-3}
prompts=${2:-4}
group=${3:-4}
scripts/setup.sh >/dev/null
server=$(scripts/build-llama-server.sh)
cargo build --release -p drmas >/dev/null 2>&1 || cargo build --release -p drmas
out=$(mktemp -d "${TMPDIR:-/tmp}/drmas-bench-engine.XXXXXX")
trap 'rm -rf "$out"' EXIT
gguf="$root/models/gguf/SmolLM2-135M-Instruct.Q4_1.gguf"
engine() {
  echo "models.$1.engine={ kind = \"llama-cpp\", command = [\"$server\", \"-m\", \"{model}\", \"--port\", \"{port}\", \"--host\", \"127.0.0.1\", \"-t\", \"2\", \"-np\", \"16\", \"-c\", \"16384\"], gguf = \"$gguf\", parallel = 16 }"
}
common=(--set "trainer.steps=$steps" --set "trainer.prompts_per_step=$prompts"
  --set "trainer.group_size=$group" --set trainer.eval_every=0
  --set "trainer.save_every=$((steps + 1))" --quiet)
target/release/drmas train configs/math-drmas.toml --set "experiment.output_dir=\"$out/in-process\"" "${common[@]}"
target/release/drmas train configs/math-drmas.toml --set "experiment.output_dir=\"$out/engine\"" \
  --set "$(engine solver-lm)" --set "$(engine verifier-lm)" "${common[@]}"
python3 - "$out/in-process/metrics.jsonl" "$out/engine/metrics.jsonl" <<'PY'
import json, statistics, sys
def row(path):
    lines = [json.loads(l) for l in open(path)][1:] or [json.loads(l) for l in open(path)]
    med = lambda f: statistics.median(f(l) for l in lines)
    return {
        "rollout s": med(lambda l: l["time"]["rollout"]),
        "tokens": med(lambda l: l["tokens_generated"]),
        "tokens/s": med(lambda l: l["tokens_generated"] / l["time"]["rollout"]),
        "update s (incl. sync)": med(lambda l: l["time"]["update"]),
        "step s": med(lambda l: l["time"]["total"]),
    }
a, b = row(sys.argv[1]), row(sys.argv[2])
print(f"{'median per step (first step left out)':38} {'in-process':>11} {'llama-server':>13}")
for k in a:
    print(f"{k:38} {a[k]:11.2f} {b[k]:13.2f}")
PY
