//! `[trainer] warm_start`: a run that starts from another run's checkpoint, with its
//! weights (and with `optimizer = true` its AdamW state), its own step counter, data
//! order and metrics, and a record of where it came from; and every way to name a
//! checkpoint wrongly, refused at the key.

use crate::common;
use std::{
    path::{Path, PathBuf},
    process::{Command, Output},
};

const TASKS: &str = "{\"id\": \"t1\", \"question\": \"What is 1 + 1?\", \"answer\": \"2\"}\n\
                     {\"id\": \"t2\", \"question\": \"What is 2 + 1?\", \"answer\": \"3\"}\n";

/// The shared solver experiment in `dir` (writing to `dir/run`) with model lines
/// `model` and `trainer` lines after the common ones.
fn experiment(dir: &Path, model: &str, trainer: &str) -> PathBuf {
    common::solver::SolverExperiment {
        model: format!("lr = {model}"),
        max_new_tokens: 4,
        trainer: format!(
            "steps = 1\nprompts_per_step = 2\ngroup_size = 2\ninvalid_penalty = 0.5\n{trainer}"
        ),
        tasks: TASKS.to_string(),
        ..Default::default()
    }
    .write(dir)
}

fn drmas(args: &[&std::ffi::OsStr]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_drmas"))
        .env_remove("DRMAS_PLUGIN_PATH")
        .args(args)
        .output()
        .unwrap()
}

fn train(config: &Path) -> Output {
    let out = drmas(&["train".as_ref(), config.as_os_str(), "--quiet".as_ref()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The largest absolute difference between two model folders' weights.
fn largest_difference(a: &Path, b: &Path) -> f64 {
    let read = |d: &Path| -> std::collections::BTreeMap<String, tch::Tensor> {
        tch::Tensor::read_safetensors(d.join("model.safetensors"))
            .unwrap()
            .into_iter()
            .collect()
    };
    let (a, b) = (read(a), read(b));
    assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>());
    a.iter()
        .map(|(k, t)| {
            (t.to_kind(tch::Kind::Double) - b[k].to_kind(tch::Kind::Double))
                .abs()
                .max()
                .double_value(&[])
        })
        .fold(0.0, f64::max)
}

fn optimizer_steps(model_dir: &Path) -> i64 {
    let text = std::fs::read_to_string(model_dir.join("worker.json")).unwrap();
    serde_json::from_str::<serde_json::Value>(&text).unwrap()["optimizer_steps"]
        .as_i64()
        .unwrap()
}

#[test]
fn a_run_starts_from_another_runs_checkpoint_with_or_without_its_optimizer() {
    let dir = tempfile::tempdir().unwrap();
    let first = experiment(&dir.path().join("a"), "1e-3", "");
    train(&first);
    let ckpt = dir.path().join("a/run/checkpoints/step-000001");
    assert_eq!(optimizer_steps(&ckpt.join("lm")), 1);

    // Weights only, with a learning rate too small to move a weight and no decay:
    // the run ends with the checkpoint's weights (which one step of weight decay moved
    // away from the tiny model's), and its own first optimizer step.
    let spec = format!(
        "warm_start = {{ checkpoint = {:?} }}",
        ckpt.display().to_string()
    );
    let second = experiment(&dir.path().join("b"), "1e-30\nweight_decay = 0.0", &spec);
    train(&second);
    let end = dir.path().join("b/run/checkpoints/step-000001/lm");
    let tiny = common::tiny_models().join("tiny-chat");
    assert!(
        largest_difference(&end, &ckpt.join("lm")) < 1e-12,
        "the warm-started weights"
    );
    assert!(
        largest_difference(&tiny, &ckpt.join("lm")) > 1e-7,
        "the first run moved them"
    );
    assert_eq!(optimizer_steps(&end), 1);
    let origin: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("b/run/origin.json")).unwrap(),
    )
    .unwrap();
    let w = &origin["warm_start"];
    assert_eq!(
        w["checkpoint"],
        ckpt.canonicalize().unwrap().display().to_string()
    );
    assert_eq!(
        (w["optimizer"].as_bool(), w["step"].as_u64()),
        (Some(false), Some(1))
    );
    assert_eq!(w["experiment"], "solo");
    assert_eq!(w["manifest_sha256"].as_str().map(str::len), Some(64));
    // Its own metrics start at step 1.
    let metrics = std::fs::read_to_string(dir.path().join("b/run/metrics.jsonl")).unwrap();
    assert_eq!(metrics.lines().count(), 1);

    // With the optimizer: the AdamW step count goes on from the checkpoint's.
    let spec = format!(
        "warm_start = {{ checkpoint = {:?}, optimizer = true }}",
        ckpt.display().to_string()
    );
    let third = experiment(&dir.path().join("c"), "1e-30\nweight_decay = 0.0", &spec);
    train(&third);
    assert_eq!(
        optimizer_steps(&dir.path().join("c/run/checkpoints/step-000001/lm")),
        2
    );
}

#[test]
fn a_warm_start_that_cannot_be_used_is_refused_at_its_key() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let tiny = common::tiny_models().join("tiny-chat");
    let cases = [
        (
            format!(
                "warm_start = {{ checkpoint = {:?} }}",
                d.join("nope").display().to_string()
            ),
            format!(
                "trainer.warm_start.checkpoint: {} is not a folder (a checkpoint: runs/<name>/checkpoints/step-NNNNNN)",
                d.join("nope").display()
            ),
        ),
        (
            format!(
                "warm_start = {{ checkpoint = {:?}, optimizer = true }}",
                tiny.display().to_string()
            ),
            format!(
                "trainer.warm_start.checkpoint: model `lm`: {} has no optimizer.safetensors: optimizer = true needs the optimizer state a checkpoint saves (or set optimizer = false)",
                tiny.display()
            ),
        ),
        (
            format!(
                "warm_start = {{ checkpoint = {:?} }}",
                d.join("x/run/checkpoints/step-000001")
                    .display()
                    .to_string()
            ),
            String::new(),
        ),
        (
            format!(
                "warm_start = {{ checkpoint = {:?} }}",
                common::tiny_models().join("qwen3").display().to_string()
            ),
            format!(
                "trainer.warm_start.checkpoint: model `lm`: {} has vocab_size 128, but {} has 259: not the same model",
                common::tiny_models().join("qwen3").display(),
                tiny.display()
            ),
        ),
    ];
    for (i, (spec, want)) in cases.into_iter().enumerate() {
        let config = experiment(&d.join("x"), "1e-3", &spec);
        if i == 2 {
            // Inside the run folder it would train over (and prune) what it starts from.
            std::fs::create_dir_all(d.join("x/run/checkpoints/step-000001")).unwrap();
        }
        let out = drmas(&["check".as_ref(), config.as_os_str()]);
        assert!(!out.status.success(), "{spec}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        let want = if want.is_empty() {
            format!(
                "experiment.output_dir: output folder {}: holds the warm start trainer.warm_start.checkpoint {}, which this command reads; write somewhere else",
                d.join("x/run").display(),
                d.join("x/run/checkpoints/step-000001").display()
            )
        } else {
            want
        };
        assert!(
            stderr
                .lines()
                .any(|l| l.ends_with(&want) && l.starts_with(&format!("{}:", config.display()))),
            "{spec}\nwanted: {want}\ngot: {stderr}"
        );
    }
}
