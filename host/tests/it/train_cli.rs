//! `drmas train` end to end on the tiny random chat model with the real math plugins:
//! metrics and checkpoints of a finished run, Ctrl-C (a checkpoint, exit 130, then
//! `--resume` to the end), SIGKILL at an awkward moment (resume leaves exactly one line
//! per step), and `drmas eval --checkpoint` on what it saved.

use crate::common;

use std::{
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

struct Run {
    _dir: tempfile::TempDir,
    config: PathBuf,
    run: PathBuf,
}

fn experiment(steps: u32, save_every: u32) -> Run {
    let model = common::tiny_models().join("tiny-chat");
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("tasks.jsonl");
    let rows: String = (0..6)
        .map(|i| {
            format!(
                "{{\"id\": \"t{i}\", \"source\": \"tiny\", \"question\": \"What is {i} + 1?\", \"answer\": \"{}\"}}\n",
                i + 1
            )
        })
        .collect();
    std::fs::write(&data, rows).unwrap();
    let run = dir.path().join("run");
    let config = dir.path().join("exp.toml");
    std::fs::write(
        &config,
        format!(
            r#"
[experiment]
name = "tiny-train"
seed = 11
output_dir = {run:?}

[[models]]
id = "solver-lm"
path = {model:?}
lr = 1e-3

[[models]]
id = "verifier-lm"
path = {model:?}
lr = 1e-3

[[agents]]
name = "solver"
component = "math/solver"
model = "solver-lm"
sampling = {{ max_new_tokens = 8 }}

[[agents]]
name = "verifier"
component = "math/verifier"
model = "verifier-lm"
sampling = {{ max_new_tokens = 4 }}

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
train = {{ path = {data:?} }}
val = [{{ path = {data:?} }}]

[trainer]
steps = {steps}
prompts_per_step = 2
group_size = 2
save_every = {save_every}
eval_every = 2
eval_k = 2

[pool]
devices = ["cpu"]
"#,
            run = run.display().to_string(),
            model = model.display().to_string(),
            data = data.display().to_string(),
        ),
    )
    .unwrap();
    Run {
        _dir: dir,
        config,
        run,
    }
}

fn drmas() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_drmas"));
    c.env_remove("DRMAS_PLUGIN_PATH");
    c
}

fn train(run: &Run, extra: &[&str]) -> std::process::Output {
    drmas()
        .arg("train")
        .arg(&run.config)
        .args(extra)
        .output()
        .unwrap()
}

