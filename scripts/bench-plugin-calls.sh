#!/usr/bin/env bash
# The host's cost per plugin call: the same components called inline, through the
# host's checked handle as built-ins, and as a dynamic `.so` through the frozen ABI,
# side by side in one run (host/examples/plugin_overhead.rs). Release builds.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
scripts/setup.sh >/dev/null
# Built without the host, so math and norms export a plugin header instead of
# registering as built-ins.
cargo build --release --quiet -p drmas-math -p drmas-norms -p drmas-fixture-good
out=target/bench/plugins
mkdir -p "$out"
cp target/release/libdrmas_math.so "$out/math.so"
cp target/release/libdrmas_norms.so "$out/norms.so"
cp target/release/libdrmas_fixture_good.so "$out/good.so"
cargo run --release --quiet -p drmas --example plugin_overhead -- "$out"
