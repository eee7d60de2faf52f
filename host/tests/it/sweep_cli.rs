//! `--set` overrides and `drmas sweep` through the real binary on the tiny chat model:
//! overrides typed and refused with their text, the resolved experiment in the run
//! folder, a sweep of 2 arms × 2 seeds × 2 steps killed mid-run and resumed whose
//! report matches the runs' own files, sweep files refused with positions, and the
//! interval arithmetic against scipy.

use crate::common;
use drmas::sweep::stats;
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

/// The math team on the tiny model (solver and verifier, each its own model) with 6
/// tasks, written to `dir/exp.toml`; its runs go to `dir/run` unless overridden.
pub(crate) fn experiment(dir: &Path) -> PathBuf {
    let model = common::tiny_models().join("tiny-chat");
    let data = dir.join("tasks.jsonl");
    let rows: String = (0..6)
        .map(|i| {
            format!(
                "{{\"id\": \"t{i}\", \"source\": \"tiny\", \"question\": \"What is {i} + 1?\", \"answer\": \"{}\"}}\n",
                i + 1
            )
        })
        .collect();
    std::fs::write(&data, rows).unwrap();
    let config = dir.join("exp.toml");
    std::fs::write(
        &config,
        format!(
            r#"[experiment]
name = "tiny-sweep"
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
sampling = {{ max_new_tokens = 6 }}

[[agents]]
name = "verifier"
component = "math/verifier"
model = "verifier-lm"
sampling = {{ max_new_tokens = 4 }}

[workflow]
entry = "solver"
max_turns = 3
max_loops = 1

[environment]
component = "math/env"

[[rewards]]
component = "math/boxed"

[normalizer]
component = "norms/drmas"

[data]
train = {{ path = {data:?} }}
val = [{{ path = {data:?}, limit = 3 }}]

[trainer]
steps = 5
prompts_per_step = 2
group_size = 2
save_every = 1

[pool]
devices = ["cpu"]
"#,
            run = dir.join("run").display().to_string(),
            model = model.display().to_string(),
            data = data.display().to_string(),
        ),
    )
    .unwrap();
    config
}

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn overrides_are_typed_and_refused_with_their_text() {
    let dir = tempfile::tempdir().unwrap();
    let config = experiment(dir.path());
    let check = |sets: &[&str]| {
        let mut c = drmas();
        c.arg("check").arg(&config);
        for s in sets {
            c.arg("--set").arg(s);
        }
        c.output().unwrap()
    };
    let ok = check(&[
        "normalizer.component=norms/grpo",
        "agents.verifier.sampling.temperature=0.5",
        "models.solver-lm.lr=2e-3",
    ]);
    assert!(ok.status.success(), "{}", stderr(&ok));
    let out = String::from_utf8_lossy(&ok.stdout);
    assert!(out.contains("normalizer normalizer: norms/grpo"), "{out}");

    let file = config.display().to_string();
    let cases: [(&[&str], String); 6] = [
        (
            &["trainer.steps=abc"],
            format!(
                "{file}: trainer.steps: --set trainer.steps=abc: invalid type: string \"abc\", expected u32"
            ),
        ),
        (
            &["trainer.stepz=3"],
            format!(
                "{file}: trainer.stepz: --set trainer.stepz=3: unknown field `stepz`, expected one of"
            ),
        ),
        (
            &["trainer.steps=0"],
            format!("{file}: trainer.steps: --set trainer.steps=0: must be at least 1"),
        ),
        (
            &["agents.critic.model=x"],
            format!(
                "{file}: agents.critic.model: --set agents.critic.model=x: `agents`: no entry is named `critic` (by name, id or component); there are `solver`, `verifier`"
            ),
        ),
        (
            &["agents.verifier.sampling.temperature=-1"],
            format!(
                "{file}: agents[1].sampling.temperature: --set agents.verifier.sampling.temperature=-1: must be > 0, got -1"
            ),
        ),
        (
            &["normalizer.component=norms/nope"],
            format!(
                "{file}: normalizer.component: --set normalizer.component=norms/nope: plugin `norms` 0.1.0 has no normalizer `nope`"
            ),
        ),
    ];
    for (sets, want) in cases {
        let o = check(sets);
        assert!(!o.status.success(), "{sets:?} should be refused");
        assert!(
            stderr(&o).starts_with(&want),
            "{sets:?}:\n{}\nwant: {want}",
            stderr(&o)
        );
    }
    // Not KEY=VALUE: refused by the command line itself.
    let o = check(&["trainer.steps"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("`trainer.steps` is not KEY=VALUE"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn train_saves_the_resolved_experiment_which_loads_as_the_same_run() {
    let dir = tempfile::tempdir().unwrap();
    let config = experiment(dir.path());
    let run = dir.path().join("other-run");
    let o = drmas()
        .arg("train")
        .arg(&config)
        .args([
            "--set",
            "trainer.steps=1",
            "--set",
            "experiment.seed=5",
            "--quiet",
        ])
        .arg("--set")
        .arg(format!("experiment.output_dir={}", run.display()))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let resolved = run.join("experiment.toml");
    let text = std::fs::read_to_string(&resolved).unwrap();
    assert!(
        text.starts_with(&format!("# {} with overrides", config.display())),
        "{text}"
    );
    assert!(text.contains("#   --set experiment.seed=5"), "{text}");
    let table: toml::Table = toml::from_str(&text).unwrap();
    assert_eq!(table["experiment"]["seed"].as_integer(), Some(5));
    assert_eq!(table["trainer"]["steps"].as_integer(), Some(1));
    // The record loads as the very run: resuming from a copy of it (a run folder may not
    // hold what its command reads) finds nothing changed.
    let copy = dir.path().join("resolved.toml");
    std::fs::copy(&resolved, &copy).unwrap();
    let o = drmas()
        .arg("train")
        .arg(&copy)
        .args(["--resume", "--quiet"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let lines = std::fs::read_to_string(run.join("metrics.jsonl")).unwrap();
    assert_eq!(lines.lines().count(), 1);
}

fn write_sweep(dir: &Path, config: &Path, extra: &str) -> PathBuf {
    let path = dir.join("sweep.toml");
    std::fs::write(
        &path,
        format!(
            r#"[sweep]
name = "tiny"
base = {config:?}
output_dir = {out:?}
seeds = [1, 2]
baseline = "grpo"
final_window = 2

[sweep.set]
"trainer.steps" = 2

[[arms]]
name = "grpo"
set = {{ "normalizer.component" = "norms/grpo", "trainer.shadow_normalizer" = "norms/drmas", "trainer.shadow_gradients" = true }}

[[arms]]
name = "drmas"
set = {{ "normalizer.component" = "norms/drmas", "trainer.shadow_normalizer" = "norms/grpo", "trainer.shadow_gradients" = true }}

[eval]
k = 2

[[verdicts]]
claim = "C1"
arm = "drmas"
metric = "avg_at_k"
holds_if = "above"
{extra}"#,
            config = config.display().to_string(),
            out = dir.join("sweep-out").display().to_string(),
        ),
    )
    .unwrap();
    path
}

pub(crate) fn metrics_lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn a_sweep_killed_mid_run_resumes_and_reports_what_its_runs_measured() {
    let dir = tempfile::tempdir().unwrap();
    let config = experiment(dir.path());
    let sweep = write_sweep(dir.path(), &config, "");
    let out = dir.path().join("sweep-out");

    // Killed (SIGKILL, no chance to clean up) once the first run has a step done.
    let mut child = drmas()
        .arg("sweep")
        .arg(&sweep)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let first = out.join("grpo/seed-1/metrics.jsonl");
    let deadline = Instant::now() + Duration::from_secs(300);
    while !std::fs::read_to_string(&first).is_ok_and(|t| !t.is_empty()) {
        assert!(Instant::now() < deadline, "no step within 5 minutes");
        assert!(
            child.try_wait().unwrap().is_none(),
            "the sweep ended before the kill"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    child.kill().unwrap();
    child.wait().unwrap();

    let status = drmas()
        .arg("sweep")
        .arg(&sweep)
        .arg("--status")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(status.status.success());
    assert!(text.contains("grpo seed 1"), "{text}");
    assert!(text.contains("training: "), "{text}");
    assert!(!text.contains("4 of 4 done"), "{text}");

    // A partial report says so.
    let partial = drmas()
        .arg("sweep")
        .arg(&sweep)
        .arg("--report")
        .output()
        .unwrap();
    assert!(partial.status.success(), "{}", stderr(&partial));
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(md.contains("PARTIAL"), "{md}");

    // A run under way may be asked for more steps (its resume goes on to them), but not
    // to train otherwise: the sweep names it before anything runs.
    let original = std::fs::read_to_string(&sweep).unwrap();
    let steps = "\"trainer.steps\" = 2";
    std::fs::write(&sweep, original.replace(steps, "\"trainer.steps\" = 3")).unwrap();
    let o = drmas()
        .arg("sweep")
        .arg(&sweep)
        .arg("--report")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    std::fs::write(
        &sweep,
        original.replace(
            steps,
            &format!("{steps}\n\"trainer.invalid_penalty\" = 0.5"),
        ),
    )
    .unwrap();
    let o = drmas().arg("sweep").arg(&sweep).output().unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert_eq!(
        stderr(&o),
        format!(
            "error: {}: 1 run(s) were made with settings this sweep no longer asks for (its file or its base experiment changed since); their results would be reported as the new settings':\n  grpo seed 1 ({}): trainer.invalid_penalty: 0.1 → 0.5\nput the settings back, or move these run folders away (or give the sweep another [sweep] output_dir) to run them again with the new settings\n",
            sweep.display(),
            out.join("grpo/seed-1").display()
        )
    );
    std::fs::write(&sweep, &original).unwrap();

    let done = drmas().arg("sweep").arg(&sweep).output().unwrap();
    assert!(done.status.success(), "{}", stderr(&done));
    let status = drmas()
        .arg("sweep")
        .arg(&sweep)
        .arg("--status")
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&status.stdout).contains("4 of 4 done"));

    // Every run: one metrics line per step, the resolved experiment with its arm's
    // normalizer and seed, and its final checkpoint evaluated.
    let mut runs: Vec<(String, u64, Vec<Value>, Value)> = Vec::new();
    for arm in ["grpo", "drmas"] {
        for seed in [1u64, 2] {
            let run = out.join(arm).join(format!("seed-{seed}"));
            let lines = metrics_lines(&run.join("metrics.jsonl"));
            let steps: Vec<u64> = lines.iter().map(|l| l["step"].as_u64().unwrap()).collect();
            assert_eq!(steps, [1, 2], "{arm} seed {seed}");
            let exp: toml::Table =
                toml::from_str(&std::fs::read_to_string(run.join("experiment.toml")).unwrap())
                    .unwrap();
            assert_eq!(
                exp["normalizer"]["component"].as_str(),
                Some(&*format!("norms/{arm}"))
            );
            assert_eq!(exp["experiment"]["seed"].as_integer(), Some(seed as i64));
            let eval: Value =
                serde_json::from_slice(&std::fs::read(run.join("eval-final.json")).unwrap())
                    .unwrap();
            assert_eq!(eval["k"], 2);
            runs.push((arm.to_string(), seed, lines, eval));
        }
    }

    let report: Value =
        serde_json::from_slice(&std::fs::read(out.join("report.json")).unwrap()).unwrap();
    assert_eq!(report["complete"], true);
    assert_eq!(report["runs_done"], 4);
    let of = |arm: &'static str| runs.iter().filter(move |r| r.0 == arm);
    let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
    for (i, &arm) in ["grpo", "drmas"].iter().enumerate() {
        let summary = &report["arms"][i];
        assert_eq!(summary["arm"], *arm);
        // Final reward: the mean of the last 2 steps' reward_mean, then over seeds.
        let finals: Vec<f64> = of(arm)
            .map(|r| {
                let v: Vec<f64> =
                    r.2.iter()
                        .map(|l| l["reward_mean"].as_f64().unwrap())
                        .collect();
                stats::mean(&v[v.len() - 2..])
            })
            .collect();
        let got = summary["final_reward"]["mean"].as_f64().unwrap();
        assert!(
            close(got, stats::mean(&finals)),
            "{arm}: {got} vs {finals:?}"
        );
        let avg: Vec<f64> = of(arm)
            .map(|r| r.3["overall"]["avg_at_k"].as_f64().unwrap())
            .collect();
        let want = stats::t_interval(&avg);
        let got = &summary["avg_at_k"]["overall"];
        assert!(close(got["mean"].as_f64().unwrap(), want.mean));
        if want.low.is_finite() {
            assert!(close(got["low"].as_f64().unwrap(), want.low));
        }
    }
    // Paired against grpo by seed.
    let diffs: Vec<f64> = [1u64, 2]
        .iter()
        .map(|s| {
            let v = |arm: &str| {
                runs.iter().find(|r| r.0 == arm && r.1 == *s).unwrap().3["overall"]["avg_at_k"]
                    .as_f64()
                    .unwrap()
            };
            v("drmas") - v("grpo")
        })
        .collect();
    let paired = &report["paired"][0];
    assert_eq!(paired["arm"], "drmas");
    assert!(close(
        paired["avg_at_k"]["overall"]["difference"]["mean"]
            .as_f64()
            .unwrap(),
        stats::mean(&diffs)
    ));
    // The verdict line states its rule and its numbers.
    let verdict = report["verdicts"][0]["line"].as_str().unwrap();
    assert!(verdict.starts_with("C1: "), "{verdict}");
    assert!(
        verdict.contains("avg_at_k on overall, drmas − grpo"),
        "{verdict}"
    );
    assert!(verdict.contains("over 2 seed pairs (holds if the interval lies above 0)"));
    // The mechanism: each run had the other arm's normalizer as its shadow.
    let mech = &report["mechanism"][0]["agents"][0];
    assert!(mech["adv_sq_mean"]["mean"].as_f64().is_some(), "{mech}");
    // With shadow gradients on, the paired ratio's entries are there (the tiny model's
    // advantages are all 0 here, so its gradients and their ratio are empty).
    assert!(mech.get("log_grad_ratio").is_some(), "{mech}");
    assert!(mech.get("inflation_global").is_some(), "{mech}");
    // The figure and the Markdown report, whole.
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(md.starts_with("# Sweep `tiny`\n"), "{md}");
    assert!(
        std::fs::read(out.join("sweep.png"))
            .unwrap()
            .starts_with(b"\x89PNG")
    );
    assert!(
        std::fs::read_to_string(out.join("sweep.svg"))
            .unwrap()
            .contains("</svg>")
    );

    // The sweep file edited after its runs finished: they were made with 2 steps and
    // it now asks for 3. Neither run over nor reported as the new settings' results;
    // refused with every run, its folder and what changed, before anything runs.
    let text = std::fs::read_to_string(&sweep).unwrap();
    std::fs::write(
        &sweep,
        text.replace("\"trainer.steps\" = 2", "\"trainer.steps\" = 3"),
    )
    .unwrap();
    let report_before = std::fs::read(out.join("report.json")).unwrap();
    let mut want = format!(
        "error: {}: 4 run(s) were made with settings this sweep no longer asks for (its file or its base experiment changed since); their results would be reported as the new settings':",
        sweep.display()
    );
    for (seed, arm) in [(1, "grpo"), (1, "drmas"), (2, "grpo"), (2, "drmas")] {
        want.push_str(&format!(
            "\n  {arm} seed {seed} ({}): trainer.steps: 2 → 3",
            out.join(arm).join(format!("seed-{seed}")).display()
        ));
    }
    want.push_str("\nput the settings back, or move these run folders away (or give the sweep another [sweep] output_dir) to run them again with the new settings\n");
    for extra in [None, Some("--report")] {
        let mut c = drmas();
        c.arg("sweep").arg(&sweep);
        if let Some(a) = extra {
            c.arg(a);
        }
        let o = c.output().unwrap();
        assert!(!o.status.success(), "{extra:?}");
        assert_eq!(stderr(&o), want, "{extra:?}");
    }
    assert_eq!(
        std::fs::read(out.join("report.json")).unwrap(),
        report_before
    );
    for arm in ["grpo", "drmas"] {
        let lines = metrics_lines(&out.join(arm).join("seed-1/metrics.jsonl"));
        assert_eq!(lines.len(), 2, "{arm}: nothing may have run");
    }
    let status = drmas()
        .arg("sweep")
        .arg(&sweep)
        .arg("--status")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(
        text.contains(
            "done (CHANGED since: trainer.steps: 2 → 3; see `drmas sweep` without --status)"
        ),
        "{text}"
    );
    // Put back, the sweep is whole again.
    std::fs::write(
        &sweep,
        std::fs::read_to_string(&sweep)
            .unwrap()
            .replace("\"trainer.steps\" = 3", "\"trainer.steps\" = 2"),
    )
    .unwrap();
    let again = drmas().arg("sweep").arg(&sweep).output().unwrap();
    assert!(again.status.success(), "{}", stderr(&again));
    // The evaluation asked for otherwise after the runs were evaluated: refused too.
    let text = std::fs::read_to_string(&sweep).unwrap();
    std::fs::write(&sweep, text.replace("k = 2", "k = 3")).unwrap();
    let o = drmas().arg("sweep").arg(&sweep).output().unwrap();
    assert_eq!(o.status.code(), Some(1));
    let e = stderr(&o);
    assert!(e.contains("4 run(s) were made with settings"), "{e}");
    assert_eq!(e.matches("): eval.k: 2 → 3\n").count(), 4, "{e}");
    // Other tasks asked for (2 of the 3 each run was evaluated on): refused too.
    let data = dir.path().join("tasks.jsonl");
    let fewer = format!("k = 2\nval = [{{ path = {data:?}, limit = 2 }}]");
    std::fs::write(&sweep, text.replace("k = 2", &fewer)).unwrap();
    let o = drmas().arg("sweep").arg(&sweep).output().unwrap();
    assert_eq!(o.status.code(), Some(1));
    let e = stderr(&o);
    assert_eq!(
        e.matches("): eval tasks: 3 → 2 (1 no longer asked for, 0 new)\n")
            .count(),
        4,
        "{e}"
    );
}

#[test]
fn bad_sweep_files_are_refused_with_their_positions() {
    let dir = tempfile::tempdir().unwrap();
    let config = experiment(dir.path());
    let run = |extra: &str, edit: &dyn Fn(String) -> String| {
        let path = write_sweep(dir.path(), &config, extra);
        let text = edit(std::fs::read_to_string(&path).unwrap());
        std::fs::write(&path, text).unwrap();
        let o = drmas()
            .arg("sweep")
            .arg(&path)
            .arg("--status")
            .output()
            .unwrap();
        assert!(!o.status.success());
        (path.display().to_string(), stderr(&o))
    };
    let (file, e) = run("", &|t| {
        t.replace("baseline = \"grpo\"", "baseline = \"nope\"")
    });
    assert!(
        e.contains(&format!(
            "{file}:6:12: sweep.baseline: no arm is named `nope`; the arms are `grpo`, `drmas`"
        )),
        "{e}"
    );
    let (file, e) = run("", &|t| t.replace("seeds = [1, 2]", "seeds = [1, 1]"));
    assert!(
        e.contains(&format!(
            "{file}:5:13: sweep.seeds[1]: seed 1 is listed twice"
        )),
        "{e}"
    );
    let (file, e) = run("", &|t| {
        t.replace("metric = \"avg_at_k\"", "metric = \"avg\"")
    });
    assert!(
        e.contains(&format!(
            "{file}:26:10: verdicts[0].metric: unknown variant `avg`"
        )),
        "{e}"
    );
    let (file, e) = run(
        "[[verdicts]]\nclaim = \"C2\"\narm = \"drmas\"\nmetric = \"spikes\"\nholds_if = \"below\"\n",
        &|t| t,
    );
    assert!(
        e.contains(&format!(
            "{file}:28:1: verdicts[1]: metric `spikes` is per model: name one with `model`"
        )),
        "{e}"
    );
    // An arm's override is checked against the experiment before anything runs.
    let (file, e) = run("", &|t| {
        t.replace(
            "\"trainer.shadow_normalizer\" = \"norms/grpo\"",
            "\"trainer.shadow\" = 1",
        )
    });
    assert!(
        e.contains(&format!(
            "{}: trainer.shadow: {file}: arm `drmas`: trainer.shadow = 1: unknown field `shadow`",
            config.display()
        )),
        "{e}"
    );
    assert!(
        !dir.path().join("sweep-out").exists(),
        "nothing may be written"
    );
}

/// A verdict naming a model the experiment does not have, or a source its evaluation
/// does not have, could only ever read `unknown … over 0 seed pairs`: refused before
/// anything runs, with the sweep file, the verdict, the name and the names there are.
#[test]
fn verdicts_naming_what_does_not_exist_are_refused_before_any_run() {
    let dir = tempfile::tempdir().unwrap();
    let config = experiment(dir.path());
    let path = write_sweep(
        dir.path(),
        &config,
        "[[verdicts]]\nclaim = \"C2\"\narm = \"drmas\"\nmetric = \"spikes\"\nmodel = \"nosuch-lm\"\nholds_if = \"below\"\n\n[[verdicts]]\nclaim = \"C3\"\narm = \"drmas\"\nmetric = \"pass_at_k\"\nsource = \"nosuch\"\nholds_if = \"above\"\n",
    );
    let file = path.display();
    let want = format!(
        "{file}:32:9: verdicts[1].model: verdict `C2`: the experiment has no model `nosuch-lm`; its models are `solver-lm`, `verifier-lm`\n{file}:39:10: verdicts[2].source: verdict `C3`: the evaluation has no source `nosuch`; its sources are `overall`, `tiny` (the tasks' `source` in [eval] val, else in the experiment's [data] val)\n"
    );
    for extra in [None, Some("--report")] {
        let mut c = drmas();
        c.arg("sweep").arg(&path);
        if let Some(a) = extra {
            c.arg(a);
        }
        let o = c.output().unwrap();
        assert_eq!(o.status.code(), Some(1), "{extra:?}");
        assert_eq!(stderr(&o), want, "{extra:?}");
    }
    assert!(
        !dir.path().join("sweep-out").exists(),
        "nothing may be written"
    );
    // The names that exist pass: a model of the experiment, a source of its tasks.
    let ok = write_sweep(
        dir.path(),
        &config,
        "[[verdicts]]\nclaim = \"C2\"\narm = \"drmas\"\nmetric = \"spikes\"\nmodel = \"verifier-lm\"\nholds_if = \"below\"\n\n[[verdicts]]\nclaim = \"C3\"\narm = \"drmas\"\nmetric = \"pass_at_k\"\nsource = \"tiny\"\nholds_if = \"above\"\n",
    );
    let o = drmas()
        .arg("sweep")
        .arg(&ok)
        .arg("--report")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("PARTIAL report: 0 of 4 runs are done"),
        "{}",
        stderr(&o)
    );
}

/// `base` is read from the sweep file's folder, whatever the working directory; a base
/// that is not there is named with the sweep file and the path it was looked for at.
#[test]
fn a_relative_base_is_read_from_the_sweep_files_folder() {
    let dir = tempfile::tempdir().unwrap();
    let config = experiment(dir.path());
    let sweeps = dir.path().join("sweeps");
    std::fs::create_dir(&sweeps).unwrap();
    let path = write_sweep(&sweeps, &config, "");
    let text = std::fs::read_to_string(&path).unwrap().replace(
        &format!("base = {:?}", config.display().to_string()),
        "base = \"../exp.toml\"",
    );
    assert!(text.contains("base = \"../exp.toml\""), "{text}");
    std::fs::write(&path, &text).unwrap();
    // From the sweep's own folder, from its parent and from elsewhere: the same runs.
    let elsewhere = tempfile::tempdir().unwrap();
    for (cwd, arg) in [
        (sweeps.clone(), PathBuf::from("sweep.toml")),
        (dir.path().to_path_buf(), PathBuf::from("sweeps/sweep.toml")),
        (elsewhere.path().to_path_buf(), path.clone()),
    ] {
        let o = drmas()
            .current_dir(&cwd)
            .arg("sweep")
            .arg(&arg)
            .arg("--status")
            .output()
            .unwrap();
        assert!(o.status.success(), "{}: {}", cwd.display(), stderr(&o));
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(out.contains("0 of 4 done"), "{out}");
    }
    // A base that is not there: the sweep file, the key, what it says and where it was
    // looked for.
    std::fs::write(&path, text.replace("../exp.toml", "../nope.toml")).unwrap();
    let o = drmas()
        .current_dir(dir.path())
        .arg("sweep")
        .arg("sweeps/sweep.toml")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        stderr(&o),
        format!(
            "sweeps/sweep.toml:3:8: sweep.base: the base experiment `../nope.toml`, read from the sweep file's folder as {}, cannot be read: No such file or directory (os error 2)\n",
            dir.path().join("nope.toml").display()
        )
    );
    // An absolute one is named as it is.
    let missing = dir.path().join("gone.toml");
    std::fs::write(
        &path,
        text.replace(
            "\"../exp.toml\"",
            &format!("{:?}", missing.display().to_string()),
        ),
    )
    .unwrap();
    let o = drmas().arg("sweep").arg(&path).output().unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        stderr(&o),
        format!(
            "{}:3:8: sweep.base: the base experiment {} cannot be read: No such file or directory (os error 2)\n",
            path.display(),
            missing.display()
        )
    );
    assert!(!sweeps.join("sweep-out").exists(), "nothing may be written");
    assert!(!dir.path().join("runs").exists(), "nothing may be written");
}

#[test]
fn intervals_match_scipy() {
    let Some(python) = common::venv_python() else {
        panic!("no .venv python: run scripts/setup.sh --test-deps (it installs scipy)")
    };
    let samples = [
        vec![0.5, 0.6, 0.55, 0.7, 0.65],
        vec![1.0, 2.0, 3.0, 4.0],
        vec![0.2, 0.4],
    ];
    let a = [0.81, 0.77, 0.9, 0.85, 0.79];
    let b = [0.75, 0.8, 0.82, 0.8, 0.7];
    let quantiles = [
        (0.975, 1.0),
        (0.975, 2.0),
        (0.975, 4.0),
        (0.975, 9.0),
        (0.95, 29.0),
        (0.025, 4.0),
    ];
    let request = serde_json::json!({
        "quantiles": quantiles.iter().map(|(p, d)| vec![*p, *d]).collect::<Vec<_>>(),
        "paired": [a, b],
        "samples": samples,
    });
    let mut child = Command::new(python)
        .arg(common::script("sweep_stats_reference.py"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(request.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let reference: Value = serde_json::from_slice(&out.stdout).unwrap();
    let close = |x: f64, y: &Value| (x - y.as_f64().unwrap()).abs() < 1e-9 * (1.0 + x.abs());
    for (i, (p, df)) in quantiles.iter().enumerate() {
        let q = stats::t_quantile(*p, *df);
        assert!(
            close(q, &reference["quantiles"][i]),
            "t({p}, {df}) = {q}, scipy {}",
            reference["quantiles"][i]
        );
    }
    let d = stats::paired(&a, &b);
    for (x, y) in [d.mean, d.low, d.high]
        .iter()
        .zip(reference["paired"].as_array().unwrap())
    {
        assert!(close(*x, y), "paired {d:?} vs {}", reference["paired"]);
    }
    for (s, want) in samples.iter().zip(reference["samples"].as_array().unwrap()) {
        let i = stats::t_interval(s);
        for (x, y) in [i.mean, i.low, i.high].iter().zip(want.as_array().unwrap()) {
            assert!(close(*x, y), "{s:?}: {i:?} vs {want}");
        }
    }
}

/// A `--set` value is one TOML value: one that goes on after it (a newline and another
/// key) is refused naming the override, instead of the extra key being dropped.
#[test]
fn a_set_value_is_exactly_one_toml_value() {
    let dir = tempfile::tempdir().unwrap();
    let config = experiment(dir.path());
    let o = drmas()
        .arg("check")
        .arg(&config)
        .args(["--set", "trainer.steps=2\nbogus_key = 99"])
        .output()
        .unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains(
            "`trainer.steps=2\\nbogus_key = 99`: the value must be exactly one TOML value, but after `2` it goes on with `bogus_key` (a newline in the value?)"
        ),
        "{err}"
    );
}

/// A table value replaces the whole table: `check` warns naming the keys it dropped,
/// and the resolved experiment `train` writes carries the note under the override.
#[test]
fn a_table_value_that_drops_keys_is_noted_in_the_warning_and_the_resolved_file() {
    let dir = tempfile::tempdir().unwrap();
    let config = experiment(dir.path());
    let note = "--set trainer.clip={ low = 0.3 } replaces the whole table `trainer.clip`: `dual`, `high` are no longer set (defaults apply); set one key alone (`--set trainer.clip.KEY=VALUE`) to keep the others";
    let sets = [
        "--set",
        "trainer.clip={ low = 0.2, high = 0.28, dual = 3.0 }",
        "--set",
        "trainer.clip={ low = 0.3 }",
    ];
    let o = drmas()
        .arg("check")
        .arg(&config)
        .args(sets)
        .output()
        .unwrap();
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains(&format!(
            "warning: {}: trainer.clip: {note}",
            config.display()
        )),
        "{err}"
    );
    let o = drmas()
        .arg("train")
        .arg(&config)
        .args(sets)
        .args(["--set", "trainer.steps=1", "--quiet"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let resolved = std::fs::read_to_string(dir.path().join("run/experiment.toml")).unwrap();
    assert!(
        resolved.contains(&format!(
            "#   --set trainer.clip={{ low = 0.3 }}\n#     note: {note}\n"
        )),
        "{resolved}"
    );
}
