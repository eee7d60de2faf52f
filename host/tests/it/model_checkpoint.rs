//! Checkpoint folders: sharded saving and loading, and every way a folder can be wrong.

use crate::common;

use common::{load_dir, tiny_models};
use drmas::model::{Decoder, ModelConfig, load_weights, save_checkpoint_sharded, weight_files};
use std::path::Path;
use tch::{Device, Kind};

fn same_weights(a: &Decoder, b: &Decoder) {
    let (va, vb) = (a.vs.variables(), b.vs.variables());
    assert_eq!(va.len(), vb.len());
    for (k, v) in va {
        assert!(v.equal(&vb[&k]), "{k} differs");
    }
}

#[test]
fn sharded_checkpoints_round_trip_and_load_in_transformers() {
    let model = load_dir(&tiny_models().join("qwen3-untied"));
    let out = tempfile::tempdir().unwrap();
    let dir = out.path().join("sharded");
    save_checkpoint_sharded(&model, &tiny_models().join("qwen3-untied"), &dir, 64 * 1024).unwrap();
    let files = weight_files(&dir).unwrap();
    assert!(files.len() >= 3, "{files:?}");
    assert!(dir.join("model.safetensors.index.json").exists());
    assert!(!dir.join("model.safetensors").exists());
    assert!(dir.join("config.json").exists() && dir.join("generation_config.json").exists());
    same_weights(&model, &load_dir(&dir));

    let python = common::venv_python().expect("venv");
    let logits = out.path().join("logits.safetensors");
    let reference = tiny_models().join("qwen3-untied/reference.safetensors");
    let status = std::process::Command::new(python)
        .arg(common::script("tiny_models.py"))
        .arg("logits")
        .arg(&dir)
        .arg(&reference)
        .arg(&logits)
        .status()
        .unwrap();
    assert!(status.success());
    let theirs = common::read_reference(&logits);
    let ours = common::read_reference(&reference);
    let diff =
        common::compare_valid_logits(&theirs["logits"], &ours["logits"], &ours["attention_mask"]);
    assert!(diff <= 1e-5, "{diff}");
}

#[test]
fn saving_replaces_an_old_checkpoint_atomically() {
    let model = load_dir(&tiny_models().join("llama"));
    let out = tempfile::tempdir().unwrap();
    let dir = out.path().join("ckpt");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("stale.bin"), b"old").unwrap();
    save_checkpoint_sharded(&model, &tiny_models().join("llama"), &dir, usize::MAX).unwrap();
    assert!(!dir.join("stale.bin").exists());
    assert!(dir.join("model.safetensors").exists());
    let leftovers: Vec<_> = std::fs::read_dir(out.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(leftovers, vec![std::ffi::OsString::from("ckpt")]);
}

fn config_error(json: &str) -> String {
    ModelConfig::from_json(Path::new("m/config.json"), json)
        .unwrap_err()
        .to_string()
}

const BASE: &str = r#""vocab_size": 128, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4"#;

#[test]
fn unsupported_architectures_are_refused_by_field() {
    assert_eq!(
        config_error(&format!(r#"{{"model_type": "mistral", {BASE}}}"#)),
        "m/config.json: unsupported model: `model_type` = \"mistral\": supported: \"llama\", \"qwen2\", \"qwen3\""
    );
    assert_eq!(
        config_error(&format!(
            r#"{{"model_type": "llama", "rope_scaling": {{"rope_type": "llama3", "factor": 8.0}}, {BASE}}}"#
        )),
        "m/config.json: unsupported model: `rope_scaling` = {\"factor\":8.0,\"rope_type\":\"llama3\"}: only plain rotate-half RoPE (`rope_theta`) is implemented"
    );
    assert_eq!(
        config_error(&format!(
            r#"{{"model_type": "qwen2", "use_sliding_window": true, {BASE}}}"#
        )),
        "m/config.json: unsupported model: `use_sliding_window` = true: sliding-window attention is not implemented"
    );
    assert_eq!(
        config_error(&format!(
            r#"{{"model_type": "qwen3", "num_experts": 8, {BASE}}}"#
        )),
        "m/config.json: unsupported model: `num_experts` = Some(8): mixture-of-experts layers are not implemented"
    );
    assert_eq!(
        config_error(&format!(
            r#"{{"model_type": "llama", "hidden_act": "gelu", {BASE}}}"#
        )),
        "m/config.json: unsupported model: `hidden_act` = \"gelu\": only \"silu\" (SwiGLU) is implemented"
    );
    assert_eq!(
        config_error(&format!(
            r#"{{"model_type": "llama", "num_key_value_heads": 3, {BASE}}}"#
        )),
        "m/config.json: `num_key_value_heads`: 3 does not divide num_attention_heads = 4"
    );
    assert!(
        config_error(r#"{"model_type": "llama"}"#)
            .starts_with("m/config.json: `config.json`: missing field `vocab_size`")
    );
    // A default rope_scaling is plain RoPE.
    let ok = ModelConfig::from_json(
        Path::new("m"),
        &format!(
            r#"{{"model_type": "llama", "rope_scaling": {{"rope_type": "default"}}, {BASE}}}"#
        ),
    )
    .unwrap();
    assert_eq!(ok.head_dim, 16);
}

#[test]
fn checkpoints_that_do_not_fit_the_config_are_refused() {
    let src = tiny_models().join("llama");
    let load = |dir: &Path| {
        let config = ModelConfig::from_file(&dir.join("config.json")).unwrap();
        let mut m = Decoder::new(config, Device::Cpu, Kind::Float);
        load_weights(&mut m, dir)
            .map(|_| ())
            .unwrap_err()
            .to_string()
    };
    // More layers in the config than in the weights: a missing tensor.
    let dir = tempfile::tempdir().unwrap();
    for f in ["model.safetensors", "generation_config.json"] {
        std::fs::copy(src.join(f), dir.path().join(f)).unwrap();
    }
    let config = std::fs::read_to_string(src.join("config.json")).unwrap();
    std::fs::write(
        dir.path().join("config.json"),
        config.replace("\"num_hidden_layers\": 2", "\"num_hidden_layers\": 3"),
    )
    .unwrap();
    assert_eq!(
        load(dir.path()),
        format!(
            "checkpoint {} has no tensor `model.layers.2.input_layernorm.weight` (expected by the llama decoder)",
            dir.path().display()
        )
    );
    std::fs::write(
        dir.path().join("config.json"),
        config.replace("\"intermediate_size\": 96", "\"intermediate_size\": 80"),
    )
    .unwrap();
    let err = load(dir.path());
    assert!(
        err.ends_with("tensor `model.layers.0.mlp.down_proj.weight`: shape [64, 96], the config implies [64, 80]"),
        "{err}"
    );
    std::fs::write(
        dir.path().join("config.json"),
        config.replace("\"num_hidden_layers\": 2", "\"num_hidden_layers\": 1"),
    )
    .unwrap();
    assert_eq!(
        load(dir.path()),
        format!(
            "{}: tensor `model.layers.1.input_layernorm.weight`, `model.layers.1.mlp.down_proj.weight`, `model.layers.1.mlp.gate_proj.weight`: 9 weight(s) the llama decoder does not have: is config.json for this checkpoint?",
            dir.path().display()
        )
    );
    std::fs::remove_file(dir.path().join("model.safetensors")).unwrap();
    assert_eq!(
        load(dir.path()),
        format!(
            "{}: no model.safetensors or model.safetensors.index.json",
            dir.path().display()
        )
    );
}