fn steps_logged(run: &Path) -> Vec<u64> {
    std::fs::read_to_string(run.join("metrics.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .map(|v| v["step"].as_u64().unwrap())
        .collect()
}

/// Waits until the run has logged `n` steps.
fn wait_for_steps(child: &mut Child, run: &Path, n: usize) {
    let started = Instant::now();
    while steps_logged(run).len() < n {
        assert!(
            child.try_wait().unwrap().is_none(),
            "the run ended before step {n}"
        );
        assert!(started.elapsed() < Duration::from_secs(300), "no progress");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_finished_run_has_metrics_checkpoints_and_an_evaluable_checkpoint() {
    let r = experiment(4, 2);
    let out = train(&r, &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("step 4/4"), "{stderr}");
    assert!(stderr.contains("4 steps done"), "{stderr}");
    assert_eq!(steps_logged(&r.run), [1, 2, 3, 4]);
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(r.run.join("metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    for l in &lines {
        assert_eq!(
            l["episodes"].as_u64().unwrap() + l["failed_episodes"].as_u64().unwrap(),
            4
        );
        for agent in ["solver", "verifier"] {
            let a = &l["agents"][agent];
            let finishes: u64 = a["finish"]
                .as_object()
                .unwrap()
                .values()
                .map(|v| v.as_u64().unwrap())
                .sum();
            assert_eq!(finishes, a["samples"].as_u64().unwrap(), "{l}");
        }
        for model in ["solver-lm", "verifier-lm"] {
            assert!(l["models"][model]["grad_norm"].is_number(), "{l}");
            assert_eq!(l["models"][model]["lr"], 1e-3);
        }
    }
    // eval_every = 2: steps 2 and 4 carry an evaluation on the val set.
    assert!(lines[0].get("eval").is_none());
    assert_eq!(lines[1]["eval"]["k"], 2);
    assert!(lines[3]["eval"]["avg_at_k"].is_number());
    let ckpt = r.run.join("checkpoints/step-000004");
    assert!(ckpt.join("solver-lm/model.safetensors").is_file());
    assert!(ckpt.join("verifier-lm/optimizer.safetensors").is_file());

    let report = r.run.join("ckpt-eval.json");
    let out = drmas()
        .arg("eval")
        .arg(&r.config)
        .arg("--checkpoint")
        .arg(&ckpt)
        .args(["--k", "2", "--limit", "2", "--out"])
        .arg(&report)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert_eq!(report["episodes"], 4);
}

#[test]
fn ctrl_c_writes_a_checkpoint_and_resume_finishes_the_run() {
    let r = experiment(6, 0);
    let mut child = drmas()
        .arg("train")
        .arg(&r.config)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_steps(&mut child, &r.run, 2);
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    assert!(stderr.contains("continue with --resume"), "{stderr}");
    let done = steps_logged(&r.run);
    let last = *done.last().unwrap();
    assert!(
        r.run
            .join(format!("checkpoints/step-{last:06}/trainer_state.json"))
            .is_file(),
        "{stderr}"
    );
    let out = train(&r, &["--resume"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(steps_logged(&r.run), [1, 2, 3, 4, 5, 6]);
}

#[test]
fn a_killed_run_resumes_without_duplicated_or_missing_steps() {
    let r = experiment(6, 1);
    let mut child = drmas()
        .arg("train")
        .arg(&r.config)
        .arg("--quiet")
        .spawn()
        .unwrap();
    wait_for_steps(&mut child, &r.run, 3);
    child.kill().unwrap(); // SIGKILL: no handler runs
    child.wait().unwrap();
    let out = train(&r, &["--resume", "--quiet"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(steps_logged(&r.run), [1, 2, 3, 4, 5, 6]);
    // No temporary folders are left.
    let leftovers: Vec<String> = std::fs::read_dir(r.run.join("checkpoints"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[test]
fn a_second_fresh_run_on_the_same_folder_is_refused() {
    let r = experiment(1, 0);
    assert!(train(&r, &["--quiet"]).status.success());
    let out = train(&r, &["--quiet"]);
    assert!(!out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim(),
        format!(
            "error: {}: this run folder already holds a run: continue it with --resume, or set another [experiment] output_dir",
            r.run.display()
        )
    );
}

#[test]
fn a_run_killed_at_any_write_resumes_to_whole_metrics_and_checkpoints() {
    use std::os::unix::process::ExitStatusExt;
    // One step, checkpointed: every file write of the step (the metrics line, each
    // model's weights marker, optimizer state and worker state, the trainer state) and
    // every folder swap (each model's folder, the checkpoint) is a moment to die at.
    for point in ["file-partial", "dir-staged"] {
        let mut nth = 1;
        loop {
            let r = experiment(1, 1);
            let fault = format!("{point}#{nth}");
            let out = drmas()
                .arg("train")
                .arg(&r.config)
                .arg("--quiet")
                .env("DRMAS_FAULT_POINT", &fault)
                .output()
                .unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
            if out.status.success() {
                // This point is passed fewer than `nth` times in a run.
                assert!(nth > 2, "{fault}: never reached: {stderr}");
                break;
            }
            assert_eq!(
                out.status.signal(),
                Some(libc::SIGKILL),
                "{fault}: {stderr}"
            );
            // What is on disk is a run that resumes: each complete checkpoint loads,
            // the metrics hold whole lines only.
            for line in std::fs::read_to_string(r.run.join("metrics.jsonl"))
                .unwrap_or_default()
                .lines()
            {
                serde_json::from_str::<serde_json::Value>(line)
                    .unwrap_or_else(|e| panic!("{fault}: a cut metrics line {line:?}: {e}"));
            }
            let out = train(&r, &["--resume", "--quiet"]);
            assert!(
                out.status.success(),
                "{fault}: resume failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            assert_eq!(steps_logged(&r.run), [1], "{fault}");
            let ckpt = r.run.join("checkpoints/step-000001");
            for model in ["solver-lm", "verifier-lm"] {
                assert!(
                    ckpt.join(model).join("model.safetensors").is_file(),
                    "{fault}"
                );
                assert!(
                    ckpt.join(model).join("optimizer.safetensors").is_file(),
                    "{fault}"
                );
            }
            let leftovers: Vec<String> = std::fs::read_dir(r.run.join("checkpoints"))
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with('.'))
                .collect();
            assert!(leftovers.is_empty(), "{fault}: {leftovers:?}");
            nth += 1;
            assert!(nth < 40, "{point} passed too often");
        }
    }
}

#[test]
fn a_locked_run_folder_is_refused_before_any_model_loads() {
    let r = experiment(1, 0);
    let _held = drmas::output::OutputLock::run_folder(&r.run).unwrap();
    let out = train(&r, &["--resume", "--quiet"]);
    assert!(!out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim(),
        format!(
            "error: run folder {} is in use by another drmas process (pid {})",
            r.run.display(),
            std::process::id()
        )
    );
    assert!(!r.run.join("metrics.jsonl").exists());
}

/// The two-agent experiment with one LoRA adapter per agent on one shared base, idle
/// models offloaded, and a KL term (each adapter's reference is the base).
fn lora_experiment(steps: u32) -> Run {
    let r = experiment(steps, 0);
    let text = std::fs::read_to_string(&r.config).unwrap();
    let model = common::tiny_models()
        .join("tiny-chat")
        .display()
        .to_string();
    let text = text
        .replace(
            &format!("path = {model:?}\nlr = 1e-3"),
            &format!(
                "base = {model:?}\nlr = 1e-2\nlora = {{ rank = 4, alpha = 8, targets = [\"q_proj\", \"v_proj\", \"up_proj\"] }}"
            ),
        )
        .replace("devices = [\"cpu\"]", "devices = [\"cpu\"]\noffload = \"inactive\"")
        // The tiny random model never succeeds, so every advantage is 0: an entropy
        // bonus gives the adapters a gradient all the same.
        // and a KL term to each adapter's own base.
        .replace("eval_k = 2", "eval_k = 2\nentropy_coef = 0.01\nkl = { coef = 0.01 }");
    assert_eq!(text.matches("lora = ").count(), 2, "{text}");
    std::fs::write(&r.config, text).unwrap();
    r
}

#[test]
fn two_lora_agents_on_one_base_train_end_to_end() {
    let r = lora_experiment(3);
    // `drmas check` shows one worker for the two adapters and where it goes.
    let out = drmas().arg("check").arg(&r.config).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("placement for training (offload = \"inactive\"; skipped on the CPU)"),
        "{stdout}"
    );
    assert!(stdout.contains("solver-lm + verifier-lm"), "{stdout}");
    assert!(stdout.contains("LoRA rank 4 alpha 8"), "{stdout}");
    // Unset batch sizes are the CPU's on the CPU (`pool::sizing`).
    assert!(
        stdout.contains(
            "batch sizes of solver-lm + verifier-lm: generation rows 64, micro-batch 4096 tokens, \
             logits chunk 256.0 MiB (the CPU's where unset)"
        ),
        "{stdout}"
    );

    let out = train(&r, &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(r.run.join("metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 3);
    for l in &lines {
        for model in ["solver-lm", "verifier-lm"] {
            assert!(l["models"][model]["grad_norm"].is_number(), "{l}");
        }
        // One worker (named by its first model) on the CPU.
        let pool = &l["pool"];
        assert_eq!(pool["offload"], "inactive");
        let workers = pool["workers"].as_object().unwrap();
        assert_eq!(workers.len(), 1, "{pool}");
        assert_eq!(pool["workers"]["solver-lm"]["device"], "cpu");
        assert!(
            pool["workers"]["solver-lm"]["on_device_bytes"]
                .as_u64()
                .unwrap()
                > 0
        );
    }
    // The KL to the base is 0 at the first step (B = 0) and grows once they move.
    let kl = |i: usize, m: &str| lines[i]["models"][m]["kl_loss"].as_f64().unwrap();
    assert!(kl(0, "solver-lm").abs() < 1e-9, "{}", lines[0]);
    assert!(kl(2, "solver-lm") > 0.0, "{}", lines[2]);
    // The adapters trained: a gradient reached each.
    let gn = |m: &str| {
        lines
            .iter()
            .map(|l| l["models"][m]["grad_norm"].as_f64().unwrap())
            .sum::<f64>()
    };
    assert!(
        gn("solver-lm") > 0.0 && gn("verifier-lm") > 0.0,
        "{lines:?}"
    );
    // Each model's checkpoint is a PEFT adapter folder with its optimizer state.
    let ckpt = r.run.join("checkpoints/step-000003");
    for model in ["solver-lm", "verifier-lm"] {
        let dir = ckpt.join(model);
        assert!(dir.join("adapter_config.json").is_file(), "{model}");
        assert!(dir.join("adapter_model.safetensors").is_file(), "{model}");
        assert!(dir.join("optimizer.safetensors").is_file(), "{model}");
        assert!(!dir.join("model.safetensors").exists(), "{model}");
    }
    // A resumed run and an evaluation read them back.
    let out = drmas()
        .arg("eval")
        .arg(&r.config)
        .arg("--checkpoint")
        .arg(&ckpt)
        .args(["--k", "1", "--limit", "2", "--out"])
        .arg(r.run.join("eval.json"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = train(&r, &["--resume", "--steps", "4"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("resuming from"), "{stderr}");
    assert_eq!(steps_logged(&r.run), [1, 2, 3, 4]);
}

/// The mechanism, measured every step: per agent its groups with and without signal
/// and the shadow normalizer's comparison, per model how often grad_clip bound. A
/// shadow equal to the run's normalizer gives the same mean(A²) and a correlation of 1
/// (or none, where every advantage is the same); a clip of 1e-12 binds every optimizer
/// step and one of 1e12 none.
#[test]
fn each_step_logs_signal_groups_the_shadow_comparison_and_clip_binding() {
    for (clip, bound) in [(1e-12, 1.0), (1e12, 0.0)] {
        let run = experiment(2, 0);
        let text = std::fs::read_to_string(&run.config).unwrap().replace(
            "eval_every = 2\neval_k = 2",
            &format!("shadow_normalizer = \"norms/drmas\"\ngrad_clip = {clip:e}"),
        );
        std::fs::write(&run.config, text).unwrap();
        let out = train(&run, &["--quiet"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let lines: Vec<serde_json::Value> = std::fs::read_to_string(run.run.join("metrics.jsonl"))
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 2);
        for l in &lines {
            for (name, a) in l["agents"].as_object().unwrap() {
                // 2 tasks: one group per task for every agent that acted in it.
                let groups = a["groups"].as_u64().unwrap();
                let signal = a["groups_with_signal"].as_u64().unwrap();
                assert!((1..=2).contains(&groups) && signal <= groups, "{name}: {a}");
                let zero = a["zero_variance_fraction"].as_f64().unwrap();
                assert!((zero - (groups - signal) as f64 / groups as f64).abs() < 1e-12);
                let s = &a["shadow"];
                assert_eq!(s["adv_sq_mean"], s["shadow_adv_sq_mean"], "{name}: {s}");
                assert!(
                    s["correlation"].is_null()
                        || (s["correlation"].as_f64().unwrap() - 1.0).abs() < 1e-9,
                    "{name}: {s}"
                );
            }
        }
        // One optimizer step per update here: it binds when its norm is above the clip
        // (an all-zero advantage table gives a zero gradient, which binds nothing).
        let mut so_far: std::collections::BTreeMap<String, (f64, f64)> = Default::default();
        for l in &lines {
            for (id, m) in l["models"].as_object().unwrap() {
                assert_eq!(m["optimizer_steps"], 1, "{id}: {m}");
                let binds = if m["grad_norm"].as_f64().unwrap() > clip {
                    1.0
                } else {
                    0.0
                };
                assert!(binds <= bound, "{id}: {m}");
                assert_eq!(m["grad_clip_bound"].as_f64(), Some(binds), "{id}: {m}");
                let e = so_far.entry(id.clone()).or_default();
                *e = (e.0 + binds, e.1 + 1.0);
                assert_eq!(
                    m["grad_clip_bound_run"].as_f64(),
                    Some(e.0 / e.1),
                    "{id}: {m}"
                );
            }
        }
    }
}

#[test]
fn bench_step_times_each_phase_beside_the_bounds_of_its_work() {
    let r = experiment(5, 0);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("bench-run");
    let json = dir.path().join("bench.json");
    let done = drmas()
        .args(["bench", "step"])
        .arg(&r.config)
        .args(["--steps", "2", "--out"])
        .arg(&out)
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&done.stdout);
    assert!(
        done.status.success(),
        "{}",
        String::from_utf8_lossy(&done.stderr)
    );
    assert!(stdout.contains("median of steps 2..2"), "{stdout}");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let steps = report["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 2);
    // Every number the table prints is in the medians (none prints as NaN).
    let prompt = report["median"]["prompt_tokens"].as_f64().unwrap();
    assert!(prompt > 0.0, "{}", report["median"]);
    assert!(!stdout.contains("NaN"), "{stdout}");
    assert!(
        stdout.contains(&format!("after {prompt} prompt tokens")),
        "{stdout}"
    );
    // The run is an ordinary run folder with the experiment's own metrics, and the
    // benchmark counts the same tokens the trainer logged.
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(out.join("metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    for (step, line) in steps.iter().zip(&lines) {
        assert_eq!(step["tokens_generated"], line["tokens_generated"]);
        let f = |k: &str| step[k].as_f64().unwrap();
        assert!(
            f("rollout_bound") > 0.0 && f("update_bound") > 0.0,
            "{step}"
        );
        // Bounds of necessary work at the best rates measured: no step beats them.
        assert!(
            f("rollout_ratio") > 1.0 && f("update_ratio") > 1.0,
            "{step}"
        );
        let parts = f("rollout") + f("advantages") + f("update") + f("save") + f("other");
        assert!((parts - f("total")).abs() < 1e-6, "{step}");
    }
    for model in ["solver-lm", "verifier-lm"] {
        assert!(report["models"][model]["update_gflops"].as_f64().unwrap() > 0.0);
    }
    // No evaluation in a benchmarked step, whatever the experiment's eval_every.
    assert!(lines.iter().all(|l| l.get("eval").is_none()));

    let again = drmas()
        .args(["bench", "step"])
        .arg(&r.config)
        .args(["--steps", "2", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&again.stderr);
    assert!(!again.status.success());
    assert!(
        err.contains("already exists; the benchmark needs a fresh run folder"),
        "{err}"
    );
    let one = drmas()
        .args(["bench", "step"])
        .arg(&r.config)
        .args(["--steps", "1"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&one.stderr);
    assert!(
        err.contains("--steps must be at least 2 (the first step is a warm-up)"),
        "{err}"
    );
}

/// Two models' optimizer states swapped between their folders of a checkpoint: refused
/// on resume naming both parts, even after a step without signal, where both states
/// are zeros (their headers name their model, so the files differ). With the manifest
/// rewritten to match, the state's own header still refuses it.
#[test]
fn optimizer_states_swapped_between_models_are_refused_on_resume() {
    let r = experiment(2, 1);
    let out = train(&r, &["--steps", "1", "--quiet"]);
    assert!(out.status.success(), "{}", common::output_text(&out));
    let ckpt = r.run.join("checkpoints/step-000001");
    let (solver, verifier) = (
        ckpt.join("solver-lm/optimizer.safetensors"),
        ckpt.join("verifier-lm/optimizer.safetensors"),
    );
    let swap = || {
        let held = ckpt.join("held");
        std::fs::rename(&solver, &held).unwrap();
        std::fs::rename(&verifier, &solver).unwrap();
        std::fs::rename(&held, &verifier).unwrap();
    };
    swap();
    let out = train(&r, &["--resume", "--quiet"]);
    assert!(!out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim_end(),
        format!(
            "error: {}: not a usable checkpoint: {}: holds what MANIFEST.sha256 records for \
             verifier-lm/optimizer.safetensors: parts of the checkpoint were swapped or copied \
             between its folders",
            ckpt.display(),
            solver.display()
        )
    );
    // The manifest made to agree (as `sha256sum` would write it).
    let manifest = ckpt.join("MANIFEST.sha256");
    let text = std::fs::read_to_string(&manifest).unwrap();
    let hash = |p: &Path| drmas::train::fingerprint::sha256_file(p).unwrap().0;
    let fixed: String = text
        .lines()
        .map(|l| {
            let (_, name) = l.split_once("  ").unwrap();
            format!("{}  {name}\n", hash(&ckpt.join(name)))
        })
        .collect();
    std::fs::write(&manifest, fixed).unwrap();
    let out = train(&r, &["--resume", "--quiet"]);
    assert!(!out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim_end(),
        format!(
            "error: {}: not a usable checkpoint: the optimizer state of model `verifier-lm`, \
             not of `solver-lm`: it was moved or copied between the models' folders",
            solver.display()
        )
    );
    assert_eq!(steps_logged(&r.run), [1]);
    // Put back, the checkpoint resumes; a state as an older drmas wrote it (no model
    // in its header, the manifest recording it) is not judged by its owner.
    swap();
    for path in [&solver, &verifier] {
        let tensors = tch::Tensor::read_safetensors(path).unwrap();
        tch::Tensor::write_safetensors(&tensors, path).unwrap();
    }
    let old: String = text
        .lines()
        .map(|l| {
            let (_, name) = l.split_once("  ").unwrap();
            format!("{}  {name}\n", hash(&ckpt.join(name)))
        })
        .collect();
    std::fs::write(&manifest, old).unwrap();
    let out = train(&r, &["--resume", "--quiet"]);
    assert!(out.status.success(), "{}", common::output_text(&out));
    assert_eq!(steps_logged(&r.run), [1, 2]);
}

/// A team that does not fit the memory there is (here the shipped math team under a
/// `[pool] memory_limit_gib` of 1, as on a busy machine) is refused before any model is
/// loaded, the first line saying what the device is asked for and what it has free,
/// then the table of each model's estimate by part.
#[test]
fn a_team_that_does_not_fit_is_refused_with_what_is_asked_and_what_is_free() {
    let dir = tempfile::tempdir().unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_drmas"))
        .current_dir(common::root())
        .args(["train", "configs/math-drmas.toml"])
        .args(["--set", "pool.memory_limit_gib=1"])
        .arg("--set")
        .arg(format!(
            "experiment.output_dir={:?}",
            dir.path().join("run").display().to_string()
        ))
        .env_remove("DRMAS_PLUGIN_PATH")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    let parts = "weights 513.1 MiB, gradients 513.1 MiB, optimizer 1.0 GiB";
    assert_eq!(
        String::from_utf8_lossy(&o.stderr),
        format!(
            "error: configs/math-drmas.toml: the models do not fit the pool's devices (offload = \"none\"): cpu needs 9.4 GiB and has 1.0 GiB free (the lower of what it has and [pool] memory_limit_gib = 1); nothing was loaded:
  model          estimate  device   parts
  solver-lm       7.4 GiB  cpu      {parts}, KV cache 3.3 GiB, activations 5.4 GiB
  verifier-lm     7.4 GiB  cpu      {parts}, KV cache 3.2 GiB, activations 5.4 GiB
  device        needs        free
  cpu         9.4 GiB     1.0 GiB  does not fit
free memory, a smaller model or batch, `offload = \"inactive\"`, bf16, LoRA or more devices would help
"
        )
    );
    assert!(
        !dir.path().join("run/checkpoints").exists(),
        "nothing may have trained"
    );
}
