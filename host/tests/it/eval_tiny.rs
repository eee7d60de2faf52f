//! A real `drmas eval` end to end: the math team on a tiny random chat model (made by
//! scripts/py/tiny_models.py) over 8 tasks; its numbers must be consistent.

use crate::common;

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
    let data_section = format!("val = [{{ path = {:?} }}]", data.display().to_string());
    std::fs::write(
        &config,
        tiny_team(&dir.path().join("run"), &model, &data_section),
    )
    .unwrap();
    let samples = dir.path().join("samples.jsonl");
    let out = Command::new(env!("CARGO_BIN_EXE_drmas"))
        .args(["eval"])
        .arg(&config)
        .args(["--k", "4", "--dump-ids", "--dump-samples"])
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

    // Every agent call is one line: its ids, what the episode made of it, and (with
    // --dump-ids) its token ids and log-probs.
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
    let tokenizer = drmas::model::TextTokenizer::from_dir(&model).unwrap();
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
        // The prompt text is what the ids are: the chat template's output, tokenized.
        let prompt = s["prompt"].as_str().unwrap();
        let ids: Vec<i64> = s["prompt_ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_i64().unwrap())
            .collect();
        assert_eq!(tokenizer.encode(prompt).unwrap(), ids, "{s}");
        let response: Vec<i64> = s["response_ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_i64().unwrap())
            .collect();
        assert_eq!(
            s["completion"].as_str().unwrap(),
            tokenizer.decode(&response, true).unwrap(),
            "{s}"
        );
        let agent = s["agent"].as_str().unwrap();
        assert!(["solver", "verifier"].contains(&agent), "{s}");
        assert_eq!(s["model"], format!("{agent}-lm"));
        let uid = s["uid"].as_str().unwrap();
        assert!(
            uid.starts_with("easy/t") || uid.starts_with("hard/t"),
            "{s}"
        );
        assert!(s["episode"].as_u64().unwrap() > 0);
        assert!(s["traj"].as_u64().unwrap() < 4);
        let action = s["action"]["type"].as_str().unwrap();
        assert!(["finish", "handoff", "invalid"].contains(&action), "{s}");
        // The verifier's verdict or the solver's answer; a note only when invalid.
        assert_eq!(s["valid"].as_bool().unwrap(), s["note"] == "", "{s}");
        assert_eq!(s["tool"], serde_json::Value::Null);
        let reward = s["rewards"]["math/boxed"].as_f64().unwrap();
        assert!(reward == 0.0 || reward == 1.0, "{s}");
        assert_eq!(s["team_reward"].as_f64().unwrap(), reward);
        assert!(
            ["stop_token", "stop_string", "length", "turn_limit"]
                .contains(&s["finish"].as_str().unwrap())
        );
        // score = team reward − 0.1 for an invalid sample
        let penalty = if s["valid"].as_bool().unwrap() {
            0.0
        } else {
            0.1
        };
        let score = s["score"].as_f64().unwrap();
        assert!((score - (reward - penalty)).abs() < 1e-6, "{s}");
        if s["final_answer"].is_null() {
            assert_eq!(reward, 0.0, "{s}");
        }
    }
}

/// A solver-only experiment on the tiny model over tasks t0..t5, with the fixture
/// reward `misbehave/flaky` (it panics on t0 and t3: a third of the episodes).
fn flaky_experiment(dir: &std::path::Path, max_failed: Option<f64>) -> std::path::PathBuf {
    misbehaving_experiment(dir, max_failed, "misbehave/flaky")
}

/// [`flaky_experiment`] with the fixture reward `reward` in place of the flaky one.
fn misbehaving_experiment(
    dir: &std::path::Path,
    max_failed: Option<f64>,
    reward: &str,
) -> std::path::PathBuf {
    let model = common::tiny_models().join("tiny-chat");
    let data = dir.join("tasks.jsonl");
    let rows: String = (0..6)
        .map(|i| format!("{{\"id\": \"t{i}\", \"source\": \"s\", \"question\": \"What is {i} + 1?\", \"answer\": \"{}\"}}\n", i + 1))
        .collect();
    std::fs::write(&data, rows).unwrap();
    let config = dir.join("exp.toml");
    let limit = max_failed
        .map(|m| format!("max_failed_episodes = {m}"))
        .unwrap_or_default();
    std::fs::write(
        &config,
        format!(
            r#"
[experiment]
name = "flaky"
output_dir = {out:?}
[[models]]
id = "lm"
path = {model:?}
[[agents]]
name = "solver"
component = "math/solver"
model = "lm"
sampling = {{ max_new_tokens = 6 }}
[agents.config]
verifier = ""
[workflow]
entry = "solver"
{limit}
[[rewards]]
component = "math/boxed"
[[rewards]]
component = {reward:?}
[normalizer]
component = "norms/grpo"
[data]
val = [{{ path = {data:?} }}]
[pool]
devices = ["cpu"]
"#,
            out = dir.join("run").display().to_string(),
            model = model.display().to_string(),
            data = data.display().to_string(),
        ),
    )
    .unwrap();
    config
}

