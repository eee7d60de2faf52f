#!/usr/bin/env bash
# One-time, idempotent set-up: a git-ignored .venv with the torch wheel that tch 0.24
# is built against, and the .venv/libtorch link that .cargo/config.toml points LIBTORCH
# at. With --test-deps, also the pinned Python peers the tests compare against
# (transformers, gguf, math-verify, peft). With --bench-deps, also TRL for
# scripts/bench-train.sh. With --openenv, also .venv-openenv: OpenEnv's environment
# server (openenv-core) for the remote environments (docs/remote-envs.md) and their tests.
# The flags combine. Safe to run again; it does nothing when all is in place.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
TORCH_VERSION=2.11.0
# math-verify with the latex2sympy2_extended it requires, and their own dependencies at
# the versions torch already brings (sympy) or the newest allowed (antlr4), so installing
# it never moves torch/transformers/numpy (checked with pip --dry-run). peft is the LoRA
# reference (scripts/py/peft_reference.py): 0.21.2 is the newest and works with
# transformers 5; everything it requires (psutil, pyyaml, tqdm, safetensors,
# huggingface_hub) already comes with transformers/accelerate, so it adds nothing else.
# tensorboard (its EventAccumulator reads drmas's event files back) and mlflow (the
# tracking server and client the tracking tests run against; 3.17.2 because 3.18.0's
# mlflow-tracing is not on the index) leave the pins above where they are.
TEST_DEPS=("transformers==5.24.0" "accelerate==1.15.0" "gguf==0.19.0" "numpy==2.4.6"
  "math-verify==0.9.0" "latex2sympy2_extended==1.11.0" "antlr4-python3-runtime==4.13.2" "sympy==1.14.0"
  "peft==0.21.2" "scipy==1.17.1" "tensorboard==2.21.0" "mlflow==3.17.2")
# The CUDA headers that the wheel's own CUDA packages leave out and c10d's NCCL header
# includes (crt/, cub/thrust/libcu++), at the CUDA 13.0 of the torch wheel's
# nvidia-cuda-runtime: only for compiling drmas-dist's `nccl` feature (the tests compile
# it; a GPU user building with it needs them too). Headers only, ~3 MB.
NCCL_DEPS=("nvidia-cuda-crt==13.0.88" "nvidia-cuda-cccl==13.0.85")
# Gloo's headers, which c10d's ProcessGroupGloo.hpp includes and the torch wheel does not
# ship (Gloo itself is compiled into libtorch_cpu): Debian bookworm's libgloo-dev, a
# snapshot of pytorch/gloo (2022-05-18) whose interface is the one the wheel's c10d uses,
# fetched from Debian's archive by exact version and sha256 and unpacked into .venv/gloo.
# Debian's archive is reachable where GitHub may not be, and a .deb is a pinned file.
GLOO_DEB="libgloo-dev_0.0~git20220518.5b14351-3_amd64.deb"
GLOO_URL="http://deb.debian.org/debian/pool/main/g/gloo/$GLOO_DEB"
GLOO_SHA256="80529c9fd8af452faf489e686b94bf87075965c40673803810c4f41634b1e299"
# TRL's own dependencies that are not pinned above, pinned so that installing it never
# moves torch/transformers/accelerate/numpy (checked with pip --dry-run).
BENCH_DEPS=("trl==1.16.0" "datasets==5.2.0")
# openenv-core with only what its environment server imports, every version exact
# (examples/openenv-countdown/requirements.lock, installed with --no-deps): its UI and CLI
# dependencies (gradio, openai, typer) are left out. A venv of its own, so that its
# FastAPI/pydantic/websockets never move the test venv's pins.
OPENENV_LOCK=examples/openenv-countdown/requirements.lock
PYTHON=${PYTHON:-python3}
test_deps=0
bench_deps=0
openenv=0
for arg in "$@"; do
  case "$arg" in
    --test-deps) test_deps=1 ;;
    --bench-deps) bench_deps=1 ;;
    --openenv) openenv=1 ;;
    *) echo "setup: unknown flag $arg (expected --test-deps, --bench-deps and/or --openenv)" >&2; exit 2 ;;
  esac
done

# Free space on the file system that holds the checkout, in GiB. The torch wheel with
# its CUDA libraries unpacks to about 5 GiB and the build of the workspace takes about
# 5 GiB more; a full disk otherwise shows up as a pip traceback deep in a download.
free_gib() { df -Pk "$root" | awk 'NR==2 { printf "%d", $4 / 1048576 }'; }
need_space() {
  local need=$1 what=$2 have
  have=$(free_gib)
  if [ "$have" -lt "$need" ]; then
    echo "setup: $what needs about $need GiB free on $(df -P "$root" | awk 'NR==2 {print $6}'), only $have GiB is free" >&2
    exit 1
  fi
}
# No pip cache: the wheels are installed once, and a cached copy would double the space.
PIP=(.venv/bin/python -m pip install --quiet --disable-pip-version-check --no-cache-dir)

