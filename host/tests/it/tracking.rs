//! Tracking through the real binary on the tiny chat team: TensorBoard's own reader
//! (EventAccumulator, pinned in the test venv) finds every number of metrics.jsonl at
//! its step, and one series per tag after a SIGKILL and `--resume`; sample tables and
//! the run record are written; a real `mlflow server` (sqlite store, on 127.0.0.1)
//! holds the run's params, tags, metrics and sample artifacts, read back through
//! MLflow's client, with one run across a kill and resume and no step twice; a server
//! that is not there leaves training unaffected and the gap on record.

use crate::common;
use crate::common::process::{Group, wait_until};
use serde_json::Value;
use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

fn drmas() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_drmas"));
    c.env_remove("DRMAS_PLUGIN_PATH");
    c
}

fn steps_logged(run: &Path) -> usize {
    std::fs::read_to_string(run.join("metrics.jsonl"))
        .map(|t| t.lines().count())
        .unwrap_or(0)
}

/// `drmas train CONFIG ARGS…` killed with SIGKILL once `n` steps are logged.
fn train_and_kill_at(config: &Path, run: &Path, n: usize, args: &[&str]) {
    let mut child = Group::spawn(
        drmas()
            .arg("train")
            .arg(config)
            .args(args)
            .arg("--quiet")
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    );
    wait_until(
        &format!("step {n} of the run logged"),
        Duration::from_millis(10),
        || {
            assert!(child.try_wait().is_none(), "ended before step {n}");
            steps_logged(run) >= n
        },
    );
    child.kill_leader();
}

fn train(config: &Path, args: &[&str]) -> (bool, String) {
    let o = drmas()
        .arg("train")
        .arg(config)
        .args(args)
        .output()
        .unwrap();
    let text = common::output_text(&o);
    (o.status.success(), text)
}

fn python() -> PathBuf {
    common::venv_python().expect("the test venv (scripts/setup.sh --test-deps)")
}

fn run_script(script: &str, args: &[&str]) -> Value {
    let o = Command::new(python())
        .arg(common::script(script))
        .args(args)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{script}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).unwrap()
}