/// `drmas eval CONFIG --k 2 --plugin-dir PLUGINS` and more arguments.
fn eval_with(
    config: &std::path::Path,
    plugins: &std::path::Path,
    more: &[&std::ffi::OsStr],
) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_drmas"))
        .args(["eval"])
        .arg(config)
        .args(["--k", "2", "--plugin-dir"])
        .arg(plugins)
        .args(more)
        .env_remove("DRMAS_PLUGIN_PATH")
        .output()
        .unwrap()
}

/// A plugin folder with a copy of the built `misbehave.so`.
fn misbehave_dir() -> tempfile::TempDir {
    let built = common::root().join("target/test-plugins/misbehave.so");
    assert!(
        built.exists(),
        "{} is missing: run scripts/build-test-plugins.sh (the test command does)",
        built.display()
    );
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(&built, dir.path().join("misbehave.so")).unwrap();
    dir
}

#[test]
fn an_eval_survives_a_plugin_that_panics_in_a_third_of_the_episodes() {
    let dir = tempfile::tempdir().unwrap();
    let plugins = misbehave_dir();
    let config = flaky_experiment(dir.path(), Some(0.5));
    let samples = dir.path().join("samples.jsonl");
    let out = Command::new(env!("CARGO_BIN_EXE_drmas"))
        .args(["eval"])
        .arg(&config)
        .args(["--k", "2", "--plugin-dir"])
        .arg(plugins.path())
        .arg("--dump-samples")
        .arg(&samples)
        .env_remove("DRMAS_PLUGIN_PATH")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let so = plugins.path().join("misbehave.so");
    let component = format!(
        "reward `misbehave/flaky` (misbehave 0.3.0, {})",
        so.display()
    );
    // One line per failed episode, naming the task and the component.
    let logged: Vec<&str> = stderr.lines().filter(|l| l.contains(" failed: ")).collect();
    assert_eq!(logged.len(), 4, "{stderr}");
    for l in &logged {
        let t = if l.contains("task s/t0 ") { "t0" } else { "t3" };
        assert!(
            l.ends_with(&format!(
                "failed: {component}: panicked: flaky reward exploded on task {t} (at tests/fixtures/misbehave/src/lib.rs:52:13)"
            )),
            "{l}"
        );
    }
    assert!(
        stdout.contains("failed: reward misbehave/flaky: 4 episodes"),
        "{stdout}"
    );

    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("run/eval.json")).unwrap())
            .unwrap();
    assert_eq!(report["episodes"], 12);
    assert_eq!(report["failed_episodes"], 4);
    let failures = report["failures"].as_object().unwrap();
    assert_eq!(
        failures.keys().collect::<Vec<_>>(),
        ["reward misbehave/flaky"]
    );
    let flaky = &failures["reward misbehave/flaky"];
    assert_eq!(flaky["episodes"], 4);
    let first = flaky["first_task"].as_str().unwrap();
    assert!(first == "s/t0" || first == "s/t3", "{flaky}");
    assert_eq!(
        flaky["first_error"],
        format!(
            "{component}: panicked: flaky reward exploded on task {} (at tests/fixtures/misbehave/src/lib.rs:52:13)",
            &first[2..]
        )
    );
    // The metrics are over the 8 completed episodes of the 4 tasks that completed.
    assert_eq!(report["overall"]["tasks"], 4);
    assert_eq!(report["overall"]["agents"]["solver"]["calls"], 8);

    let lines: Vec<serde_json::Value> = std::fs::read_to_string(&samples)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 12);
    let failed: Vec<&serde_json::Value> =
        lines.iter().filter(|l| l.get("failed").is_some()).collect();
    let mut failed_tasks: Vec<&str> = failed.iter().map(|l| l["task"].as_str().unwrap()).collect();
    failed_tasks.sort_unstable();
    assert_eq!(failed_tasks, ["t0", "t0", "t3", "t3"]);
    for l in &failed {
        assert_eq!(l["failed"]["component"], "reward misbehave/flaky");
        assert_eq!(
            l["failed"]["error"],
            format!(
                "{component}: panicked: flaky reward exploded on task {} (at tests/fixtures/misbehave/src/lib.rs:52:13)",
                l["task"].as_str().unwrap()
            )
        );
    }
    for l in lines.iter().filter(|l| l.get("failed").is_none()) {
        // Both rewards by name; the flaky one scores 0 where it does not panic.
        assert_eq!(l["rewards"]["misbehave/flaky"], 0.0, "{l}");
        assert!(l["prompt"].as_str().unwrap().contains("What is"), "{l}");
        // No ids without --dump-ids.
        assert!(
            l.get("prompt_ids").is_none() && l.get("logprobs").is_none(),
            "{l}"
        );
    }
}

