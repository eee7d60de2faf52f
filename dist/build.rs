//! Compiles the C++ shim over c10d against the torch wheel's headers (the same libtorch
//! tch links) and the Gloo headers `scripts/setup.sh` unpacks from Debian's pinned
//! `libgloo-dev` (the wheel ships Gloo compiled into libtorch_cpu, not its headers).

use std::path::{Path, PathBuf};

fn main() {
    println!("cargo:rerun-if-changed=shim/c10d_shim.cpp");
    println!("cargo:rerun-if-env-changed=LIBTORCH");
    println!("cargo:rerun-if-env-changed=DRMAS_GLOO_INCLUDE");
    println!("cargo:rerun-if-env-changed=DRMAS_CUDA_INCLUDE");
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    let workspace = manifest.parent().unwrap().to_path_buf();
    let libtorch = std::env::var_os("LIBTORCH")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace.join(".venv/libtorch"));
    let gloo = std::env::var_os("DRMAS_GLOO_INCLUDE")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace.join(".venv/gloo/usr/include"));
    need(
        &libtorch.join("include/torch/csrc/distributed/c10d/ProcessGroupGloo.hpp"),
        "the torch wheel's c10d headers (LIBTORCH); run scripts/setup.sh",
    );
    need(
        &gloo.join("gloo/config.h"),
        "the Gloo headers (DRMAS_GLOO_INCLUDE); run scripts/setup.sh, which unpacks them",
    );
    let mut build = cc::Build::new();
    build
        .cpp(true)
        .std("c++17")
        .file("shim/c10d_shim.cpp")
        .include(libtorch.join("include"))
        .include(libtorch.join("include/torch/csrc/api/include"))
        .include(&gloo)
        // The wheel is built with the C++11 ABI and these defines; without them the
        // c10d classes are compiled out of the headers.
        .define("_GLIBCXX_USE_CXX11_ABI", "1")
        .define("USE_C10D_GLOO", "1")
        .define("USE_DISTRIBUTED", "1")
        // libtorch's headers warn a lot under -Wall; they are not ours to fix.
        .warnings(false)
        .flag_if_supported("-Wno-unused-parameter");
    if std::env::var_os("CARGO_FEATURE_NCCL").is_some() {
        // The CUDA and NCCL headers: DRMAS_CUDA_INCLUDE, or those of the wheel's own
        // nvidia packages beside it (plus the crt and cccl ones scripts/setup.sh adds).
        let cuda = match std::env::var_os("DRMAS_CUDA_INCLUDE") {
            Some(v) => std::env::split_paths(&v).collect::<Vec<_>>(),
            None => wheel_cuda_includes(&libtorch),
        };
        for dir in &cuda {
            build.include(dir);
        }
        build.define("DRMAS_NCCL", "1").define("USE_C10D_NCCL", "1");
        println!("cargo:rustc-link-lib=dylib=torch_cuda");
    }
    build.compile("drmas_c10d_shim");
    println!(
        "cargo:rustc-link-search=native={}",
        libtorch.join("lib").display()
    );
    println!("cargo:rustc-link-lib=dylib=torch_cpu");
    println!("cargo:rustc-link-lib=dylib=c10");
    // This crate's own tests find libtorch without LD_LIBRARY_PATH, as the host's do.
    let lib = libtorch.join("lib");
    let lib = lib.canonicalize().unwrap_or(lib);
    println!("cargo:rustc-link-arg=-Wl,-rpath,{}", lib.display());
}

/// `site-packages/nvidia/*/include` beside the torch wheel.
fn wheel_cuda_includes(libtorch: &Path) -> Vec<PathBuf> {
    let torch = libtorch
        .canonicalize()
        .unwrap_or_else(|_| libtorch.to_path_buf());
    let Some(nvidia) = torch.parent().map(|p| p.join("nvidia")) else {
        return Vec::new();
    };
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&nvidia)
        .map(|entries| {
            entries
                .filter_map(|e| Some(e.ok()?.path().join("include")))
                .filter(|p| p.is_dir())
                .collect()
        })
        .unwrap_or_default();
    dirs.sort();
    dirs
}

fn need(path: &Path, what: &str) {
    if !path.exists() {
        panic!("{} is missing: {what}", path.display());
    }
}
