#!/usr/bin/env bash
# The main job, as far as the project goes today: set up, build drmas in release mode,
# build the third-party template plugin into plugins.d/, show what drmas sees, and
# validate the template's experiment end to end (plugins resolved and configured).
# Rollouts, evaluation and training are added by the next issues.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
scripts/setup.sh
cargo build --release --quiet -p drmas
cargo build --release --quiet --manifest-path examples/acme-bench/Cargo.toml --target-dir target
mkdir -p plugins.d
cp target/release/libacme_bench.so plugins.d/
drmas=target/release/drmas
$drmas info --plugin-dir plugins.d
$drmas plugins list --plugin-dir plugins.d
$drmas check examples/acme-bench/experiment.toml