#[test]
fn an_eval_over_the_failure_limit_stops_with_the_limit_named() {
    let dir = tempfile::tempdir().unwrap();
    let plugins = misbehave_dir();
    let config = flaky_experiment(dir.path(), None);
    // An earlier run's report and dump at the paths this run writes.
    let report = dir.path().join("run/eval.json");
    let samples = dir.path().join("samples.jsonl");
    std::fs::create_dir_all(report.parent().unwrap()).unwrap();
    std::fs::write(&report, "{\"earlier\": true}").unwrap();
    std::fs::write(&samples, "{\"earlier\": true}\n").unwrap();
    let out = eval_with(
        &config,
        plugins.path(),
        &["--dump-samples".as_ref(), samples.as_os_str()],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    let last = stderr.lines().last().unwrap();
    assert!(last.starts_with("error: evaluation stopped: "), "{stderr}");
    // 12 episodes at the default 0.05: the first failure is over the limit (others that
    // ended at the same moment may be counted with it).
    assert!(
        last.contains(" of 12 episodes failed, more than [workflow] max_failed_episodes = 0.05 allows; reward misbehave/flaky: "),
        "{last}"
    );
    assert!(last.contains("(first, task s/t"), "{last}");
    assert!(
        last.contains("panicked: flaky reward exploded on task t"),
        "{last}"
    );
    // Nothing at the report's and the dump's paths: the earlier run's files were set
    // aside, named stale, before this run started, and are still there to compare.
    assert!(!report.exists() && !samples.exists(), "{stderr}");
    for (path, stale) in [
        (&report, dir.path().join("run/eval.json.stale")),
        (&samples, dir.path().join("samples.jsonl.stale")),
    ] {
        assert_eq!(
            std::fs::read_to_string(&stale).unwrap().trim_end(),
            "{\"earlier\": true}"
        );
        let note = format!(
            "note: {} is from an earlier run; moved to {} (this run writes {} only when it \
             completes)",
            path.display(),
            stale.display(),
            path.display()
        );
        assert_eq!(stderr.matches(&note).count(), 1, "{stderr}");
    }
}

#[test]
fn a_completed_eval_replaces_the_earlier_report_and_leaves_no_stale_copy() {
    let dir = tempfile::tempdir().unwrap();
    let plugins = misbehave_dir();
    let config = flaky_experiment(dir.path(), Some(0.5));
    let report = dir.path().join("run/eval.json");
    std::fs::create_dir_all(report.parent().unwrap()).unwrap();
    std::fs::write(&report, "{\"earlier\": true}").unwrap();
    let out = eval_with(&config, plugins.path(), &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let new: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert_eq!(new["episodes"], 12, "{new}");
    assert!(new.get("earlier").is_none());
    assert!(!dir.path().join("run/eval.json.stale").exists(), "{stderr}");
}

#[test]
fn an_infinite_reward_stops_the_eval_naming_the_reward_the_episode_and_why() {
    let dir = tempfile::tempdir().unwrap();
    let plugins = misbehave_dir();
    let so = plugins.path().join("misbehave.so");
    let reward = format!("reward `misbehave/inf` (misbehave 0.3.0, {})", so.display());
    // Every episode scores +inf: past the default limit the run stops...
    let config = misbehaving_experiment(dir.path(), None, "misbehave/inf");
    let out = eval_with(&config, plugins.path(), &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    let last = stderr.lines().last().unwrap();
    assert!(last.starts_with("error: evaluation stopped: "), "{stderr}");
    assert!(
        last.contains(" of 12 episodes failed, more than [workflow] max_failed_episodes = 0.05 allows; reward misbehave/inf: "),
        "{last}"
    );
    let cause = format!("{reward} returned inf as the score of episode ");
    assert!(
        last.contains("(first, task s/t") && last.contains(&cause),
        "{last}"
    );
    assert!(
        last.ends_with("; a score must be finite, so the episode failed)"),
        "{last}"
    );

    // ...and with no limit, every episode failed: nothing to report, and it says so.
    let config = misbehaving_experiment(dir.path(), Some(1.0), "misbehave/inf");
    let out = eval_with(&config, plugins.path(), &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    let last = stderr.lines().last().unwrap();
    assert!(
        last.starts_with(&format!(
            "error: evaluation stopped: all 12 episodes failed, so there is nothing to report; \
             the first, task s/t0: {cause}"
        )),
        "{last}"
    );
    assert!(
        last.ends_with(" (task s/t0); a score must be finite, so the episode failed"),
        "{last}"
    );
    assert!(!dir.path().join("run/eval.json").exists());
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

/// The math team on the tiny chat model, its output in `out`, with this `[data]` body.
fn tiny_team(out: &std::path::Path, model: &std::path::Path, data_section: &str) -> String {
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
{data_section}

[pool]
devices = ["cpu"]
"#,
        out = out.display().to_string(),
        model = model.display().to_string(),
    )
}

#[test]
fn the_gate_runs_the_train_set_with_each_agents_own_sampling() {
    let model = common::tiny_models().join("tiny-chat");
    let dir = tempfile::tempdir().unwrap();
    let train = dir.path().join("train.jsonl");
    let rows: String = (0..6)
        .map(|i| format!("{{\"id\": \"t{i}\", \"source\": \"drill\", \"question\": \"What is {i} + 2?\", \"answer\": \"{}\"}}\n", i + 2))
        .collect();
    std::fs::write(&train, rows).unwrap();
    let config = dir.path().join("exp.toml");
    let data_section = format!("train = {{ path = {:?} }}", train.display().to_string());
    std::fs::write(
        &config,
        tiny_team(&dir.path().join("run"), &model, &data_section),
    )
    .unwrap();
    let eval = |extra: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_drmas"))
            .arg("eval")
            .arg(&config)
            .args(extra)
            .env_remove("DRMAS_PLUGIN_PATH")
            .output()
            .unwrap()
    };
    // No val sets: a plain evaluation has nothing to run on, the gate has.
    let out = eval(&[]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("the experiment has no [data] val sets to evaluate on"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = eval(&["--train", "--agent-sampling", "--limit", "3", "--k", "2"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("run/eval.json")).unwrap())
            .unwrap();
    assert_eq!(report["split"], "train");
    assert_eq!(report["agent_sampling"], true);
    assert_eq!(report["episodes"], 6);
    assert_eq!(report["overall"]["tasks"], 3);
    let sources: Vec<&String> = report["sources"].as_object().unwrap().keys().collect();
    assert_eq!(sources, ["drill"]);
    // math/env's numbers about the solver are there whatever the verifier wrote.
    let metrics = report["overall"]["metrics"].as_object().unwrap();
    assert!(metrics.contains_key("solver_attempts"), "{metrics:?}");
    // One temperature for all and each agent's own cannot both hold.
    let out = eval(&["--train", "--agent-sampling", "--temperature", "0.5"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(
            "the argument '--agent-sampling' cannot be used with '--temperature <TEMPERATURE>'"
        ),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Without a train set, --train says so before any model is loaded.
    let config2 = dir.path().join("val-only.toml");
    let data_section = format!("val = [{{ path = {:?} }}]", train.display().to_string());
    std::fs::write(
        &config2,
        tiny_team(&dir.path().join("run2"), &model, &data_section),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_drmas"))
        .arg("eval")
        .arg(&config2)
        .arg("--train")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim(),
        format!(
            "error: {}: the experiment has no [data] train set to evaluate on (--train)",
            config2.display()
        )
    );
}
