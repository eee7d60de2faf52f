//! `drmas train` as a data-parallel job through the real binary on the tiny math team:
//! two processes on 127.0.0.1 with plain environment variables and under the venv's
//! `torchrun --no-python`, a rank killed mid-run making the other fail within the
//! collective timeout, checkpoints that resume with another world size, and evaluations
//! the ranks share. (That two ranks compute one process's update is
//! `train_data_parallel`.)

use crate::common;
use crate::common::process::{Group, wait_until};
use std::{
    path::{Path, PathBuf},
    process::{Command, Output, Stdio},
    time::{Duration, Instant},
};

pub(crate) fn drmas() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_drmas"));
    c.env_remove("DRMAS_PLUGIN_PATH");
    for k in [
        "RANK",
        "WORLD_SIZE",
        "LOCAL_RANK",
        "LOCAL_WORLD_SIZE",
        "MASTER_ADDR",
        "MASTER_PORT",
        "TORCHELASTIC_USE_AGENT_STORE",
        "SLURM_PROCID",
        "SLURM_NTASKS",
    ] {
        c.env_remove(k);
    }
    c
}

pub(crate) fn free_port() -> u16 {
    drmas::engine::free_port().unwrap()
}

/// The tiny math team of the sweep tests, `steps` steps, a checkpoint every step, and a
/// short collective timeout.
pub(crate) fn experiment(dir: &Path, steps: u32, timeout_s: u32) -> PathBuf {
    let config = crate::sweep_cli::experiment(dir);
    let text = std::fs::read_to_string(&config)
        .unwrap()
        .replace("steps = 5", &format!("steps = {steps}"))
        .replace(
            "devices = [\"cpu\"]",
            &format!("devices = [\"cpu\"]\ncollective_timeout_s = {timeout_s}"),
        );
    std::fs::write(&config, text).unwrap();
    config
}

fn rank(config: &Path, rank: usize, world: usize, port: u16, extra: &[&str]) -> Group {
    rank_of("train", config, rank, world, port, extra)
}

