#!/usr/bin/env bash
# Builds the real .so files the plugin tests load, into target/test-plugins/:
#   good.so, misbehave.so, not-a-plugin.so   fixture crates of this workspace
#   norms.so                                 the first-party norms plugin built alone
#   api-v9.so                                the good plugin built against API 9.0.0
#   layout.so                                the good plugin built against an API whose
#                                            component object's `call` differs, same
#                                            ABI version
#   api-1.0.so                               tests/fixtures/old-api-plugin, built against
#                                            the frozen API 1.0 (tests/fixtures/api-1.0)
#   api-1.99.so                              the same, against a copy claiming 1.99.0
#   acme-bench.so, countdown.so              the third-party examples in examples/
#   garbage.so, empty.so                     files that are not libraries at all
# Idempotent; cargo rebuilds only what changed.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
out=target/test-plugins
mkdir -p "$out"

# Built in one invocation without the host, so drmas-norms has its `builtin` feature
# off and exports a plugin header.
cargo build --quiet -p drmas-fixture-good -p drmas-fixture-misbehave \
  -p drmas-fixture-not-a-plugin -p drmas-norms
cp target/debug/libdrmas_fixture_good.so "$out/good.so"
cp target/debug/libdrmas_fixture_misbehave.so "$out/misbehave.so"
cp target/debug/libdrmas_fixture_not_a_plugin.so "$out/not-a-plugin.so"
cp target/debug/libdrmas_norms.so "$out/norms.so"

# ABI variants: copies of the API crate, patched, and a fixture built on each.
variants=target/abi-variants
rm -rf "$variants/src"
mkdir -p "$variants/src"
make_api() { # name version patch-python
  local dir="$variants/src/$1"
  cp -r plugin-api "$dir"
  python3 - "$dir" "$2" "$3" <<'PY'
import pathlib, re, sys
d, version, patch = pathlib.Path(sys.argv[1]), sys.argv[2], sys.argv[3]
ws = (d / "../../../../Cargo.toml").resolve().read_text()
deps = dict(re.findall(r'^(abi_stable|inventory|serde|serde_json|toml) = (.*)$', ws, re.M))
m = (d / "Cargo.toml").read_text()
m = re.sub(r'^(edition|license|rust-version|repository)\.workspace = true\n', "", m, flags=re.M)
m = re.sub(r'^version = ".*"', f'version = "{version}"', m, count=1, flags=re.M)
m = m.replace("[package]", '[package]\nedition = "2024"')
for k, v in deps.items():
    m = m.replace(f"{k}.workspace = true", f"{k} = {v}")
(d / "Cargo.toml").write_text(m)
if patch == "layout":
    # The frozen component object with a different method signature.
    ffi = d / "src/ffi.rs"
    t = ffi.read_text()
    old = "fn call(&self, method: RStr<'_>, input: RStr<'_>) -> RResult<RString, RString>;"
    assert old in t
    t = t.replace(old, old.replace("input: RStr<'_>)", "input: RStr<'_>, flags: u64)"), 1)
    t = t.replace("fn call(&self, method: RStr<'_>, input: RStr<'_>) -> RResult<RString, RString> {",
                  "fn call(&self, method: RStr<'_>, input: RStr<'_>, _flags: u64) -> RResult<RString, RString> {", 1)
    ffi.write_text(t)
PY
}
make_api api-v9 9.0.0 none
make_api api-layout 1.0.0 layout
# The frozen API 1.0 with its version bumped: a plugin claiming a newer minor.
cp -r tests/fixtures/api-1.0 "$variants/src/api-1.99"
sed -i 's/^version = "1.0.0"$/version = "1.99.0"/' "$variants/src/api-1.99/Cargo.toml"
grep -q '^version = "1.99.0"$' "$variants/src/api-1.99/Cargo.toml"

build_variant() { # api-folder fixture-crate output-name
  local name="plugin-$1" lib="variant_${1//[-.]/_}"
  mkdir -p "$variants/src/$name"
  cat > "$variants/src/$name/Cargo.toml" <<TOML
[package]
name = "${lib//_/-}"
version = "1.0.0"
edition = "2024"
publish = false

[workspace]

[profile.dev.package."*"]
opt-level = 2

[lib]
crate-type = ["cdylib"]
path = "../../../../$2/src/lib.rs"

[dependencies]
drmas-plugin-api = { path = "../$1" }
serde = { version = "1", features = ["derive"] }
TOML
  cp Cargo.lock "$variants/src/$name/Cargo.lock"
  # Same target folder as the workspace, so the shared dependencies are reused.
  cargo build --quiet --manifest-path "$variants/src/$name/Cargo.toml" --target-dir target
  cp "target/debug/lib$lib.so" "$out/$3.so"
}
build_variant api-v9 tests/fixtures/good api-v9
build_variant api-layout tests/fixtures/good layout
build_variant api-1.99 tests/fixtures/old-api-plugin api-1.99

# The fixture built against the frozen API 1.0 itself, from its own folder.
cp Cargo.lock tests/fixtures/old-api-plugin/Cargo.lock
cargo build --quiet --manifest-path tests/fixtures/old-api-plugin/Cargo.toml --target-dir target
cp target/debug/libold_api_plugin.so "$out/api-1.0.so"
rm -f "$out/nolinks.so"

# The third-party template, built on its own like an outside author would.
cargo build --quiet --manifest-path examples/acme-bench/Cargo.toml --target-dir target
cp target/debug/libacme_bench.so "$out/acme-bench.so"
cargo build --quiet --manifest-path examples/countdown/Cargo.toml --target-dir target
cp target/debug/libcountdown.so "$out/countdown.so"

printf 'this is not an ELF file\n' > "$out/garbage.so"
: > "$out/empty.so"
echo "test plugins in $out: $(cd "$out" && ls | tr '\n' ' ')"
