//! Shared by the model tests: locating the tiny checkpoints and the venv, loading
//! references, comparing logits.
#![allow(dead_code)]

pub mod fake;
pub mod fingerprints;
pub mod http_stub;
pub mod process;
pub mod solver;
pub mod train;

use drmas::model::{Decoder, ModelConfig, load_weights};
use std::{
    collections::HashMap,
    path::{Path, PathBuf},
};
use tch::{Device, Kind, Tensor};

pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .canonicalize()
        .unwrap()
}

pub fn tiny_models() -> PathBuf {
    let dir = root().join("target/tiny-models");
    assert!(
        dir.join("qwen3/reference.safetensors").exists(),
        "no tiny checkpoints in {}: run scripts/make-fixtures.sh (the test command does)",
        dir.display()
    );
    dir
}

/// A copy of the tiny checkpoint `name` (its files, flat) in a temporary folder, to edit.
pub fn copy_fixture(name: &str) -> tempfile::TempDir {
    let src = tiny_models().join(name);
    let dir = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(&src).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            std::fs::copy(&path, dir.path().join(path.file_name().unwrap())).unwrap();
        }
    }
    dir
}

pub fn script(name: &str) -> PathBuf {
    root().join("scripts/py").join(name)
}

pub fn venv_python() -> Option<PathBuf> {
    let p = root().join(".venv/bin/python");
    p.exists().then_some(p)
}

pub fn load_dir(dir: &Path) -> Decoder {
    let config = ModelConfig::from_file(&dir.join("config.json")).unwrap();
    let mut model = Decoder::new(config, Device::Cpu, Kind::Float);
    load_weights(&mut model, dir).unwrap();
    model
}

pub fn load_tiny(name: &str) -> Decoder {
    load_dir(&tiny_models().join(name))
}

pub fn read_reference(path: &Path) -> HashMap<String, Tensor> {
    let bytes = std::fs::read(path).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    st.tensors()
        .into_iter()
        .map(|(name, view)| {
            let kind = match view.dtype() {
                safetensors::Dtype::F32 => Kind::Float,
                safetensors::Dtype::I64 => Kind::Int64,
                other => panic!("{name}: dtype {other:?}"),
            };
            let shape: Vec<i64> = view.shape().iter().map(|&d| d as i64).collect();
            (name, Tensor::from_data_size(view.data(), &shape, kind))
        })
        .collect()
}

/// Max |a − b| over the positions where `mask` [B, T] is 1; a and b are [B, T, V].
pub fn compare_valid_logits(a: &Tensor, b: &Tensor, mask: &Tensor) -> f64 {
    let valid = mask.to_kind(Kind::Bool).unsqueeze(-1).expand_as(a);
    let diff = (a - b).abs().masked_select(&valid);
    f64::try_from(diff.max()).unwrap()
}

/// A finished command's stdout then stderr, as text (for assertions' messages).
pub fn output_text(o: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}
