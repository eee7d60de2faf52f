//! `remote/openenv` through the real binary against real OpenEnv servers: openenv-core's
//! own server (pinned in .venv-openenv) serving a small environment written for these
//! tests (tests/fixtures/openenv/echo_env.py) and the Countdown example, played by the
//! tiny chat model. Each server is a process group of the test's, stopped on drop.

use crate::common::process::{Group, processes_with_env, wait_until};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

fn root() -> PathBuf {
    crate::common::root()
}

fn python() -> PathBuf {
    let p = root().join(".venv-openenv/bin/python");
    assert!(
        p.exists(),
        "no {}: run scripts/setup.sh --openenv (the test command does)",
        p.display()
    );
    p
}

fn free_port() -> u16 {
    drmas::engine::free_port().unwrap()
}

/// A server the test started; killed with its group when dropped.
struct Server {
    // Held for its drop, which kills the server.
    _group: Group,
    port: u16,
    trace: PathBuf,
}

impl Server {
    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The lines of its trace so far.
    fn trace(&self) -> Vec<String> {
        std::fs::read_to_string(&self.trace)
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }
}

fn healthy(port: u16) -> bool {
    ureq::get(&format!("http://127.0.0.1:{port}/health"))
        .call()
        .is_ok()
}

/// `script` (a fixture of tests/fixtures/openenv) on `port`, ready.
fn serve_on(script: &str, port: u16, dir: &Path, args: &[&str]) -> Server {
    let trace = dir.join(format!("trace-{port}.txt"));
    let log = std::fs::File::create(dir.join(format!("server-{port}.log"))).unwrap();
    let mut command = Command::new(python());
    command
        .arg(root().join("tests/fixtures/openenv").join(script))
        .args(["--port", &port.to_string()])
        .args(args)
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log);
    if script == "echo_env.py" {
        command.arg("--trace").arg(&trace);
    }
    let mut group = Group::spawn(&mut command);
    wait_until(
        &format!("{script} on port {port}"),
        Duration::from_millis(100),
        || {
            assert!(
                group.child_mut().try_wait().unwrap().is_none(),
                "{script} exited: {}",
                std::fs::read_to_string(dir.join(format!("server-{port}.log"))).unwrap_or_default()
            );
            healthy(port)
        },
    );
    Server {
        _group: group,
        port,
        trace,
    }
}

fn echo(dir: &Path, args: &[&str]) -> Server {
    serve_on("echo_env.py", free_port(), dir, args)
}

/// Four tasks of the echo environment, as a data file.
fn tasks(dir: &Path) -> PathBuf {
    let path = dir.join("tasks.jsonl");
    let rows: String = (0..4)
        .map(|i| format!("{{\"id\":\"t{i}\",\"question\":\"Say something.\",\"answer\":\"x\"}}\n"))
        .collect();
    std::fs::write(&path, rows).unwrap();
    path
}

/// A planner and an actor on the tiny chat model, playing the echo environment at
/// `url` (`environment` replaces the `[environment.config]` lines when given).
fn experiment(dir: &Path, environment: &str) -> PathBuf {
    let model = root().join("target/tiny-models/tiny-chat");
    let data = tasks(dir);
    let text = format!(
        r#"[experiment]
name = "echo"
seed = 3
output_dir = {out:?}

[[models]]
id = "lm"
path = {model:?}

[[agents]]
name = "planner"
component = "remote/agent"
model = "lm"
sampling = {{ temperature = 1.0, max_new_tokens = 6 }}
config = {{ user_template = "{{question}}", handoff_to = "actor" }}

[[agents]]
name = "actor"
component = "remote/agent"
model = "lm"
sampling = {{ temperature = 1.0, max_new_tokens = 6 }}
config = {{ user_template = "{{question}}", tag = "" }}

[workflow]
entry = "planner"
max_turns = 8
max_loops = 4
max_failed_episodes = 0.5

[environment]
component = "remote/openenv"
tool_timeout_s = 30

[environment.config]
{environment}
action_field = "text"
observation_field = "message"

[[rewards]]
component = "remote/env-reward"
config = {{ per_turn = true }}

[normalizer]
component = "norms/drmas"

[data]
train = {{ path = {data:?} }}
val = [{{ path = {data:?} }}]

[trainer]
steps = 2
prompts_per_step = 2
group_size = 2

[pool]
devices = ["cpu"]
"#,
        out = dir.join("run").display().to_string(),
        model = model.display().to_string(),
        data = data.display().to_string(),
    );
    let path = dir.join("experiment.toml");
    std::fs::write(&path, text).unwrap();
    path
}

fn drmas(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_drmas"))
        .args(args)
        .current_dir(dir)
        .env_remove("DRMAS_PLUGIN_PATH")
        .output()
        .unwrap()
}