/// 6 steps, checkpoints every 2, sample tables every 2; killed after step 3's line (so
/// step 3 is computed again on resume), then resumed to the end. TensorBoard's reader
/// has every number of every line at its step, each tag's steps once and in order, and
/// the sample tables as text; the sample files and the run record are in the folder.
#[test]
fn tensorboard_has_every_metric_once_across_a_kill_and_resume() {
    let dir = tempfile::tempdir().unwrap();
    let config = crate::sweep_cli::experiment(dir.path());
    let run = dir.path().join("run");
    let args = [
        "--set",
        "trainer.steps=6",
        "--set",
        "trainer.save_every=2",
        "--set",
        "tracking.log_samples_every=2",
    ];
    train_and_kill_at(&config, &run, 3, &args);
    let mut resume = args.to_vec();
    resume.extend(["--resume", "--quiet"]);
    let (ok, text) = train(&config, &resume);
    assert!(ok, "{text}");

    let files: Vec<PathBuf> = std::fs::read_dir(run.join("tensorboard"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(
        files.len(),
        1,
        "one event file across the resume: {files:?}"
    );
    let check = run_script("tensorboard_check.py", &[run.to_str().unwrap()]);
    eprintln!(
        "tensorboard: {} tags, {} points, {} bytes for 6 steps",
        check["tags"],
        check["points"],
        std::fs::metadata(&files[0]).unwrap().len()
    );
    assert_eq!(check["mismatches"], serde_json::json!([]), "{check}");
    assert_eq!(check["not_monotone"], serde_json::json!([]), "{check}");
    assert_eq!(check["steps"], serde_json::json!([1, 2, 3, 4, 5, 6]));
    assert_eq!(check["points"], check["expected_points"], "{check}");
    assert!(check["tags"].as_u64().unwrap() > 50, "{check}");
    assert_eq!(
        check["text_tags"],
        serde_json::json!(["samples/solver", "samples/verifier"])
    );

    for step in [2, 4, 6] {
        let path = run.join(format!("samples/step-{step:06}.jsonl"));
        let rows: Vec<Value> = std::fs::read_to_string(&path)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        // Two per agent, the solver's first; each with its rendered text.
        let agents: Vec<&str> = rows.iter().map(|r| r["agent"].as_str().unwrap()).collect();
        assert_eq!(
            agents,
            ["solver", "solver", "verifier", "verifier"],
            "{path:?}"
        );
        for r in &rows {
            assert_eq!(r["step"], step);
            assert!(r["prompt"].as_str().unwrap().contains("What is"), "{r}");
            for key in ["completion", "finish", "uid"] {
                assert!(r[key].is_string(), "{r}");
            }
            assert!(
                r["score"].is_number() && r["advantage"].is_number() && r["valid"].is_boolean()
            );
        }
    }
    assert!(!run.join("samples/step-000003.jsonl").exists());

    let record: Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("run.json")).unwrap()).unwrap();
    assert_eq!(record["drmas_version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(record["plugin_api_version"], drmas_plugin_api::API_VERSION);
    assert!(
        record["experiment"]
            .as_str()
            .unwrap()
            .contains("log_samples_every = 2"),
        "the resolved experiment, overrides applied: {record}"
    );
    assert_eq!(record["overrides"].as_array().unwrap().len(), 3);
    assert!(
        record["files"]
            .as_object()
            .unwrap()
            .keys()
            .any(|k| k == "data.train"),
        "{record}"
    );
    assert!(
        record["files"]
            .as_object()
            .unwrap()
            .keys()
            .any(|k| k.contains("files[model.safetensors]")),
        "{record}"
    );
    assert!(
        !record["machine"]["libtorch_version"]
            .as_str()
            .unwrap()
            .is_empty()
    );
    assert!(record["machine"]["threads"].as_i64().unwrap() >= 1);
    assert!(record["machine"]["cpu_flags"].is_array());
}

/// A real `mlflow server` on 127.0.0.1 with a sqlite store, stopped with the test: the
/// server starts uvicorn, a job runner and huey consumers, so it runs in a process
/// group of its own and the whole group is killed (stopping the `mlflow` process alone
/// left nine orphans behind).
struct MlflowServer {
    group: Group,
    uri: String,
    /// The test's folder, which the server's processes carry in their environment.
    dir: PathBuf,
}

impl MlflowServer {
    /// Stops the server and checks that nothing it started is left: every process
    /// that carries the test's folder in its environment (uvicorn, a job runner, huey
    /// consumers, wherever they were reparented) has ended.
    fn stop(self) {
        let needle = self.dir.display().to_string();
        // Not true by default: the server's processes do carry the folder.
        assert!(
            !common::process::processes_with_env(&needle).is_empty(),
            "no process carries {needle}"
        );
        drop(self.group);
        wait_until(
            "every process of the MLflow server ended",
            Duration::from_millis(50),
            || common::process::processes_with_env(&needle).is_empty(),
        );
    }
}

fn mlflow_server(dir: &Path) -> MlflowServer {
    let port = drmas::engine::free_port().unwrap();
    let mlflow = python().parent().unwrap().join("mlflow");
    let log = std::fs::File::create(dir.join("mlflow.log")).unwrap();
    let mut group = Group::spawn(
        Command::new(mlflow)
            .args(["server", "--host", "127.0.0.1", "--port", &port.to_string()])
            .arg("--backend-store-uri")
            .arg(format!("sqlite:///{}", dir.join("mlflow.db").display()))
            .arg("--artifacts-destination")
            .arg(dir.join("artifacts"))
            .args(["--workers", "1"])
            // No job runner (huey consumers): the tests run no MLflow jobs.
            .env("MLFLOW_SERVER_ENABLE_JOB_EXECUTION", "false")
            .stdout(log.try_clone().unwrap())
            .stderr(log),
    );
    let uri = format!("http://127.0.0.1:{port}");
    let started = Instant::now();
    wait_until(
        "the mlflow server answers /health",
        Duration::from_millis(200),
        || {
            if let Some(status) = group.try_wait() {
                panic!(
                    "mlflow server ended ({status}): {}",
                    std::fs::read_to_string(dir.join("mlflow.log")).unwrap_or_default()
                );
            }
            std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
                && Command::new("curl")
                    .args(["-sf", &format!("{uri}/health")])
                    .output()
                    .is_ok_and(|o| o.status.success())
        },
    );
    let server = MlflowServer {
        group,
        uri,
        dir: dir.to_path_buf(),
    };
    eprintln!(
        "mlflow server ready in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    server
}

/// 4 steps against a real MLflow server, killed after step 3's line and resumed: one
/// run, FINISHED, tagged with drmas's version and with the resolved experiment as
/// params; each metric's history has steps 1–4 once; the sample tables are artifacts.
/// Then the same run against a port where nothing listens: training ends as usual,
/// one warning, and every step on record as a gap.
#[test]
fn mlflow_holds_one_run_across_a_resume_and_a_missing_server_costs_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let server = mlflow_server(dir.path());
    let config = crate::sweep_cli::experiment(dir.path());
    let run = dir.path().join("run");
    let tracking = format!(
        "tracking={{ mlflow = {{ uri = {:?}, experiment = \"drmas-test\" }}, log_samples_every = 2 }}",
        server.uri
    );
    let args = [
        "--set",
        "trainer.steps=4",
        "--set",
        "trainer.save_every=2",
        "--set",
        &tracking,
    ];
    train_and_kill_at(&config, &run, 3, &args);
    let mut resume = args.to_vec();
    resume.extend(["--resume", "--quiet"]);
    let started = Instant::now();
    let (ok, text) = train(&config, &resume);
    assert!(ok, "{text}");
    eprintln!("resumed run: {:.1} s", started.elapsed().as_secs_f64());
    assert!(!text.contains("tracking:"), "no warning: {text}");

    let got = run_script(
        "mlflow_check.py",
        &[
            &server.uri,
            "drmas-test",
            "reward_mean",
            "models/solver-lm/grad_norm",
        ],
    );
    let runs = got["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 1, "one run across the resume: {got}");
    let r = &runs[0];
    assert_eq!(r["status"], "FINISHED");
    assert_eq!(r["tags"]["drmas.version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(r["params"]["trainer.steps"], "4", "{r}");
    assert_eq!(r["params"]["experiment.name"], "tiny-sweep", "{r}");
    // The settings the fingerprint holds, a list item's label a segment of the name
    // (MLflow refuses brackets), defaults filled in.
    assert_eq!(r["params"]["models.solver-lm.lr"], "0.001", "{r}");
    assert_eq!(r["params"]["trainer.loss_agg"], "token-mean", "{r}");
    let lines: Vec<Value> = std::fs::read_to_string(run.join("metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    for key in ["reward_mean", "models/solver-lm/grad_norm"] {
        let history = r["history"][key].as_array().unwrap();
        let steps: Vec<u64> = history.iter().map(|p| p[0].as_u64().unwrap()).collect();
        assert_eq!(steps, [1, 2, 3, 4], "{key}: {history:?}");
        // The values are the metrics file's (the resumed run's own for steps 3 and 4).
        for (p, line) in history.iter().zip(&lines) {
            let path: Vec<&str> = key.split('/').collect();
            let want = path.iter().fold(line, |v, k| &v[*k]).as_f64().unwrap();
            assert!(
                (p[1].as_f64().unwrap() - want).abs() < 1e-9,
                "{key}: {p} vs {want}"
            );
        }
    }
    assert_eq!(
        r["artifacts"],
        serde_json::json!(["samples/step-000002.jsonl", "samples/step-000004.jsonl"])
    );
    let record: Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("tracking/mlflow.json")).unwrap())
            .unwrap();
    assert_eq!(record["run_id"], r["run_id"]);
    assert_eq!(record["delivered_step"], 4);
    assert_eq!(record["gaps"], serde_json::json!([]));
    server.stop();

    // No server: the same training, one warning, the gap on record.
    let port = drmas::engine::free_port().unwrap();
    let down = format!(
        "tracking={{ mlflow = {{ uri = \"http://127.0.0.1:{port}\", experiment = \"x\" }} }}"
    );
    let run2 = dir.path().join("run2");
    let started = Instant::now();
    let (ok, text) = train(
        &config,
        &[
            "--set",
            "trainer.steps=2",
            "--set",
            &format!("experiment.output_dir={:?}", run2.display().to_string()),
            "--set",
            &down,
        ],
    );
    assert!(ok, "{text}");
    eprintln!(
        "2 steps with MLflow down: {:.1} s",
        started.elapsed().as_secs_f64()
    );
    assert_eq!(steps_logged(&run2), 2);
    // Once (the log's copy of it aside).
    assert_eq!(
        text.lines()
            .filter(|l| l.starts_with("tracking: MLflow at"))
            .count(),
        1,
        "one warning: {text}"
    );
    let record: Value =
        serde_json::from_str(&std::fs::read_to_string(run2.join("tracking/mlflow.json")).unwrap())
            .unwrap();
    assert_eq!(record["gaps"], serde_json::json!([1, 2]), "{record}");
    assert_eq!(record["run_id"], "");
}

/// An MLflow server that accepts connections and never answers: training ends after its
/// steps and the grace (`grace_s`, 1 s here), and `RUN/tracking/mlflow.json` is written
/// anyway, every step on record as a gap and `incomplete` set, the warning saying so.
#[test]
fn an_mlflow_server_that_never_answers_leaves_the_lost_steps_on_record() {
    let silent = crate::common::http_stub::Silent::start();
    let addr = silent.addr;
    let dir = tempfile::tempdir().unwrap();
    let config = crate::sweep_cli::experiment(dir.path());
    let run = dir.path().join("run");
    let mlflow = format!(
        "tracking={{ mlflow = {{ uri = \"http://{addr}\", experiment = \"x\", grace_s = 1 }} }}"
    );
    let (ok, text) = train(&config, &["--set", "trainer.steps=2", "--set", &mlflow]);
    let held = silent.close();
    assert!(ok, "{text}");
    assert!(held >= 1, "the client never connected");
    assert_eq!(steps_logged(&run), 2);
    let record: Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("tracking/mlflow.json")).unwrap())
            .unwrap();
    assert_eq!(record["gaps"], serde_json::json!([1, 2]), "{record}");
    assert_eq!(record["incomplete"], true, "{record}");
    assert_eq!(record["run_id"], "", "{record}");
    assert!(
        text.contains(&format!(
            "tracking: MLflow had not taken everything after 1 s (tracking.mlflow.grace_s); the rest is dropped: 2 step(s) on record as gaps in {}",
            run.join("tracking/mlflow.json").display()
        )),
        "{text}"
    );
}