if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv"
  "$PYTHON" -m venv .venv
fi
have=$(.venv/bin/python -c 'import torch; print(torch.__version__.split("+")[0])' 2>/dev/null || true)
if [ "$have" != "$TORCH_VERSION" ]; then
  need_space 8 "installing torch==$TORCH_VERSION"
  echo "setup: installing torch==$TORCH_VERSION into .venv (about a minute)"
  "${PIP[@]}" "torch==$TORCH_VERSION" "numpy==2.4.6"
fi
if [ "$test_deps" = 1 ] && ! .venv/bin/python -c '
import transformers, gguf, accelerate, peft, importlib.metadata as m
assert transformers.__version__ == "5.24.0" and m.version("math-verify") == "0.9.0"
assert peft.__version__ == "0.21.2"
import scipy; assert scipy.__version__ == "1.17.1"
import tensorboard; assert tensorboard.__version__ == "2.21.0"
assert m.version("mlflow") == "3.17.2"' 2>/dev/null; then
  echo "setup: installing ${TEST_DEPS[*]} into .venv"
  "${PIP[@]}" "${TEST_DEPS[@]}"
fi
if [ "$test_deps" = 1 ] && ! .venv/bin/python -c '
import importlib.metadata as m
assert m.version("nvidia-cuda-crt") == "13.0.88" and m.version("nvidia-cuda-cccl") == "13.0.85"' 2>/dev/null; then
  echo "setup: installing ${NCCL_DEPS[*]} into .venv (CUDA headers for the NCCL build)"
  "${PIP[@]}" --no-deps "${NCCL_DEPS[@]}"
fi
if [ ! -f .venv/gloo/usr/include/gloo/config.h ]; then
  echo "setup: fetching Gloo's headers ($GLOO_DEB)"
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  curl -sSfL --retry 3 -o "$tmp/$GLOO_DEB" "$GLOO_URL"
  echo "$GLOO_SHA256  $tmp/$GLOO_DEB" | sha256sum -c --quiet - \
    || { echo "setup: $GLOO_DEB does not match its sha256" >&2; exit 1; }
  rm -rf .venv/gloo.part
  mkdir -p .venv/gloo.part
  if command -v dpkg-deb >/dev/null; then
    dpkg-deb -x "$tmp/$GLOO_DEB" .venv/gloo.part
  else
    # A .deb is an ar archive holding data.tar.*.
    (cd "$tmp" && ar x "$GLOO_DEB" && tar -xf data.tar.* -C "$root/.venv/gloo.part")
  fi
  rm -rf .venv/gloo
  mv .venv/gloo.part .venv/gloo
fi
if [ "$bench_deps" = 1 ] && ! .venv/bin/python -c 'import trl; assert trl.__version__ == "1.16.0"' 2>/dev/null; then
  echo "setup: installing ${BENCH_DEPS[*]} into .venv"
  "${PIP[@]}" "${BENCH_DEPS[@]}" \
    "torch==$TORCH_VERSION" "${TEST_DEPS[@]}"
fi
if [ "$openenv" = 1 ] && ! .venv-openenv/bin/python -c '
import importlib.metadata as m, openenv.core.env_server, uvicorn, websockets
assert m.version("openenv-core") == "0.3.0"' 2>/dev/null; then
  echo "setup: installing openenv-core 0.3.0 into .venv-openenv ($OPENENV_LOCK)"
  [ -x .venv-openenv/bin/python ] || "$PYTHON" -m venv .venv-openenv
  .venv-openenv/bin/python -m pip install --quiet --disable-pip-version-check --no-cache-dir \
    --no-deps -r "$OPENENV_LOCK"
fi
torch_dir=$(.venv/bin/python -c 'import os, torch; print(os.path.dirname(torch.__file__))')
ln -sfn "$torch_dir" .venv/libtorch
[ -f .venv/libtorch/lib/libtorch_cpu.so ] || { echo "setup: no libtorch in $torch_dir" >&2; exit 1; }

if ! command -v cargo >/dev/null; then
  echo "setup: cargo is not installed (https://rustup.rs)" >&2
  exit 1
fi
# The whole test command on a fresh clone left 4.9 GiB in target/ (measured; dependencies
# without debug info), and llama-server's build needs about 1 GiB more for a while.
[ -d target/debug ] || need_space 7 "the first build of the workspace"
echo "setup: ok (torch $TORCH_VERSION at $torch_dir)"
