//! `drmas score REWARD FILE.jsonl`: rewards audited without a model, built-in and from
//! a plugin folder; bad lines named by their line number.

use std::{path::Path, process::Command};

fn score(args: &[&std::ffi::OsStr]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_drmas"))
        .arg("score")
        .args(args)
        .env_remove("DRMAS_PLUGIN_PATH")
        .output()
        .unwrap()
}

const LINES: &str = r#"{"id": "half", "completion": "so the answer is \\boxed{\\frac{1}{2}}", "answer": "0.5"}
{"id": 7, "completion": "\\boxed{5\\text{ or 7}}", "answer": "5"}

{"id": "units", "completion": "\\boxed{\\text{247 classes}}", "answer": "247", "question": "How many?", "meta": {"k": 1}}
"#;

#[test]
fn scores_each_line_in_order_with_a_built_in_reward() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.jsonl");
    std::fs::write(&input, LINES).unwrap();
    let out = score(&["math/boxed".as_ref(), input.as_os_str()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "{\"id\":\"half\",\"score\":1.0}\n{\"id\":7,\"score\":0.0}\n{\"id\":\"units\",\"score\":1.0}\n"
    );
    // To a file, whole.
    let file = dir.path().join("scores/out.jsonl");
    let out = score(&[
        "math/boxed".as_ref(),
        input.as_os_str(),
        "--out".as_ref(),
        file.as_os_str(),
    ]);
    assert!(out.status.success());
    assert_eq!(std::fs::read_to_string(&file).unwrap().lines().count(), 3);
}

#[test]
fn a_reward_from_a_plugin_folder_scores_too() {
    let plugins = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/test-plugins");
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(plugins.join("good.so"), dir.path().join("good.so")).unwrap();
    let input = dir.path().join("in.jsonl");
    std::fs::write(
        &input,
        "{\"id\": 1, \"completion\": \"Paris\", \"answer\": \"Paris\"}\n{\"id\": 2, \"completion\": \"Lyon\", \"answer\": \"Paris\"}\n",
    )
    .unwrap();
    let out = score(&[
        "good/exact".as_ref(),
        input.as_os_str(),
        "--plugin-dir".as_ref(),
        dir.path().as_os_str(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "{\"id\":1,\"score\":1.0}\n{\"id\":2,\"score\":0.0}\n"
    );
}

#[test]
fn bad_lines_and_names_are_refused_with_their_place() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.jsonl");
    let first = LINES.lines().next().unwrap();
    std::fs::write(
        &input,
        format!("{first}\n{{\"id\": 2, \"completion\": \"x\"}}\n"),
    )
    .unwrap();
    let err = |args: &[&std::ffi::OsStr]| {
        let out = score(args);
        assert!(!out.status.success());
        assert!(
            out.stdout.is_empty(),
            "nothing is written when a line fails"
        );
        String::from_utf8_lossy(&out.stderr).trim().to_string()
    };
    assert_eq!(
        err(&["math/boxed".as_ref(), input.as_os_str()]),
        format!(
            "error: {}:2: missing field `answer` at line 1 column 28",
            input.display()
        )
    );
    assert_eq!(
        err(&["math/nope".as_ref(), input.as_os_str()]),
        "error: plugin `math` 0.1.0 has no reward `nope` (its rewards: boxed, gsm8k, verdict)"
    );
    assert_eq!(
        err(&[
            "math/boxed".as_ref(),
            input.as_os_str(),
            "--config".as_ref(),
            "x = 1".as_ref()
        ]),
        "error: reward `math/boxed` refused its config: unknown field `x`, expected `fallback_to_earlier` (at `x`)"
    );
    let missing = dir.path().join("missing.jsonl");
    assert_eq!(
        err(&["math/boxed".as_ref(), missing.as_os_str()]),
        format!(
            "error: reading {}: No such file or directory (os error 2)",
            missing.display()
        )
    );
}
