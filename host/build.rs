//! Links the `drmas` binary so that it finds libtorch without `LD_LIBRARY_PATH` and
//! really uses CUDA where the wheel has it.
//!
//! `torch-sys` links `torch_cuda`, but nothing in our code references a symbol of it, so
//! a linker running with `--as-needed` drops it and CUDA silently stays off. Linking it
//! again under `--no-as-needed` keeps it a `NEEDED` entry of the binary; the rpath
//! points the dynamic loader at the same folder the build linked against.

use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-env-changed=LIBTORCH");
    println!("cargo:rerun-if-env-changed=DEP_TCH_LIBTORCH_LIB");
    let lib_dir = std::env::var("LIBTORCH")
        .map(|root| PathBuf::from(root).join("lib"))
        .ok()
        .filter(|dir| dir.is_dir());
    let Some(lib_dir) = lib_dir else {
        println!(
            "cargo:warning=LIBTORCH is not set to a libtorch folder; run scripts/setup.sh. \
             The binary will need LD_LIBRARY_PATH to start."
        );
        return;
    };
    // Resolve the .venv/libtorch link so the rpath names the real folder.
    let lib_dir = lib_dir.canonicalize().unwrap_or(lib_dir);
    let dir = lib_dir.display();
    // Every artifact that runs (binary, tests, examples) gets the rpath.
    println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
    if lib_dir.join("libtorch_cuda.so").exists() {
        println!("cargo:rustc-link-search=native={dir}");
        println!("cargo:rustc-link-arg=-Wl,--no-as-needed,-ltorch_cuda,--as-needed");
    }
}
