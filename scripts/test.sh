#!/usr/bin/env bash
# The test command: the documentation's links, set-up, formatting and lint checks, the
# real .so plugins the tests load, then every test of the workspace. Runs from a fresh
# clone with no input.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
# Every process this command starts inherits this mark; when it ends, however it ends,
# none may be left running (a test that leaks a server or its workers fails the command,
# and what it leaked is listed and killed).
DRMAS_TEST_SESSION="test-$$-$(date +%s)"
export DRMAS_TEST_SESSION
leftovers() {
  local status=$?
  if ! python3 scripts/py/leftovers.py "$DRMAS_TEST_SESSION" --kill; then
    echo "test: the processes above were left running by the tests (killed now)" >&2
    [ "$status" -ne 0 ] || status=1
  fi
  exit "$status"
}
trap leftovers EXIT
# Every relative link and #anchor of the documentation resolves (and the checker checks itself).
python3 scripts/py/doc_links.py --self-test
python3 scripts/py/doc_links.py
scripts/setup.sh --test-deps --openenv
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --quiet -- -D warnings
# The API crate packages and builds alone, as it would be published.
cargo package -p drmas-plugin-api --allow-dirty --quiet --target-dir target/package
# The example plugins build outside the workspace, as an outside author's crate would.
(cd examples/acme-bench && cargo fmt -- --check && cargo clippy --quiet --target-dir ../../target -- -D warnings)
(cd examples/countdown && cargo fmt -- --check \
  && cargo clippy --all-targets --quiet --target-dir ../../target -- -D warnings \
  && cargo test --quiet --target-dir ../../target)
cargo build --workspace --all-targets --quiet
# The NCCL path of the collectives compiles and links here too (no GPU: it is not run).
cargo test -p drmas-dist --features nccl --quiet
scripts/make-fixtures.sh
# llama.cpp's server for the real-engine tests, built once into a cache outside the
# checkout (~10-20 min cold on 2 cores, nothing when cached).
DRMAS_LLAMA_SERVER=$(scripts/build-llama-server.sh)
export DRMAS_LLAMA_SERVER
# The misbehaving fixture panics on purpose; its panic messages in the output are expected.
RUST_BACKTRACE=0 cargo test --workspace
# The reliability matrix: bad inputs and faults through the built binary, each judged
# a clean, actionable error (or the right behaviour).
.venv/bin/python scripts/py/reliability_matrix.py --drmas target/debug/drmas