fn show(out: &Output) -> String {
    format!(
        "status {}\n--- stdout\n{}\n--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn an_evaluation_plays_the_server_and_scores_its_rewards() {
    let dir = tempfile::tempdir().unwrap();
    let server = echo(dir.path(), &["--steps", "2"]);
    let config = experiment(
        dir.path(),
        &format!("url = {:?}\nmax_sessions = 3", server.url()),
    );
    let dump = dir.path().join("samples.jsonl");
    let out = drmas(
        dir.path(),
        &[
            "eval",
            config.to_str().unwrap(),
            "--k",
            "2",
            "--dump-samples",
            dump.to_str().unwrap(),
        ],
    );
    assert!(out.status.success(), "{}", show(&out));
    assert!(
        show(&out).contains("8 episodes (0 failed)"),
        "{}",
        show(&out)
    );
    // Every episode reset the server with its task, and a group shares its seed.
    let trace = server.trace();
    let resets: Vec<&String> = trace.iter().filter(|l| l.starts_with("reset ")).collect();
    assert_eq!(resets.len(), 8, "{trace:?}");
    for task in ["t0", "t1", "t2", "t3"] {
        let seeds: Vec<&str> = resets
            .iter()
            .filter(|l| l.split(' ').nth(1) == Some(task))
            .map(|l| l.split(' ').nth(2).unwrap())
            .collect();
        assert_eq!(seeds.len(), 2, "{task}: {trace:?}");
        assert_eq!(seeds[0], seeds[1], "{task}: {trace:?}");
    }
    // Each actor sample is scored with the reward the server gave its own step, and
    // the observation of a step is what the next agent reads.
    let samples = lines(&dump);
    let actors: Vec<&Value> = samples.iter().filter(|s| s["agent"] == "actor").collect();
    assert!(!actors.is_empty(), "{samples:?}");
    let mut stepped = 0;
    for s in &actors {
        let text = s["completion"].as_str().unwrap().trim();
        if text.is_empty() {
            continue; // an empty completion is invalid: no step
        }
        stepped += 1;
        let want = (text.chars().count() % 5) as f64 / 4.0;
        let score = s["score"].as_f64().unwrap();
        assert!((score - want).abs() < 1e-6, "{s}: want {want}");
    }
    assert!(
        stepped > 0,
        "no actor completion was an action: {samples:?}"
    );
    let observed = samples
        .iter()
        .filter(|s| {
            s["prompt"]
                .as_str()
                .unwrap_or("")
                .contains("Observation: step 1: ")
        })
        .count();
    assert!(observed > 0, "no prompt shows an observation: {samples:?}");
    // Planner turns call no tool: their per-turn reward is 0.
    for s in samples.iter().filter(|s| s["agent"] == "planner") {
        assert_eq!(s["score"].as_f64().unwrap(), 0.0, "{s}");
    }
}

#[test]
fn two_training_steps_on_a_server_drmas_starts_and_stops() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("trace.txt");
    let log = dir.path().join("server.log");
    let command = format!(
        "command = [{:?}, {:?}, \"--port\", \"{{port}}\", \"--trace\", {:?}]\nlog = {:?}\nmax_sessions = 4",
        python().display().to_string(),
        root()
            .join("tests/fixtures/openenv/echo_env.py")
            .display()
            .to_string(),
        trace.display().to_string(),
        log.display().to_string(),
    );
    let config = experiment(dir.path(), &command);
    // Every process the run starts carries this mark in its environment.
    let mark = format!("DRMAS_OPENENV_TEST={}", dir.path().display());
    let out = Command::new(env!("CARGO_BIN_EXE_drmas"))
        .args(["train", config.to_str().unwrap()])
        .current_dir(dir.path())
        .env("DRMAS_OPENENV_TEST", dir.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", show(&out));
    let metrics = lines(&dir.path().join("run/metrics.jsonl"));
    assert_eq!(metrics.len(), 2, "{metrics:?}");
    for m in &metrics {
        assert_eq!(m["failed_episodes"].as_u64(), Some(0), "{m}");
    }
    // 2 steps × 2 tasks × 2 trajectories reset the server drmas started...
    let resets = std::fs::read_to_string(&trace)
        .unwrap()
        .lines()
        .filter(|l| l.starts_with("reset "))
        .count();
    assert_eq!(resets, 8);
    // ...and it is gone with the run.
    let left = processes_with_env(&mark);
    assert!(
        left.is_empty(),
        "the environment server outlived the run: {left:?}"
    );
}

#[test]
fn check_online_reads_the_schema_and_the_session_limit() {
    let dir = tempfile::tempdir().unwrap();
    let server = echo(dir.path(), &["--max-sessions", "2"]);
    let config = experiment(
        dir.path(),
        &format!("url = {:?}\nmax_sessions = 2", server.url()),
    );
    let path = config.to_str().unwrap();
    // Offline: nothing is contacted.
    let out = drmas(dir.path(), &["check", path]);
    assert!(out.status.success(), "{}", show(&out));
    assert!(!String::from_utf8_lossy(&out.stdout).contains("online:"));
    let out = drmas(dir.path(), &["check", path, "--online"]);
    assert!(out.status.success(), "{}", show(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    for line in [
        format!("  online: {}: healthy", server.url()),
        "  online: action: EchoAction {metadata, text (required)}, its `text` the agent's text"
            .to_string(),
        "  online: 2 sessions open at once: ok".to_string(),
    ] {
        assert!(stdout.contains(&line), "{line}\n{}", show(&out));
    }
    // An action field the server's action does not have: refused before any model loads.
    let out = drmas(
        dir.path(),
        &[
            "check",
            path,
            "--online",
            "--set",
            "environment.config.action_field=\"answer\"",
        ],
    );
    assert!(!out.status.success(), "{}", show(&out));
    let want = format!("{path}: environment `remote/openenv` (remote 0.1.0, built-in): ");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.starts_with(&want), "{}", show(&out));
    assert!(
        stderr.contains(&format!(
            "{}/schema: action_field = \"answer\", but the server's action (EchoAction) has no field `answer`; its fields: metadata, text (required)",
            server.url()
        )),
        "{}",
        show(&out)
    );
    // More sessions than the server allows.
    let out = drmas(
        dir.path(),
        &[
            "check",
            path,
            "--online",
            "--set",
            "environment.config.max_sessions=3",
        ],
    );
    assert!(!out.status.success(), "{}", show(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(&format!(
            "max_sessions = 3: {} refused session 3",
            server.url()
        )),
        "{}",
        show(&out)
    );
}

#[test]
fn a_server_killed_mid_episode_fails_its_episodes_and_the_run_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let first = serve_on("echo_env.py", port, dir.path(), &["--steps", "3"]);
    let config = experiment(
        dir.path(),
        &format!("url = \"http://127.0.0.1:{port}\"\nmax_sessions = 2\nconnect_retries = 40"),
    );
    let report = dir.path().join("eval.json");
    let mut eval = Group::spawn(
        Command::new(env!("CARGO_BIN_EXE_drmas"))
            .args(["eval", config.to_str().unwrap(), "--k", "2", "--out"])
            .arg(&report)
            .current_dir(dir.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
    );
    // Once an episode has taken a step (and has more to take), the server dies; a new
    // one takes its port, and the episodes that start later play it.
    wait_until("a first step", Duration::from_millis(20), || {
        if let Some(status) = eval.try_wait() {
            panic!("drmas eval ended ({status}) before any step");
        }
        first.trace().iter().any(|l| l.starts_with("step "))
    });
    drop(first);
    let _second = serve_on("echo_env.py", port, dir.path(), &["--steps", "3"]);
    let out = eval.wait_with_output();
    assert!(out.status.success(), "{}", show(&out));
    assert!(
        show(&out).contains(&format!("ws://127.0.0.1:{port}/ws")),
        "the failure names the server: {}",
        show(&out)
    );
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    let failed = report["failed_episodes"].as_u64().unwrap();
    assert!((1..=4).contains(&failed), "{report}");
}

/// An evaluation of two episodes against the server `environment` configures, every
/// one of which fails: the evaluation stops, and its error output says `want`.
fn assert_every_episode_fails_saying(dir: &Path, environment: &str, want: &str) {
    let config = experiment(dir, environment);
    let out = drmas(
        dir,
        &["eval", config.to_str().unwrap(), "--k", "1", "--limit", "2"],
    );
    assert!(!out.status.success(), "{}", show(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(want),
        "{want}\n{}",
        show(&out)
    );
}

#[test]
fn a_hung_or_garbled_server_fails_the_episodes_with_its_url() {
    let dir = tempfile::tempdir().unwrap();
    let hung = echo(dir.path(), &["--hang-steps"]);
    assert_every_episode_fails_saying(
        dir.path(),
        &format!("url = {:?}\nmessage_timeout_s = 1", hung.url()),
        &format!(
            "ws://127.0.0.1:{}/ws: no answer to `step` within 1 s",
            hung.port
        ),
    );
    drop(hung);

    let garbage = serve_on("garbage_server.py", free_port(), dir.path(), &[]);
    assert_every_episode_fails_saying(
        dir.path(),
        &format!("url = {:?}", garbage.url()),
        &format!(
            "ws://127.0.0.1:{}/ws: `reset`: an answer that is not JSON",
            garbage.port
        ),
    );
}
