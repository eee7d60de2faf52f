//! Compiles the C++ shim against the torch wheel's headers (the same libtorch tch
//! links). It needs no other headers: the ops it reaches are in libtorch_cpu's API, and
//! dispatch picks their CUDA kernels at run time when the tensors are on a GPU.

use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=shim/kernels_shim.cpp");
    println!("cargo:rerun-if-env-changed=LIBTORCH");
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    let workspace = manifest.parent().unwrap().to_path_buf();
    let libtorch = std::env::var_os("LIBTORCH")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace.join(".venv/libtorch"));
    let header = libtorch.join("include/ATen/record_function.h");
    if !header.exists() {
        panic!(
            "{} is missing: the torch wheel's headers (LIBTORCH); run scripts/setup.sh",
            header.display()
        );
    }
    cc::Build::new()
        .cpp(true)
        .std("c++17")
        .file("shim/kernels_shim.cpp")
        .include(libtorch.join("include"))
        .include(libtorch.join("include/torch/csrc/api/include"))
        // The wheel is built with the C++11 ABI.
        .define("_GLIBCXX_USE_CXX11_ABI", "1")
        // libtorch's headers warn a lot under -Wall; they are not ours to fix.
        .warnings(false)
        .compile("drmas_kernels_shim");
    let lib = libtorch.join("lib");
    println!("cargo:rustc-link-search=native={}", lib.display());
    println!("cargo:rustc-link-lib=dylib=torch_cpu");
    println!("cargo:rustc-link-lib=dylib=c10");
    let lib = lib.canonicalize().unwrap_or(lib);
    println!("cargo:rustc-link-arg=-Wl,-rpath,{}", lib.display());
}
