//! Parity with HF transformers on tiny random checkpoints made by
//! `scripts/py/tiny_models.py` (Llama tied and untied, Qwen2 with q/k/v bias, Qwen3
//! with q/k norm tied and untied): logits on a left-padded batch, greedy generations,
//! and checkpoints drmas saves, read back by transformers.

use crate::common;

use common::{compare_valid_logits, load_tiny, read_reference, tiny_models, venv_python};
use drmas::model::{positions_from_mask, prefill_mask, save_checkpoint};

const MODELS: [&str; 5] = ["llama", "llama-tied", "qwen2", "qwen3", "qwen3-untied"];

#[test]
fn logits_match_transformers_on_a_left_padded_batch() {
    for name in MODELS {
        let model = load_tiny(name);
        let reference = read_reference(&tiny_models().join(name).join("reference.safetensors"));
        let ids = &reference["input_ids"];
        let mask = &reference["attention_mask"];
        let logits = tch::no_grad(|| {
            let hidden = model.forward(ids, &positions_from_mask(mask), &prefill_mask(mask), None);
            model.logits(&hidden)
        });
        let diff = compare_valid_logits(&logits, &reference["logits"], mask);
        eprintln!("{name}: max |Δlogit| vs transformers = {diff:.2e}");
        assert!(diff <= 1e-4, "{name}: max |Δlogit| = {diff}");
    }
}

#[test]
fn saved_checkpoints_load_in_transformers_with_the_same_logits() {
    let Some(python) = venv_python() else {
        panic!(
            "no .venv python: run scripts/setup.sh --test-deps (it installs transformers, \
             which reads the saved checkpoints here)"
        )
    };
    for name in ["llama", "qwen3"] {
        let model = load_tiny(name);
        let out = tempfile::tempdir().unwrap();
        let saved = out.path().join("ckpt");
        save_checkpoint(&model, &tiny_models().join(name), &saved).unwrap();
        let reference = tiny_models().join(name).join("reference.safetensors");
        let logits_file = out.path().join("logits.safetensors");
        let status = std::process::Command::new(&python)
            .arg(common::script("tiny_models.py"))
            .args(["logits"])
            .arg(&saved)
            .arg(&reference)
            .arg(&logits_file)
            .status()
            .unwrap();
        assert!(
            status.success(),
            "{name}: transformers could not load the saved checkpoint"
        );
        let theirs = read_reference(&logits_file);
        let ours = read_reference(&reference);
        let diff =
            compare_valid_logits(&theirs["logits"], &ours["logits"], &ours["attention_mask"]);
        assert!(
            diff <= 1e-5,
            "{name}: saved checkpoint gives |Δlogit| = {diff}"
        );
        // And drmas reads its own checkpoint back to the same weights.
        let again = common::load_dir(&saved);
        for (k, v) in model.vs.variables() {
            let w = &again.vs.variables()[&k];
            assert_eq!(
                f64::try_from((&v - w).abs().max()).unwrap(),
                0.0,
                "{name}: {k}"
            );
        }
    }
}
