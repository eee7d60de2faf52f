# Sourced by scripts/gpu-check.sh and scripts/gpu-perf.sh.
#
# `gpu_setup SMOKE WORK LOG_NAME`: the sizes of a GPU run (the Qwen3-0.6B shape, batches
# 64 and 256 × 256 new tokens, bf16 updates against the H200's 989 TFLOP/s) or, with
# SMOKE = 1, of the CPU smoke run (a tiny Qwen3, tiny sizes); the machine's torch's lib
# on LD_LIBRARY_PATH; a fresh WORK folder. Sets device, python, big, batches, new,
# train_args, work, bin, models, smoke and log_name.
gpu_setup() {
  smoke=$1; work=$2; log_name=$3
  if [ "$smoke" = 1 ]; then
    device=cpu; python=${PYTHON:-.venv/bin/python}; big=tiny-qwen3; batches="4 8"; new=16
    train_args=(--prompts gpu-bundle/gsm8k-16.jsonl --generations 2 --new-tokens 16 --steps 2 --threads 2)
    export GPU_PARITY_DEVICE=cpu GPU_PARITY_SMALL=1
  else
    device=cuda:0; python=python3; big=qwen3-0.6b-shape; batches="64 256"; new=256
    train_args=(--prompts gpu-bundle/gsm8k-16.jsonl --generations 8 --new-tokens 256 --steps 3 --threads 16 --peak-tflops 989)
  fi
  local torch_lib
  torch_lib=$($python -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))')
  export LD_LIBRARY_PATH="$torch_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  rm -rf "$work" && mkdir -p "$work"
  : > "$work/parts.jsonl"
  bin=gpu-bundle/drmas
  models="$work/models"
}

# `part NAME LIMIT_S FUNCTION`
# runs FUNCTION with `set -e` under a time limit, its output in $work/NAME.log, its
# outcome (exit code, seconds) in $work/parts.jsonl; it never stops the calling script.
# With OUT set, the logs are appended to $OUT/$log_name and parts.jsonl copied there as
# each part ends (what comes back from a lent machine is a few files).
part() {
  local name=$1 limit=$2 fn=$3 start rc
  echo "== $name (at most ${limit}s)"
  start=$(date +%s)
  set +e
  timeout --kill-after=10 "$limit" bash -c "set -euo pipefail; $(declare -f "$fn"); $fn" \
    2>&1 | tee "$work/$name.log"
  rc=${PIPESTATUS[0]}
  set -e
  printf '{"part": "%s", "exit_code": %d, "seconds": %d}\n' "$name" "$rc" \
    "$(( $(date +%s) - start ))" >> "$work/parts.jsonl"
  [ "$rc" = 0 ] || echo "== $name FAILED (exit $rc)"
  if [ -n "${OUT:-}" ]; then
    { echo "== $name (exit $rc)"; cat "$work/$name.log"; } >> "$OUT/$log_name"
    cp "$work/parts.jsonl" "$OUT/"
  fi
}
