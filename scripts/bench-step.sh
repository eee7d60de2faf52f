#!/usr/bin/env bash
# `drmas bench step` on every shipped experiment (math-drmas, math-sharing, math-lora,
# search-drmas), one after the other, each in a scratch run folder: the step split by
# phase beside the bounds of its work, measured in the same run (docs/performance.md).
# Writes OUT/CONFIG.{json,txt} and prints a markdown table of all of them.
# Usage: scripts/bench-step.sh [STEPS] [OUT]   (default 3 steps, target/bench/step)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
steps=${1:-3}
out=${2:-target/bench/step}
case "$steps" in
  '' | *[!0-9]*) echo "bench-step: STEPS must be an integer >= 2, got '$steps'" >&2; exit 2 ;;
esac
[ "$steps" -ge 2 ] || { echo "bench-step: STEPS must be >= 2 (step 1 is warm-up), got $steps" >&2; exit 2; }
die() { echo "bench-step: $*" >&2; exit 1; }

scripts/setup.sh >/dev/null || die "scripts/setup.sh failed"
cargo build --release --quiet -p drmas || die "cargo build --release -p drmas failed"
DRMAS=target/release/drmas scripts/fetch-assets.sh >/dev/null || die "scripts/fetch-assets.sh failed"
target/release/drmas data prepare >/dev/null || die "drmas data prepare failed"
mkdir -p "$out"
for config in math-drmas math-sharing math-lora search-drmas; do
  echo "bench-step: $config, $steps steps" >&2
  target/release/drmas bench step "configs/$config.toml" --steps "$steps" \
    --json "$out/$config.json" > "$out/$config.txt" || die "drmas bench step configs/$config.toml failed"
  cat "$out/$config.txt"
done
python3 scripts/py/bench_step_table.py "$out"
