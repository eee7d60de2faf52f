#!/usr/bin/env bash
# GPU check for a machine without a Rust toolchain: run from the repository root with
# a prebuilt bundle in gpu-bundle/ (made by `scripts/gpu-check.sh --bundle` here).
# Uses the machine's own torch 2.11.0 for libtorch.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = "--bundle" ]; then
  cargo build --release --quiet -p drmas
  cargo build --release --quiet --manifest-path examples/acme-bench/Cargo.toml --target-dir target
  rm -rf gpu-bundle && mkdir -p gpu-bundle/plugins
  cp target/release/drmas gpu-bundle/
  strip gpu-bundle/drmas
  cp target/release/libacme_bench.so gpu-bundle/plugins/
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
