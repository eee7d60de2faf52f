//! Runs whose checkpoints hold the fingerprint in Rust's spelling (checkpoint format 2,
//! `host/tests/data/rust-spelled-fingerprints/`) still resume: unchanged, as before; a
//! change is refused and listed in the experiment file's words (`plugins.override`,
//! `"llama-cpp"`, `"seq-mean-token-sum-norm"`).

use crate::common;

use common::fingerprints;
use drmas::train::fingerprint::{changes, of_files, rust_spelling::upgrade};
use std::{path::Path, process::Command};

fn drmas(dir: &Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_drmas"))
        .env_remove("DRMAS_PLUGIN_PATH")
        .env_remove("DRMAS_FAULT_POINT")
        .current_dir(dir)
        .args(args)
        .output()
        .unwrap()
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_checkpoint_with_a_rust_spelled_fingerprint_resumes_and_lists_changes_in_the_files_words() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    fingerprints::experiment("train", dir);
    let out = drmas(dir, &["train", "train.toml", "--steps", "1", "--quiet"]);
    assert!(out.status.success(), "{}", stderr(&out));
    // The checkpoint as the drmas of format 2 wrote it for this experiment.
    let step1 = dir.join("run/checkpoints/step-000001");
    let today = fingerprints::of_checkpoint(&step1);
    let old = fingerprints::old("train", &today);
    assert_ne!(old, today);
    assert_eq!(upgrade(&old), today);
    fingerprints::as_format_2(&step1, &old);

    // A changed experiment: refused, the changes in the file's keys and values.
    let out = drmas(
        dir,
        &[
            "train",
            "train.toml",
            "--resume",
            "--steps",
            "2",
            "--quiet",
            "--set",
            "plugins.override=[\"norms\"]",
            "--set",
            "trainer.loss_agg=token-mean",
            "--set",
            "models.lm.lr=2e-6",
        ],
    );
    assert!(!out.status.success());
    let want = "run/checkpoints/step-000001: the experiment differs from the one this run was trained with: \
        models[lm].lr: 0.000001 → 0.000002; \
        plugins.override: [\"math\"] → [\"norms\"]; \
        trainer.loss_agg: \"seq-mean-token-sum-norm\" → \"token-mean\"; \
        resume with --accept-changes to go on with it (the changes are recorded in run/changes.jsonl), or undo them";
    assert!(stderr(&out).contains(want), "{}", stderr(&out));

    // The same experiment: it resumes, with no change to record.
    let out = drmas(dir, &["train", "train.toml", "--resume", "--steps", "2"]);
    let text = stderr(&out);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("resuming from run/checkpoints/step-000001 (step 1)"),
        "{text}"
    );
    assert!(!text.contains("resuming with a change"), "{text}");
    assert!(!dir.join("run/changes.jsonl").exists());
    // The next checkpoint holds today's spelling.
    let step2 = fingerprints::of_checkpoint(&dir.join("run/checkpoints/step-000002"));
    let mut want = today.clone();
    want.insert("trainer.steps".into(), "2".into());
    assert_eq!(step2, want);
}

#[test]
fn an_engine_experiments_rust_spelled_fingerprint_reads_as_todays() {
    let tmp = tempfile::tempdir().unwrap();
    let path = fingerprints::experiment("engine", tmp.path());
    let exp = drmas::config::load_experiment(&path).unwrap_or_else(|e| panic!("{e:?}"));
    let today = of_files(&exp).unwrap();
    let old = fingerprints::old("engine", &today);
    assert_eq!(upgrade(&old), today);
    assert!(changes(&upgrade(&old), &today).is_empty());

    // Edited: each change in the file's keys and values.
    let text = std::fs::read_to_string(&path)
        .unwrap()
        .replace("override = [\"math\", \"norms\"]", "override = [\"math\"]")
        .replace(
            "kind = \"llama-cpp\", gguf = \"solver.gguf\", ",
            "kind = \"sglang\", ",
        )
        .replace("export = \"f16\", ", "")
        .replace("lr_schedule = \"cosine\"", "lr_schedule = \"linear\"");
    std::fs::write(&path, text).unwrap();
    let edited = drmas::config::load_experiment(&path).unwrap_or_else(|e| panic!("{e:?}"));
    let listed: Vec<String> = changes(&upgrade(&old), &of_files(&edited).unwrap())
        .iter()
        .map(|c| c.to_string())
        .collect();
    assert_eq!(
        listed,
        [
            "models[solver-lm].engine.export: \"f16\" → \"f32\"",
            "models[solver-lm].engine.gguf: \"solver.gguf\" → (absent)",
            "models[solver-lm].engine.kind: \"llama-cpp\" → \"sglang\"",
            "plugins.override: [\"math\", \"norms\"] → [\"math\"]",
            "trainer.lr_schedule: \"cosine\" → \"linear\"",
        ]
    );
}
