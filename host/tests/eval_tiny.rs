//! A real `drmas eval` end to end: the math team on a tiny random chat model (made by
//! scripts/py/tiny_models.py) over 8 tasks; its numbers must be consistent.

mod common;

use std::process::Command;

#[test]
fn eval_on_the_tiny_model_completes_with_consistent_numbers() {
    let model = common::tiny_models().join("tiny-chat");
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("tasks.jsonl");
    let rows: String = (0..8)
        .map(|i| format!("{{\"id\": \"t{i}\", \"source\": \"{}\", \"question\": \"What is {i} + 1?\", \"answer\": \"{}\"}}\n", if i < 4 { "easy" } else { "hard" }, i + 1))
        .collect();
    std::fs::write(&data, rows).unwrap();
    let config = dir.path().join("exp.toml");
    std::fs::write(
        &config,
        format!(
            r#"
[experiment]
name = "tiny-eval"
output_dir = {out:?}

[[models]]
id = "solver-lm"
path = {model:?}

[[models]]
id = "verifier-lm"
path = {model:?}

[[agents]]
name = "solver"
component = "math/solver"
model = "solver-lm"
sampling = {{ max_new_tokens = 12 }}

[[agents]]
name = "verifier"
component = "math/verifier"
model = "verifier-lm"
sampling = {{ max_new_tokens = 6 }}

[workflow]
entry = "solver"
max_turns = 4
max_loops = 1

[environment]
component = "math/env"

[[rewards]]
component = "math/boxed"

[normalizer]
component = "norms/drmas"

[data]
val = [{{ path = {data:?} }}]

[pool]
devices = ["cpu"]
"#,
            out = dir.path().join("run").display().to_string(),
            model = model.display().to_string(),
            data = data.display().to_string(),
        ),
    )
    .unwrap();
    let samples = dir.path().join("samples.jsonl");
    let out = Command::new(env!("CARGO_BIN_EXE_drmas"))
        .args(["eval"])
        .arg(&config)
        .args(["--k", "4", "--dump-samples"])
        .arg(&samples)
        .env_remove("DRMAS_PLUGIN_PATH")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("overall"), "{stdout}");

    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("run/eval.json")).unwrap())
            .unwrap();
    assert_eq!(report["episodes"], 32);
    assert_eq!(report["failed_episodes"], 0);
    assert_eq!(report["overall"]["tasks"], 8);
    for scope in [
        &report["overall"],
        &report["sources"]["easy"],
        &report["sources"]["hard"],
    ] {
        let avg = scope["avg_at_k"].as_f64().unwrap();
        let any = scope["pass_at_k"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&avg) && avg <= any, "{scope}");
        let unbiased = scope["pass_at_unbiased"].as_object().unwrap();
        assert_eq!(unbiased.keys().collect::<Vec<_>>(), ["1", "2", "4"]);
        assert!(
            (unbiased["1"].as_f64().unwrap() - avg).abs() < 1e-9,
            "pass@1 equals avg@k: {scope}"
        );
        assert!(
            unbiased
                .values()
                .all(|v| v.as_f64().unwrap() <= any + 1e-12),
            "{scope}"
        );
        assert!(scope["mean_turns"].as_f64().unwrap() >= 1.0);
    }
    assert_eq!(report["sources"]["easy"]["tasks"], 4);

    // Every agent call is a sample with its ids, log-probs and score.
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(&samples)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let solver_calls = report["overall"]["agents"]["solver"]["calls"]
        .as_u64()
        .unwrap();
    let verifier_calls = report["overall"]["agents"]["verifier"]["calls"]
        .as_u64()
        .unwrap();
    assert_eq!(lines.len() as u64, solver_calls + verifier_calls);
    assert!(solver_calls >= 32);
    for s in &lines {
        let n = s["response_ids"].as_array().unwrap().len();
        assert!(n > 0 && n == s["logprobs"].as_array().unwrap().len());
        assert!(
            s["logprobs"]
                .as_array()
                .unwrap()
                .iter()
                .all(|l| l.as_f64().unwrap() <= 0.0)
        );
        // score = team reward (0 or 1) − 0.1 for an invalid sample
        let penalty = if s["valid"].as_bool().unwrap() {
            0.0
        } else {
            0.1
        };
        let score = s["score"].as_f64().unwrap();
        assert!(
            [0.0 - penalty, 1.0 - penalty]
                .iter()
                .any(|v| (score - v).abs() < 1e-6),
            "{s}"
        );
    }
}

fn eval_error(config_text: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("exp.toml");
    std::fs::write(&config, config_text).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_drmas"))
        .args(["eval"])
        .arg(&config)
        .args(["--k", "1"])
        .env_remove("DRMAS_PLUGIN_PATH")
        .output()
        .unwrap();
    assert!(!out.status.success());
    String::from_utf8_lossy(&out.stderr)
        .trim_end()
        .replace(&config.display().to_string(), "CONFIG")
}

const SOLVER_ONLY: &str = r#"
[experiment]
name = "bad"
[[models]]
id = "lm"
path = "MODEL"
[[agents]]
name = "solver"
component = "math/solver"
model = "lm"
sampling = { max_new_tokens = 8 }
[agents.config]
verifier = ""
[workflow]
entry = "solver"
[[rewards]]
component = "math/boxed"
[normalizer]
component = "norms/grpo"
"#;

#[test]
fn eval_without_validation_data_says_so() {
    let model = common::tiny_models().join("tiny-chat");
    let text = SOLVER_ONLY.replace("MODEL", &model.display().to_string());
    assert_eq!(
        eval_error(&text),
        "error: CONFIG: the experiment has no [data] val sets to evaluate on"
    );
}

#[test]
fn eval_with_a_missing_model_folder_points_at_its_path() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("t.jsonl");
    std::fs::write(
        &data,
        "{\"id\": \"a\", \"question\": \"1+1?\", \"answer\": \"2\"}\n",
    )
    .unwrap();
    let text = SOLVER_ONLY.replace("MODEL", "/nonexistent/model")
        + &format!(
            "[data]\nval = [{{ path = {:?} }}]\n",
            data.display().to_string()
        );
    assert_eq!(
        eval_error(&text),
        "CONFIG:6:8: models[0].path: model folder /nonexistent/model does not exist (see `drmas model import` and docs/models.md)"
    );
}

#[test]
fn generate_with_a_folder_that_is_not_a_checkpoint_fails_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_drmas"))
        .args(["generate", "--model"])
        .arg(dir.path())
        .args(["--prompt", "hi", "--device", "cpu"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim_end(),
        format!(
            "error: {}/tokenizer.json: No such file or directory (os error 2)",
            dir.path().display()
        )
    );
}