/// Rank `rank` of `world` running `drmas COMMAND CONFIG EXTRA…`.
fn rank_of(
    command: &str,
    config: &Path,
    rank: usize,
    world: usize,
    port: u16,
    extra: &[&str],
) -> Group {
    Group::spawn(
        drmas()
            .arg(command)
            .arg(config)
            .args(extra)
            .env("RANK", rank.to_string())
            .env("WORLD_SIZE", world.to_string())
            .env("MASTER_ADDR", "127.0.0.1")
            .env("MASTER_PORT", port.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
    )
}

pub(crate) fn text(o: &Output) -> String {
    common::output_text(o)
}

pub(crate) fn lines(run: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(run.join("metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn two_ranks(config: &Path, extra: &[&str]) -> (Output, Output) {
    let port = free_port();
    let r1 = rank(config, 1, 2, port, extra);
    let r0 = rank(config, 0, 2, port, extra);
    (r0.wait_with_output(), r1.wait_with_output())
}

#[test]
fn two_processes_with_plain_variables() {
    let dir = tempfile::tempdir().unwrap();
    let config = experiment(dir.path(), 3, 60);
    let (r0, r1) = two_ranks(&config, &[]);
    assert!(r0.status.success(), "rank 0: {}", text(&r0));
    assert!(r1.status.success(), "rank 1: {}", text(&r1));
    // Rank 0 speaks and writes; rank 1 says nothing.
    assert!(text(&r0).contains("3 steps done"), "{}", text(&r0));
    assert_eq!(text(&r1), "");
    let run = dir.path().join("run");
    let l = lines(&run);
    assert_eq!(l.len(), 3);
    assert_eq!(l[2]["dist"]["world_size"], 2);
    // The step's every episode is in its line: 2 tasks × 2, one task on each rank.
    assert_eq!(l[0]["episodes"], 4);
    assert!(
        run.join("checkpoints/step-000003/trainer_state.json")
            .is_file()
    );
}

#[test]
fn two_processes_under_torchrun() {
    let torchrun = common::root().join(".venv/bin/torchrun");
    assert!(
        torchrun.exists(),
        "no {}: run scripts/setup.sh",
        torchrun.display()
    );
    let dir = tempfile::tempdir().unwrap();
    let config = experiment(dir.path(), 2, 60);
    let o = Command::new(&torchrun)
        .args(["--no-python", "--nproc-per-node", "2", "--master-port"])
        .arg(free_port().to_string())
        .arg(env!("CARGO_BIN_EXE_drmas"))
        .arg("train")
        .arg(&config)
        .env_remove("DRMAS_PLUGIN_PATH")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let l = lines(&dir.path().join("run"));
    assert_eq!(l.len(), 2);
    assert_eq!(l[1]["dist"]["world_size"], 2);
}

#[test]
fn a_killed_rank_stops_the_other_within_the_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let config = experiment(dir.path(), 200, 10);
    let port = free_port();
    let mut r1 = rank(&config, 1, 2, port, &["--quiet"]);
    let r0 = rank(&config, 0, 2, port, &["--quiet"]);
    let metrics = dir.path().join("run/metrics.jsonl");
    wait_until("a first step", Duration::from_millis(50), || {
        std::fs::read_to_string(&metrics).is_ok_and(|t| !t.is_empty())
    });
    // Gloo writes to its sockets with writev (no MSG_NOSIGNAL): a rank must ignore
    // SIGPIPE, or a peer's death could end it silently mid-write instead of with the
    // collective's error (seen once under load).
    let status = std::fs::read_to_string(format!("/proc/{}/status", r0.id())).unwrap();
    let ignored = status
        .lines()
        .find_map(|l| l.strip_prefix("SigIgn:"))
        .map(|m| u64::from_str_radix(m.trim(), 16).unwrap())
        .unwrap();
    assert_ne!(
        ignored & (1 << (libc::SIGPIPE - 1)),
        0,
        "SIGPIPE not ignored"
    );
    r1.kill_leader();
    let killed = Instant::now();
    let o = r0.wait_with_output();
    let took = killed.elapsed();
    let t = text(&o);
    assert!(!o.status.success(), "{t}");
    assert!(
        took < Duration::from_secs(60),
        "rank 0 took {took:?} to stop"
    );
    assert!(t.contains("data parallelism: "), "{}: {t}", o.status);
    eprintln!("rank 0 stopped {took:?} after rank 1 was killed: {t}");
}

#[test]
fn checkpoints_resume_with_another_world_size() {
    // Two ranks, then one process: the data cursor and the weights are the job's.
    let dir = tempfile::tempdir().unwrap();
    let config = experiment(dir.path(), 4, 60);
    let (r0, r1) = two_ranks(&config, &["--steps", "2"]);
    assert!(
        r0.status.success() && r1.status.success(),
        "{}{}",
        text(&r0),
        text(&r1)
    );
    let o = drmas()
        .arg("train")
        .arg(&config)
        .args(["--resume", "--quiet"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let l = lines(&dir.path().join("run"));
    let steps: Vec<u64> = l.iter().map(|x| x["step"].as_u64().unwrap()).collect();
    assert_eq!(steps, [1, 2, 3, 4]);
    assert!(l[1].get("dist").is_some() && l[2].get("dist").is_none());

    // One process, then two ranks.
    let dir = tempfile::tempdir().unwrap();
    let config = experiment(dir.path(), 4, 60);
    let o = drmas()
        .arg("train")
        .arg(&config)
        .args(["--steps", "2", "--quiet"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let (r0, r1) = two_ranks(&config, &["--resume"]);
    assert!(
        r0.status.success() && r1.status.success(),
        "{}{}",
        text(&r0),
        text(&r1)
    );
    assert!(text(&r0).contains("resuming from"), "{}", text(&r0));
    let l = lines(&dir.path().join("run"));
    let steps: Vec<u64> = l.iter().map(|x| x["step"].as_u64().unwrap()).collect();
    assert_eq!(steps, [1, 2, 3, 4]);
    assert_eq!(l[3]["dist"]["world_size"], 2);
}

#[test]
fn bad_launch_variables_are_refused_with_their_name() {
    let dir = tempfile::tempdir().unwrap();
    let config = experiment(dir.path(), 1, 60);
    let o = drmas()
        .arg("train")
        .arg(&config)
        .env("RANK", "0")
        .env("WORLD_SIZE", "2")
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(
        text(&o).contains(
            "error: launch environment: RANK and WORLD_SIZE are set but MASTER_ADDR is not"
        ),
        "{}",
        text(&o)
    );
}

#[test]
fn a_job_of_one_rank_trains_as_one_process() {
    // RANK=0 WORLD_SIZE=1: every collective runs, on one rank (the GPU check's NCCL
    // step); the numbers are one process's, bit for bit.
    let one = tempfile::tempdir().unwrap();
    let job = tempfile::tempdir().unwrap();
    let c1 = experiment(one.path(), 2, 60);
    let c2 = experiment(job.path(), 2, 60);
    let o = drmas()
        .arg("train")
        .arg(&c1)
        .arg("--quiet")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let o = rank(&c2, 0, 1, free_port(), &["--quiet"]).wait_with_output();
    assert!(o.status.success(), "{}", text(&o));
    let strip = |mut v: serde_json::Value| {
        let o = v.as_object_mut().unwrap();
        for k in ["time", "pool", "dist", "tokens_per_s", "tracking"] {
            o.remove(k);
        }
        for m in o["models"].as_object_mut().unwrap().values_mut() {
            let m = m.as_object_mut().unwrap();
            for k in ["update_seconds", "update_gflops", "update_phases"] {
                m.remove(k);
            }
        }
        v
    };
    let a: Vec<_> = lines(&one.path().join("run"))
        .into_iter()
        .map(strip)
        .collect();
    let l = lines(&job.path().join("run"));
    assert_eq!(l[0]["dist"]["world_size"], 1);
    let b: Vec<_> = l.into_iter().map(strip).collect();
    assert_eq!(a, b);
}

/// An evaluation report without its timings.
fn report_numbers(path: &Path) -> serde_json::Value {
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let o = v.as_object_mut().unwrap();
    for k in ["seconds", "tokens_per_second"] {
        assert!(o.remove(k).is_some(), "{k}");
    }
    v
}

#[test]
fn evaluation_is_shared_by_the_ranks() {
    // `drmas eval`: the 3 val tasks dealt to 2 ranks (tasks 0 and 2 on rank 0), the
    // episodes exchanged, rank 0 writes the report one process writes.
    let dir = tempfile::tempdir().unwrap();
    let config = experiment(dir.path(), 2, 60);
    let one = dir.path().join("one.json");
    let o = drmas()
        .arg("eval")
        .arg(&config)
        .args(["--k", "3", "--out"])
        .arg(&one)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let two = dir.path().join("two.json");
    let port = free_port();
    let args = ["--k", "3", "--out", two.to_str().unwrap()];
    let r1 = rank_of("eval", &config, 1, 2, port, &args);
    let r0 = rank_of("eval", &config, 0, 2, port, &args);
    let (o0, o1) = (r0.wait_with_output(), r1.wait_with_output());
    assert!(o0.status.success(), "rank 0: {}", text(&o0));
    assert!(o1.status.success(), "rank 1: {}", text(&o1));
    assert_eq!(text(&o1), "", "rank 1 says nothing");
    let (a, b) = (report_numbers(&one), report_numbers(&two));
    assert_eq!(a["episodes"], 9);
    assert!(a["generated_tokens"].as_u64().unwrap() > 0);
    assert_eq!(a, b);

    // Evaluation during training: the job's metrics line holds what one process's
    // `drmas eval` of the same step's checkpoint reports.
    let run = dir.path().join("run");
    let set = [
        "--set",
        "trainer.eval_every=2",
        "--set",
        "trainer.eval_k=3",
        "--quiet",
    ];
    let (r0, r1) = two_ranks(&config, &set);
    assert!(
        r0.status.success() && r1.status.success(),
        "{}{}",
        text(&r0),
        text(&r1)
    );
    let l = lines(&run);
    let eval = &l[1]["eval"];
    let checkpoint = dir.path().join("check.json");
    let o = drmas()
        .arg("eval")
        .arg(&config)
        .args(["--k", "3", "--checkpoint"])
        .arg(run.join("checkpoints/step-000002"))
        .arg("--out")
        .arg(&checkpoint)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let c = report_numbers(&checkpoint);
    assert_eq!(eval["k"], 3);
    assert_eq!(eval["avg_at_k"], c["overall"]["avg_at_k"], "{eval} vs {c}");
    assert_eq!(eval["pass_at_k"], c["overall"]["pass_at_k"]);
    assert_eq!(
        eval["sources"]["tiny"]["avg_at_k"],
        c["sources"]["tiny"]["avg_at_k"]
    );
    assert_eq!(eval["failed_episodes"], 0);
}

/// The last line of a rank's output that starts with `error: ` (c10d may log warnings
/// before it).
fn error_line(o: &Output) -> String {
    text(o)
        .lines()
        .rev()
        .find(|l| l.starts_with("error: "))
        .unwrap_or_default()
        .to_string()
}

#[test]
fn ranks_started_with_different_experiments_are_refused_on_every_rank() {
    let dir = tempfile::tempdir().unwrap();
    let config = experiment(dir.path(), 2, 60);
    let port = free_port();
    let r1 = rank(&config, 1, 2, port, &["--set", "experiment.seed=8"]);
    let r0 = rank(&config, 0, 2, port, &["--set", "experiment.seed=7"]);
    let (o0, o1) = (r0.wait_with_output(), r1.wait_with_output());
    let want = "error: data parallelism: the ranks do not run the same experiment: \
                experiment.seed: rank 0 has 7, rank 1 has 8; start every rank with the same \
                experiment file, --set overrides, options and drmas";
    for (r, o) in [(0, &o0), (1, &o1)] {
        assert!(!o.status.success(), "rank {r}: {}", text(o));
        assert_eq!(error_line(o), want, "rank {r}: {}", text(o));
    }
    // Refused before any step: nothing was trained.
    assert!(!dir.path().join("run/metrics.jsonl").exists());

    // A command-line option that decides what the job computes differs too.
    let port = free_port();
    let r1 = rank_of("eval", &config, 1, 2, port, &["--k", "2"]);
    let r0 = rank_of("eval", &config, 0, 2, port, &["--k", "3"]);
    let (o0, o1) = (r0.wait_with_output(), r1.wait_with_output());
    assert!(!dir.path().join("run/eval.json").exists());
    let want = "error: data parallelism: the ranks do not run the same experiment: \
                options.--k: rank 0 has 3, rank 1 has 2; start every rank with the same \
                experiment file, --set overrides, options and drmas";
    for (r, o) in [(0, &o0), (1, &o1)] {
        assert!(!o.status.success(), "rank {r}: {}", text(o));
        assert_eq!(error_line(o), want, "rank {r}: {}", text(o));
    }
}

#[test]
fn a_master_port_held_by_another_program_fails_every_rank_within_the_timeout() {
    // Another program listens on the port and never answers (held for the whole test).
    let holder = std::net::TcpListener::bind("0.0.0.0:0").unwrap();
    let port = holder.local_addr().unwrap().port();
    let dir = tempfile::tempdir().unwrap();
    let config = experiment(dir.path(), 1, 2);
    let r1 = rank(&config, 1, 2, port, &[]);
    let r0 = rank(&config, 0, 2, port, &[]);
    let (o0, o1) = (r0.wait_with_output(), r1.wait_with_output());
    assert!(!o0.status.success(), "{}", text(&o0));
    assert!(!o1.status.success(), "{}", text(&o1));
    assert_eq!(
        error_line(&o0),
        format!(
            "error: rank 0 of 2: cannot host the job's store: port {port} is in use by another \
             program (MASTER_PORT={port}); free it or start the job with another MASTER_PORT"
        ),
        "{}",
        text(&o0)
    );
    assert_eq!(
        error_line(&o1),
        format!(
            "error: rank 1 of 2: the job's store at 127.0.0.1:{port} gave no answer within 2 s \
             ([pool] collective_timeout_s): is its host (rank 0, or the launcher's agent) \
             running, and is the port not another program's?"
        ),
        "{}",
        text(&o1)
    );
    drop(holder);
}
