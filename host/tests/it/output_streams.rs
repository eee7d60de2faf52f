//! Standard output and error that cannot be written (`>/dev/full`, `2>/dev/full`): the
//! command does its work, drops the output it cannot write, and ends with status 74
//! (`EXIT_OUTPUT_FAILED`), never a panic (101) — through the real binary. A sweep's
//! summary carries each failed run's first error line.

use std::{
    fs::File,
    process::{Command, Output, Stdio},
};

fn drmas() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_drmas"));
    c.env_remove("DRMAS_PLUGIN_PATH");
    c
}

fn full() -> Stdio {
    Stdio::from(File::options().write(true).open("/dev/full").unwrap())
}

fn text(o: &Output) -> String {
    crate::common::output_text(o)
}

#[test]
fn check_with_stdout_on_a_full_disk_ends_with_74_and_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let config = crate::sweep_cli::experiment(dir.path());
    let o = drmas()
        .arg("check")
        .arg(&config)
        .stdout(full())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(74), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(
        err.contains(
            "error: cannot write to standard output: No space left on device (os error 28); output after that was dropped"
        ),
        "{err}"
    );
}

#[test]
fn check_with_stderr_on_a_full_disk_ends_with_its_own_status_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let config = crate::sweep_cli::experiment(dir.path());
    // A refused override: the errors go to standard error, which cannot take them; the
    // status is check's own failure (1), not a panic's 101.
    let o = drmas()
        .arg("check")
        .arg(&config)
        .args(["--set", "trainer.steps=0"])
        .stderr(full())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    // A good experiment with both streams full: 74.
    let o = drmas()
        .arg("check")
        .arg(&config)
        .stdout(full())
        .stderr(full())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(74));
}

/// Training with both streams on a full disk trains all its steps (its files are not
/// on that disk), then ends with 74.
#[test]
fn train_with_stdout_and_stderr_on_a_full_disk_trains_then_ends_with_74() {
    let dir = tempfile::tempdir().unwrap();
    let config = crate::sweep_cli::experiment(dir.path());
    let o = drmas()
        .arg("train")
        .arg(&config)
        .args(["--set", "trainer.steps=2"])
        .stdout(full())
        .stderr(full())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(74));
    let metrics = std::fs::read_to_string(dir.path().join("run/metrics.jsonl")).unwrap();
    assert_eq!(metrics.lines().count(), 2, "{metrics}");
    // Standard error alone (the progress and summary lines): 74 as well. Standard output
    // alone: train writes nothing there, so it succeeds, and says nothing of a panic.
    let run2 = dir.path().join("run2");
    let elsewhere = format!("experiment.output_dir={:?}", run2.display().to_string());
    let o = drmas()
        .arg("train")
        .arg(&config)
        .args(["--set", "trainer.steps=1", "--set", &elsewhere])
        .stderr(full())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(74));
    let run3 = dir.path().join("run3");
    let elsewhere = format!("experiment.output_dir={:?}", run3.display().to_string());
    let o = drmas()
        .arg("train")
        .arg(&config)
        .args(["--set", "trainer.steps=1", "--set", &elsewhere])
        .stdout(full())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

/// What a sweep keeps of a run's output when the log cannot be written: the lines still
/// pass through, the first error line is kept, and the log's failure is said.
#[test]
fn a_run_s_output_keeps_its_first_error_when_its_log_cannot_be_written() {
    use drmas::sweep::child_log::{ChildLog, is_error_line};
    use std::{io::Write, time::Duration};
    let (reader, mut writer) = std::io::pipe().unwrap();
    let log = ChildLog::start(reader, std::path::Path::new("/dev/full"));
    writer
        .write_all(b"step 1/2\nerror: writing checkpoint: No space left on device (os error 28)\nerror: a second one\nlast words\n")
        .unwrap();
    drop(writer);
    let said = log.finish(Duration::from_secs(60));
    assert_eq!(
        said.first_error.as_deref(),
        Some("error: writing checkpoint: No space left on device (os error 28)")
    );
    assert_eq!(said.last_line.as_deref(), Some("last words"));
    assert_eq!(
        said.log_error.as_deref(),
        Some("/dev/full: No space left on device (os error 28)")
    );
    assert_eq!(
        said.describe(),
        "first error: error: writing checkpoint: No space left on device (os error 28); its log could not be written: /dev/full: No space left on device (os error 28)"
    );
    assert!(is_error_line("thread 'main' panicked at src/x.rs:1:1:"));
    assert!(!is_error_line("step 3/5 (reward 0.5)"));
}

/// A sweep whose runs fail says each run's first error line in its summary, read from
/// the run's output (which the sweep copies to the log itself, so that a full disk
/// cannot hide it).
#[test]
fn a_sweep_summary_carries_each_failed_run_s_first_error_line() {
    let dir = tempfile::tempdir().unwrap();
    let config = crate::sweep_cli::experiment(dir.path());
    let sweep = dir.path().join("sweep.toml");
    let out = dir.path().join("sweep-out");
    std::fs::write(
        &sweep,
        format!(
            r#"[sweep]
name = "tiny"
base = {config:?}
output_dir = {out:?}
seeds = [1]
baseline = "grpo"

[sweep.set]
"trainer.steps" = 1

[[arms]]
name = "grpo"
set = {{ "normalizer.component" = "norms/grpo" }}

[[arms]]
name = "drmas"
set = {{ "normalizer.component" = "norms/drmas" }}
"#,
            config = config.display().to_string(),
            out = out.display().to_string(),
        ),
    )
    .unwrap();
    // A broken line in the train data passes the sweep's checks (they do not read the
    // data); each run's `drmas train` refuses it with an error line.
    let data = dir.path().join("tasks.jsonl");
    let mut tasks = std::fs::read_to_string(&data).unwrap();
    tasks.push_str("not json\n");
    std::fs::write(&data, tasks).unwrap();
    let o = drmas().arg("sweep").arg(&sweep).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    let line = err
        .lines()
        .find(|l| l.starts_with("failed: grpo seed 1"))
        .unwrap_or_else(|| panic!("no failed line in {err}"));
    assert!(
        line.contains(&format!(
            "drmas train exited with exit status: 1; first error: error: {}:7: not valid JSON",
            data.display()
        )),
        "{line}"
    );
    assert!(
        line.ends_with(&format!(
            "; see {}",
            out.join("logs/grpo-seed-1.log").display()
        )),
        "{line}"
    );
    assert!(
        err.contains("failed: drmas seed 1: drmas train exited"),
        "{err}"
    );
    let log = std::fs::read_to_string(out.join("logs/grpo-seed-1.log")).unwrap();
    let first = line
        .split("first error: ")
        .nth(1)
        .unwrap()
        .split("; see ")
        .next()
        .unwrap();
    assert!(log.contains(first), "{log}");
}
