#!/usr/bin/env bash
# Sharded training on this machine (docs/distributed.md, "Sharding: measured"): the math
# team (two SmolLM2-135M, f32) with 2 ranks × 1 thread under `shard = "none"`,
# `"optimizer"` and `"full"`, one after the other in this run. Per mode and rank: the
# optimizer state and the gradients the rank holds, the weights it held during the update
# (shard, most gathered at once, whole), its peak RSS, the bytes of each collective per
# step, and the step's seconds against "none"'s.
#
#   scripts/bench-shard.sh [STEPS]     # default 3 steps
#
# The first step warms up (allocator, page cache): times are the median of the others.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
steps=${1:-3}
config=configs/math-drmas.toml
scripts/setup.sh --test-deps >/dev/null
cargo build --release -p drmas >/dev/null 2>&1 || cargo build --release -p drmas
out=$(mktemp -d "${TMPDIR:-/tmp}/drmas-bench-shard.XXXXXX")
trap 'rm -rf "$out"' EXIT
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

for mode in none optimizer full; do
  echo "== $config, $steps steps, 2 ranks × 1 thread, shard = \"$mode\""
  mkdir -p "$out/$mode"
  DRMAS_LOG=info OMP_NUM_THREADS=1 .venv/bin/torchrun --nproc-per-node 2 \
    --master-port "$(port)" scripts/py/peak_rss.py "$out/$mode" \
    target/release/drmas train "$config" \
    --set "experiment.output_dir=\"$out/$mode/run\"" --set "trainer.steps=$steps" \
    --set trainer.eval_every=0 --set "trainer.save_every=$((steps + 1))" \
    --set "models.solver-lm.shard=\"$mode\"" --set "models.verifier-lm.shard=\"$mode\"" \
    --quiet >/dev/null
done
.venv/bin/python scripts/py/bench_shard_table.py "$out" none optimizer full
