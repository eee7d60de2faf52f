#!/usr/bin/env bash
# GPU speed figures (docs/performance.md, "GPU speed"), for a machine without a Rust
# toolchain or network: run from the repository root with the bundle
# `scripts/gpu-check.sh --bundle` makes (gpu-bundle/, the same one). Uses the machine's
# torch 2.11.0 for libtorch. The Qwen3-0.6B shape in bf16, random weights (made there).
# Prints one JSON at the end (also $OUT/gpu-perf.json when OUT is set), each figure
# beside its target:
#   - the batch sizes `drmas check` sizes for the device (`pool::sizing`);
#   - decode at batch 64 and 256 × 256 new tokens, eager and fused kernels: tokens/s,
#     ms per step, ATen operators per step, against the bound that counts the weights
#     and the KV cache read each step at the copy bandwidth measured there (targets:
#     ≥ 10k tok/s at 64, ≥ 35k at 256); greedy tokens of fused against eager;
#   - the GRPO update at the sizes a run would pick: tokens/s and MFU against the
#     H200's 989 TFLOP/s bf16 dense peak and the GEMM rate measured there (target 20 %);
#   - offload and onload GB/s against a plain pinned copy (target ≥ 80 %).
# CUDA-graph decode is not built; the report says so. Each part runs on its own under a
# time limit (all of them ≤ 7 minutes); one that fails is recorded and the rest still run.
# GPU_PERF_SMOKE=1 runs the same on the CPU with tiny sizes (to test the script).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/gpu-part.sh
source scripts/gpu-part.sh
gpu_setup "${GPU_PERF_SMOKE:-0}" "${GPU_PERF_WORK:-/tmp/gpu-perf}" gpu-perf.log
export bin models work device python big new smoke
export TRAIN_ARGS="${train_args[*]}" BATCHES="$batches"

make_models() {
  $python scripts/py/gpu_parity.py make "$models" gpu-bundle/qwen3-tokenizer 2>/dev/null
  ls "$models"
}

sizes() {
  sed -e "0,/^name = /s|^name = \".*\"|name = \"gpu-perf\"\noutput_dir = \"$work/run\"|" \
      -e "s|^path = \".*\"|path = \"$models/$big\"\ndtype = \"bf16\"|" \
      -e "s|^devices = .*|devices = [\"$device\"]|" \
      configs/math-drmas.toml > "$work/sizes.toml"
  $bin check "$work/sizes.toml" --for train | tee "$work/sizes.txt"
}

decode() {
  for b in $BATCHES; do
    for k in fused eager; do
      flag=""; [ "$k" = eager ] && flag="--eager"
      # shellcheck disable=SC2086
      $bin bench generate --model "$models/$big" --prompts gpu-bundle/gsm8k-64.jsonl --batch "$b" \
        --max-new-tokens "$new" --device "$device" --dtype bf16 --count-ops $flag \
        | tee -a "$work/decode.jsonl"
    done
    for k in fused eager; do
      flag=""; [ "$k" = eager ] && flag="--eager"
      # shellcheck disable=SC2086
      $bin bench generate --model "$models/$big" --prompts gpu-bundle/gsm8k-64.jsonl --batch "$b" \
        --max-new-tokens 32 --device "$device" --dtype bf16 --greedy $flag \
        --tokens-out "$work/greedy-$k-$b.jsonl" > /dev/null
    done
  done
}

update() {
  # shellcheck disable=SC2086
  $bin bench train --model "$models/$big" $TRAIN_ARGS --device "$device" --dtype bf16 \
    | tee "$work/update.json"
}

offload() {
  $bin bench offload --model "$models/$big" --device "$device" --dtype bf16 | tee "$work/offload.json"
}

report() {
$python - "$work" <<'PY'
import json, os, re, sys
work = sys.argv[1]
def path(f): return os.path.join(work, f)
def lines(f):
    return [json.loads(l) for l in open(path(f)) if l.strip()] if os.path.exists(path(f)) else None
def whole(f):
    try: return json.load(open(path(f)))
    except (OSError, ValueError): return None
report = {"parts": lines("parts.jsonl")}
if os.path.exists(path("sizes.txt")):
    report["sizes"] = [l.strip() for l in open(path("sizes.txt")) if "batch sizes of" in l]
decode = lines("decode.jsonl") or []
targets = {64: 10_000, 256: 35_000}
report["decode"] = [
    {k: d.get(k) for k in ("prompts", "kernels", "tokens_per_s", "ms_per_decode_step",
                           "aten_ops_per_decode_step", "outermost_ops_per_decode_step",
                           "bandwidth_bound_tokens_per_s", "device_copy_gb_s")}
    | {"of_bound": round(d["tokens_per_s"] / d["bandwidth_bound_tokens_per_s"], 4)
       if d.get("bandwidth_bound_tokens_per_s") else None,
       "target_tokens_per_s": targets.get(d.get("prompts"))}
    for d in decode
]
report["graph_decode"] = "not built"
same = {}
for f in sorted(os.listdir(work)):
    m = re.match(r"greedy-fused-(\d+)\.jsonl$", f)
    if m and os.path.exists(path(f"greedy-eager-{m.group(1)}.jsonl")):
        a = [json.loads(l) for l in open(path(f))]
        b = [json.loads(l) for l in open(path(f"greedy-eager-{m.group(1)}.jsonl"))]
        tokens = sum(len(x) for x in b)
        # Tokens before each row's first difference, over all tokens.
        agree = sum(next((i for i, (p, q) in enumerate(zip(x, y)) if p != q), min(len(x), len(y)))
                    for x, y in zip(a, b))
        same[m.group(1)] = {"rows": len(b), "identical_rows": sum(x == y for x, y in zip(a, b)),
                            "tokens_before_first_difference": agree, "tokens": tokens}
report["greedy_fused_vs_eager"] = same
u = whole("update.json")
if u:
    report["update"] = {k: u.get(k) for k in ("update_tokens_per_s", "mfu_vs_peak", "mfu_vs_gemm",
                                               "gemm_gflops", "micro_batch_tokens", "logits_budget_bytes",
                                               "median_update")} | {"target_mfu_vs_peak": 0.20}
o = whole("offload.json")
if o:
    report["offload"] = o | {
        "offload_of_pinned_copy": o["offload_gb_s"] / o["pinned_copy_d2h_gb_s"],
        "onload_of_pinned_copy": o["onload_gb_s"] / o["pinned_copy_h2d_gb_s"],
        "target_of_pinned_copy": 0.80}
text = json.dumps(report, indent=1)
print(text)
if os.environ.get("OUT"):
    open(os.path.join(os.environ["OUT"], "gpu-perf.json"), "w").write(text)
PY
}

# GPU_PERF_PARTS="decode" runs only those parts (the models are made when missing).
run_part() {
  case " ${GPU_PERF_PARTS:-$1} " in *" $1 "*) part "$@"; report > /dev/null ;; esac
}
run_part models 80 make_models
[ -d "$models/$big" ] || part models 80 make_models
run_part sizes 20 sizes
run_part decode 150 decode
run_part update 90 update
run_part offload 30 offload
report
