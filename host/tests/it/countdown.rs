//! The Countdown example (`examples/countdown`), built outside the workspace against the
//! API crate only, is loaded from a plugin folder, passes `drmas check` with its own
//! experiment file, and runs a short `drmas eval` on the tiny chat model.

use crate::built_plugins;

use std::{
    path::{Path, PathBuf},
    process::{Command, Output},
};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .canonicalize()
        .unwrap()
}

/// A plugin folder holding the example as its build names it.
fn plugin_dir() -> tempfile::TempDir {
    let dir = built_plugins::plugin_dir(&["countdown>libcountdown"]);
    assert!(dir.path().join("libcountdown.so").exists());
    dir
}

fn replace_once(text: &str, from: &str, to: &str) -> String {
    assert_eq!(text.matches(from).count(), 1, "`{from}` in:\n{text}");
    text.replace(from, to)
}

/// The example's own experiment file in `dir`, pointed at `plugins`, the tiny chat
/// model (for the real one) and the committed tasks, by absolute paths.
fn experiment(dir: &Path, plugins: &Path) -> PathBuf {
    let root = root();
    let text = std::fs::read_to_string(root.join("examples/countdown/experiment.toml")).unwrap();
    let quoted = |p: PathBuf| format!("{:?}", p.display().to_string());
    let text = replace_once(
        &text,
        "dirs = [\"plugins.d\"]",
        &format!("dirs = [{}]", quoted(plugins.to_path_buf())),
    );
    let text = replace_once(
        &text,
        "\"models/smollm2-135m-instruct\"",
        &quoted(root.join("target/tiny-models/tiny-chat")),
    );
    let text = replace_once(
        &text,
        "\"examples/countdown/data/val.jsonl\"",
        &quoted(root.join("examples/countdown/data/val.jsonl")),
    );
    let path = dir.join("experiment.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// Runs `drmas ARGS` in `dir`, so that nothing lands in the repository.
fn drmas(dir: &Path, args: &[&str]) -> Output {
    let out = Command::new(env!("CARGO_BIN_EXE_drmas"))
        .args(args)
        .current_dir(dir)
        .env_remove("DRMAS_PLUGIN_PATH")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "drmas {args:?}:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

#[test]
fn countdown_passes_drmas_check_with_its_experiment() {
    let plugins = plugin_dir();
    let work = tempfile::tempdir().unwrap();
    let config = experiment(work.path(), plugins.path());
    let out = drmas(work.path(), &["check", config.to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let so = plugins.path().join("libcountdown.so");
    for line in [
        format!(
            "  agents[0] agent: countdown/player 1.1.0 ({})",
            so.display()
        ),
        format!(
            "  environment environment: countdown/game 1.1.0 ({})",
            so.display()
        ),
        format!(
            "  rewards[0] reward: countdown/exact 1.1.0 ({})",
            so.display()
        ),
    ] {
        assert!(
            stdout.lines().any(|l| l == line),
            "missing `{line}` in:\n{stdout}"
        );
    }
}

#[test]
fn countdown_evaluates_on_the_tiny_model_and_writes_a_report() {
    let plugins = plugin_dir();
    let work = tempfile::tempdir().unwrap();
    let config = experiment(work.path(), plugins.path());
    let report = work.path().join("eval.json");
    let samples = work.path().join("samples.jsonl");
    let out = drmas(
        work.path(),
        &[
            "eval",
            config.to_str().unwrap(),
            "--k",
            "1",
            "--limit",
            "2",
            "--out",
            report.to_str().unwrap(),
            "--dump-samples",
            samples.to_str().unwrap(),
        ],
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("overall"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    // The tiny model writes noise: the structure is checked, not the scores.
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert_eq!(report["episodes"], 2);
    assert_eq!(report["failed_episodes"], 0);
    assert_eq!(report["overall"]["tasks"], 2);
    assert_eq!(report["sources"]["countdown"]["tasks"], 2);
    let avg = report["overall"]["avg_at_k"].as_f64().unwrap();
    assert!((0.0..=1.0).contains(&avg), "{report}");
    let calls = report["overall"]["agents"]["player"]["calls"]
        .as_u64()
        .unwrap();
    // At least one turn per episode, at most `max_turns` (6).
    assert!((2..=12).contains(&calls), "{report}");
    let lines = std::fs::read_to_string(&samples).unwrap();
    assert_eq!(lines.lines().count() as u64, calls);
}
