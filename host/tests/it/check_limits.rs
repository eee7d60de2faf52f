//! What `drmas check` (and so `train`) refuses before anything is allocated or written,
//! beyond the schema: counts that size a step past the machine's memory, a run folder
//! that is empty, unwritable or inside what the run reads; and what it only warns
//! about. Then the inputs that used to be fully processed before being measured. Every
//! message is asserted whole, with its `line:col`.

use crate::common;
use std::{
    path::{Path, PathBuf},
    process::{Command, Output},
};

/// The shared solver experiment with `top` (`[experiment]` lines; empty: the default
/// output folder), `trainer` lines and `tasks`.
fn experiment(dir: &Path, top: &str, trainer: &str, tasks: &str) -> PathBuf {
    common::solver::SolverExperiment {
        top: (!top.is_empty()).then(|| top.to_string()),
        trainer: trainer.to_string(),
        tasks: tasks.to_string(),
        ..Default::default()
    }
    .write(dir)
}

const TASKS: &str = "{\"id\": \"t1\", \"question\": \"What is 1 + 1?\", \"answer\": \"2\"}\n";

fn drmas(args: &[&std::ffi::OsStr]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_drmas"))
        .env_remove("DRMAS_PLUGIN_PATH")
        .args(args)
        .output()
        .unwrap()
}

fn check(config: &Path) -> Output {
    drmas(&["check".as_ref(), config.as_os_str()])
}

/// Standard error without the placement table and the summary lines `check` prints.
fn lines_of(out: &Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stderr)
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn counts_that_size_a_step_beyond_memory_are_refused_at_their_key() {
    let dir = tempfile::tempdir().unwrap();
    let c = experiment(
        dir.path(),
        "",
        "prompts_per_step = 4294967295\ngroup_size = 2\neval_every = 1\neval_k = 100000000",
        TASKS,
    );
    let out = check(&c);
    assert!(!out.status.success());
    let errors = lines_of(&out);
    let c = c.display();
    assert_eq!(errors.len(), 2, "{errors:?}");
    // The numbers depend on the machine; the start and the advice do not.
    assert!(
        errors[0].starts_with(&format!(
            "{c}:24:20: trainer.prompts_per_step: prompts_per_step × group_size = 4294967295 × 2 = 8589934590 episodes a step hold at least "
        )) && errors[0].contains(" GiB in host memory before anything is generated; MemAvailable is ")
            && errors[0].ends_with(" GiB: lower prompts_per_step"),
        "{}",
        errors[0]
    );
    assert!(
        errors[1].starts_with(&format!(
            "{c}:27:10: trainer.eval_k: 100000000 samples of each task of 1 validation set(s) hold at least "
        )) && errors[1].ends_with(" GiB: lower eval_k"),
        "{}",
        errors[1]
    );
    // The larger factor is blamed.
    let c2 = experiment(
        dir.path(),
        "",
        "prompts_per_step = 2\ngroup_size = 4294967295",
        TASKS,
    );
    let second = lines_of(&check(&c2));
    assert!(
        second[0].contains(":25:14: trainer.group_size: ")
            && second[0].ends_with("lower group_size"),
        "{second:?}"
    );
}

#[test]
fn the_run_folder_is_named_writable_and_apart_from_the_inputs() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let tiny = common::tiny_models().join("tiny-chat");
    let cases = [
        (
            "output_dir = \"\"".to_string(),
            "3:14: experiment.output_dir: an empty path would put the run in the current folder: name a folder, or leave the key out for runs/<name>".to_string(),
        ),
        (
            "output_dir = \"/proc/drmas-run\"".to_string(),
            "3:14: experiment.output_dir: output folder /proc/drmas-run: cannot be created: cannot write into /proc: No such file or directory (os error 2)".to_string(),
        ),
        (
            format!("output_dir = {:?}", tiny.join("run").display().to_string()),
            format!(
                "3:14: experiment.output_dir: output folder {}: is inside model `lm`'s folder (models[0].path) {}, which this command reads; write somewhere else",
                tiny.join("run").display(),
                tiny.display()
            ),
        ),
        (
            format!("output_dir = {:?}", d.display().to_string()),
            format!(
                "3:14: experiment.output_dir: output folder {}: holds the experiment {}, which this command reads; write somewhere else",
                d.display(),
                d.join("exp.toml").display()
            ),
        ),
    ];
    for (top, want) in cases {
        let c = experiment(d, &top, "", TASKS);
        let out = check(&c);
        assert!(!out.status.success(), "{top}");
        assert_eq!(lines_of(&out), [format!("{}:{want}", c.display())], "{top}");
    }
    assert!(!tiny.join("run").exists());
}

#[test]
fn a_micro_batch_budget_of_one_row_is_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    let c = experiment(dir.path(), "", "micro_batch_tokens = 3", TASKS);
    let out = check(&c);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        lines_of(&out),
        [format!(
            "warning: {}:24:22: trainer.micro_batch_tokens: 3 tokens cannot hold two full-length responses of agent `solver` (max_new_tokens = 2, before its prompt): most micro-batches will be a single row, which trains slowly; a budget of several rows (e.g. 8192) is usual",
            c.display()
        )]
    );
}

/// A 10 MB question used to be tokenised in full (a minute, gigabytes) before the
/// context check refused it: it is refused by its length in bytes, at once.
#[test]
fn a_text_longer_than_any_context_is_refused_before_tokenizing() {
    let dir = tempfile::tempdir().unwrap();
    let question = format!("What is {}1?", "1+".repeat(5_000_000));
    let tasks = format!(
        "{}\n",
        serde_json::json!({"id": "big", "question": question, "answer": "2"})
    );
    let c = experiment(dir.path(), "", "", &tasks);
    let out = drmas(&["eval".as_ref(), c.as_os_str(), "--k".as_ref(), "1".as_ref()]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("model `lm`: the rendered prompt is 10000161 bytes, more than 4096 tokens of at most 26 bytes each can hold (the model's context, max_position_embeddings): refused before tokenizing"),
        "{stderr}"
    );
}

#[test]
fn a_shadow_normalizer_is_checked_like_the_normalizer() {
    let dir = tempfile::tempdir().unwrap();
    for (line, want) in [
        (
            "shadow_normalizer = \"norms/nope\"",
            "24:21: trainer.shadow_normalizer.component: plugin `norms` 0.1.0 has no normalizer `nope`",
        ),
        (
            "shadow_normalizer = 3",
            "24:21: trainer.shadow_normalizer: expected a normalizer's name (\"norms/grpo\") or a table { component = \"...\", config = { ... } }",
        ),
    ] {
        let c = experiment(dir.path(), "", line, TASKS);
        let out = check(&c);
        assert!(!out.status.success(), "{line}");
        let got = lines_of(&out);
        assert!(
            got.len() == 1 && got[0].starts_with(&format!("{}:{want}", c.display())),
            "{line}: {got:?}"
        );
    }
    let c = experiment(
        dir.path(),
        "",
        "shadow_normalizer = { component = \"norms/grpo\", config = { epsilon = 1e-4 } }",
        TASKS,
    );
    let out = check(&c);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout)
            .contains("trainer.shadow_normalizer normalizer: norms/grpo"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}
