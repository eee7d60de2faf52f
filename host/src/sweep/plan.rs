//! The runs of a sweep (arm × seed), each an ordinary run folder
//! `SWEEP_DIR/<arm>/seed-<s>/`, and how far each got, read from its files alone.

use super::file::{Arm, Sweep};
use crate::config::{
    ConfigErrors, DataSource, Experiment, KeyPath, Override, load_experiment_with, parse_experiment,
};
use crate::train::{EXPERIMENT_FILE, METRICS_FILE, checkpoint, fingerprint};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The evaluation of a run's final checkpoint, in its run folder.
pub const EVAL_FILE: &str = "eval-final.json";

/// One run of the sweep.
#[derive(Debug, Clone)]
pub struct RunPlan {
    pub arm: String,
    pub seed: u64,
    pub dir: PathBuf,
    /// The sweep's, the arm's, then the seed and the run folder.
    pub overrides: Vec<Override>,
    /// For the evaluation only: the sweep's `[eval] val`.
    pub eval_overrides: Vec<Override>,
    pub steps: u32,
    /// The run's experiment, loaded with its overrides (for the component checks).
    pub experiment: Experiment,
    /// The validation sets its final checkpoint is evaluated on (`[eval] val` of the
    /// sweep, else the experiment's `[data] val`).
    pub eval_sets: Vec<DataSource>,
}

/// How far a run got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunState {
    NotStarted,
    /// Under way: the last step its metrics have, and the newest checkpoint's step,
    /// where a resume continues (the steps after it are redone).
    Training {
        logged: u64,
        checkpoint: Option<u32>,
    },
    /// Every step done and the final checkpoint written.
    Trained,
    /// Its final checkpoint evaluated.
    Evaluated,
}

impl RunState {
    pub fn describe(self, steps: u32) -> String {
        match self {
            Self::NotStarted => "not started".into(),
            Self::Training { logged, checkpoint } => format!(
                "training: {logged} of {steps} steps, {}",
                match checkpoint {
                    Some(c) => format!("resumes after step {c}"),
                    None => "no checkpoint yet".into(),
                }
            ),
            Self::Trained => format!("trained ({steps} steps), not evaluated"),
            Self::Evaluated => "done".into(),
        }
    }
}

impl RunPlan {
    pub fn label(&self) -> String {
        format!("{} seed {}", self.arm, self.seed)
    }

    pub fn final_checkpoint(&self) -> PathBuf {
        checkpoint::step_dir(&self.dir, self.steps)
    }

    pub fn eval_file(&self) -> PathBuf {
        self.dir.join(EVAL_FILE)
    }

    pub fn metrics_file(&self) -> PathBuf {
        self.dir.join(METRICS_FILE)
    }

    pub fn state(&self) -> RunState {
        if self.eval_file().is_file() {
            return RunState::Evaluated;
        }
        if self.final_checkpoint().join("trainer_state.json").is_file() {
            return RunState::Trained;
        }
        let last = super::collect::read_steps(&self.metrics_file())
            .ok()
            .and_then(|rows| rows.last().map(|r| u64::from(r.step)));
        let checkpoint = checkpoint::latest(&self.dir).ok().flatten().map(|(s, _)| s);
        match last {
            None if !self.dir.exists() => RunState::NotStarted,
            logged => RunState::Training {
                logged: logged.unwrap_or(0),
                checkpoint,
            },
        }
    }
}

/// Every run of the sweep, seeds in file order and arms in file order within a seed;
/// each run's experiment is loaded and checked with its overrides first, so a bad
/// override fails before anything runs.
pub fn plan(sweep: &Sweep) -> Result<Vec<RunPlan>, ConfigErrors> {
    let f = &sweep.file;
    let root = sweep.output_dir();
    let mut runs = Vec::new();
    let mut errors = Vec::new();
    let eval_overrides = match &f.eval.val {
        Some(val) => vec![
            Override::new(
                "data.val",
                val.clone(),
                format!("{}: eval.val", sweep.path.display()),
            )
            .expect("a fixed key"),
        ],
        None => Vec::new(),
    };
    // Seed by seed, every arm of a seed before the next seed: a sweep stopped early has
    // whole pairs to compare.
    for &seed in &f.sweep.seeds {
        for arm in &f.arms {
            match plan_run(sweep, arm, seed, &root, &eval_overrides) {
                Ok(run) => runs.push(run),
                Err(e) => errors.extend(e.0),
            }
        }
    }
    if errors.is_empty() {
        Ok(runs)
    } else {
        // One bad override shows in every seed of its arm: say it once.
        errors.dedup_by(|a, b| a.key == b.key && a.message == b.message);
        Err(ConfigErrors(errors))
    }
}

fn plan_run(
    sweep: &Sweep,
    arm: &Arm,
    seed: u64,
    root: &std::path::Path,
    eval_overrides: &[Override],
) -> Result<RunPlan, ConfigErrors> {
    let base = &sweep.base;
    let not_an_override = |message: String| {
        ConfigErrors(vec![crate::config::ConfigError {
            file: sweep.path.clone(),
            line: 0,
            col: 0,
            key: format!("arms.{}", arm.name),
            message,
        }])
    };
    let dir = root.join(&arm.name).join(format!("seed-{seed}"));
    let mut overrides = sweep.arm_overrides(arm).map_err(not_an_override)?;
    let origin = format!("{}: seed {seed}", sweep.path.display());
    overrides.push(
        Override::new(
            "experiment.seed",
            toml::Value::Integer(seed as i64),
            origin.clone(),
        )
        .expect("a fixed key"),
    );
    overrides.push(
        Override::new(
            "experiment.output_dir",
            dir.display().to_string().into(),
            origin,
        )
        .expect("a fixed key"),
    );
    let exp: Experiment = load_experiment_with(base, &overrides)?;
    if exp.file.data.train.is_none() {
        return Err(not_an_override(format!(
            "{}: the experiment has no [data] train set",
            base.display()
        )));
    }
    let mut with_eval = overrides.clone();
    with_eval.extend(eval_overrides.iter().cloned());
    let checked = load_experiment_with(base, &with_eval)?;
    if checked.file.data.val.is_empty() {
        return Err(not_an_override(format!(
            "{}: no [data] val sets to evaluate on (set them in the experiment or as [eval] val)",
            base.display()
        )));
    }
    Ok(RunPlan {
        arm: arm.name.clone(),
        seed,
        dir,
        overrides,
        eval_overrides: eval_overrides.to_vec(),
        steps: exp.file.trainer.steps,
        experiment: exp,
        eval_sets: checked.file.data.val.clone(),
    })
}

/// An override as the `drmas` command line takes it: `KEY=VALUE`, the value in TOML.
pub fn as_arg(o: &Override) -> String {
    format!("{}={}", o.key(), o.value)
}

/// What the evaluation of a run's final checkpoint runs on: its tasks' uids
/// (`source/id`, as `eval-final.json` keys them) and their sources.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EvalTasks {
    pub uids: BTreeSet<String>,
    pub sources: BTreeSet<String>,
}

/// The tasks of `sets` (each with its own `limit`, as `drmas eval` reads them).
pub fn eval_tasks(sets: &[DataSource]) -> Result<EvalTasks, String> {
    let mut out = EvalTasks::default();
    for set in sets {
        let tasks = crate::data::load_tasks(set).map_err(|e| e.to_string())?;
        for t in tasks {
            out.uids.insert(format!("{}/{}", t.source, t.id));
            out.sources.insert(t.source);
        }
    }
    Ok(out)
}

/// The evaluation tasks of each arm (its first run's; the seed changes neither).
pub fn eval_tasks_by_arm(
    runs: &[RunPlan],
) -> std::collections::BTreeMap<String, Result<EvalTasks, String>> {
    let mut out = std::collections::BTreeMap::new();
    for r in runs {
        if !out.contains_key(&r.arm) {
            out.insert(r.arm.clone(), eval_tasks(&r.eval_sets));
        }
    }
    out
}

fn names<'a>(names: impl IntoIterator<Item = &'a String>) -> String {
    names
        .into_iter()
        .map(|n| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The names the verdicts use, checked before anything runs (a name that is not there
/// could only ever give `unknown … over 0 seed pairs`): a verdict's `model` must be a
/// model of the experiment of its arm and of the baseline, its `source` `overall` or a
/// source of the tasks both are evaluated on. Errors name the sweep file, the verdict's
/// position and claim, the name and the names there are.
pub fn check_verdicts(
    sweep: &Sweep,
    runs: &[RunPlan],
    tasks: &std::collections::BTreeMap<String, Result<EvalTasks, String>>,
) -> Result<(), ConfigErrors> {
    let f = &sweep.file;
    let map = sweep.source_map();
    let mut errors = Vec::new();
    let mut err = |path: KeyPath, message: String| errors.push(sweep.error_at(&map, path, message));
    for (i, rule) in f.verdicts.iter().enumerate() {
        let here = KeyPath::root().key("verdicts").index(i);
        let arms = [rule.arm.as_str(), f.sweep.baseline.as_str()];
        let plans: Vec<&RunPlan> = arms
            .iter()
            .filter_map(|a| runs.iter().find(|r| r.arm == *a))
            .collect();
        if let Some(model) = &rule.model {
            let mut ids: Option<BTreeSet<String>> = None;
            for p in &plans {
                let these: BTreeSet<String> = p
                    .experiment
                    .file
                    .models
                    .iter()
                    .map(|m| m.id.clone())
                    .collect();
                ids = Some(match ids {
                    None => these,
                    Some(ids) => ids.intersection(&these).cloned().collect(),
                });
            }
            let ids = ids.unwrap_or_default();
            if !ids.contains(model) {
                err(
                    here.key("model"),
                    format!(
                        "verdict `{}`: the experiment has no model `{model}`; its models are {}",
                        rule.claim,
                        names(&ids)
                    ),
                );
            }
        }
        if let Some(source) = &rule.source
            && source != "overall"
        {
            let mut sources: Option<BTreeSet<String>> = None;
            let mut unreadable = None;
            for p in &plans {
                match tasks.get(&p.arm) {
                    Some(Ok(t)) => {
                        sources = Some(match sources {
                            None => t.sources.clone(),
                            Some(s) => s.intersection(&t.sources).cloned().collect(),
                        });
                    }
                    Some(Err(e)) => unreadable = Some(e.clone()),
                    None => {}
                }
            }
            if let Some(e) = unreadable {
                err(
                    here.key("source"),
                    format!(
                        "verdict `{}`: the evaluation's tasks cannot be read to check source `{source}`: {e}",
                        rule.claim
                    ),
                );
                continue;
            }
            let sources = sources.unwrap_or_default();
            if !sources.contains(source) {
                let all: Vec<String> = std::iter::once("overall".to_string())
                    .chain(sources)
                    .collect();
                err(
                    here.key("source"),
                    format!(
                        "verdict `{}`: the evaluation has no source `{source}`; its sources are {} (the tasks' `source` in [eval] val, else in the experiment's [data] val)",
                        rule.claim,
                        names(&all)
                    ),
                );
            }
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(ConfigErrors(errors))
    }
}

/// Keys that may differ between what a finished run recorded and what the sweep asks
/// now without changing what the run computed or what the report reads from it: where
/// it ran and was written, how often it saved, how an update is cut into memory-sized
/// pieces, where plugins are found, the evaluations between steps, tracking. A key
/// matches an entry equal to it or below it; `[*]` stands for any list element.
pub const NO_EFFECT: &[&str] = &[
    "experiment.output_dir",
    "plugins.dirs",
    "plugins.allow_untrusted",
    "plugins.sha256",
    "trainer.save_every",
    "trainer.keep_checkpoints",
    "trainer.eval_every",
    "trainer.eval_k",
    "trainer.eval_limit",
    "trainer.micro_batch_tokens",
    "trainer.logits_budget_mb",
    "trainer.share_prompts",
    "pool",
    "models[*].device",
    "tracking",
];

impl RunPlan {
    /// What differs between this run's folder and what the sweep asks for now, as
    /// `key: old → new`. The experiment is compared with the one the folder recorded
    /// (`experiment.toml`, written at each start of its training), setting by setting
    /// with defaults filled in. A run under way is held only to what its resume could
    /// not take (the trainer's own rule: `trainer.steps` and the keys of
    /// [`fingerprint::MAY_CHANGE`] may change, the rest the trainer checks again); a
    /// trained or evaluated one to every key but those of [`NO_EFFECT`], and an
    /// evaluated one's `eval-final.json` to the sweep's `[eval]` (k, temperature,
    /// top-p, success threshold and the tasks, `eval_tasks`, when known).
    pub fn changes(&self, sweep: &Sweep, eval_tasks: Option<&EvalTasks>) -> Vec<String> {
        let state = self.state();
        let record = self.dir.join(EXPERIMENT_FILE);
        let Ok(text) = std::fs::read_to_string(&record) else {
            return Vec::new();
        };
        let recorded = match parse_experiment(&record, text) {
            Ok(e) => e,
            Err(e) => {
                let first = e.0.first().map_or_else(String::new, |e| e.to_string());
                return vec![format!("its experiment.toml does not load: {first}")];
            }
        };
        let finished = matches!(state, RunState::Trained | RunState::Evaluated);
        let own_val = sweep.file.eval.val.is_some();
        let ignored = |key: &str| {
            if finished {
                fingerprint::listed(NO_EFFECT, key)
                    || (own_val && fingerprint::listed(&["data.val"], key))
            } else {
                key == "trainer.steps" || fingerprint::may_change(key)
            }
        };
        let old = crate::config::flatten_spelled(&recorded.file);
        let new = crate::config::flatten_spelled(&self.experiment.file);
        let keys: BTreeSet<&String> = old.keys().chain(new.keys()).collect();
        let mut out: Vec<String> = keys
            .into_iter()
            .filter(|k| !ignored(k))
            .filter(|k| old.get(*k) != new.get(*k))
            .map(|k| {
                fingerprint::Change {
                    key: k.clone(),
                    old: old.get(k).cloned(),
                    new: new.get(k).cloned(),
                }
                .to_string()
            })
            .collect();
        if state == RunState::Evaluated {
            out.extend(eval_changes(&self.eval_file(), sweep, eval_tasks));
        }
        out
    }
}

/// The differences between an evaluation's settings (`eval-final.json`) and the
/// sweep's `[eval]`.
fn eval_changes(path: &Path, sweep: &Sweep, tasks: Option<&EvalTasks>) -> Vec<String> {
    let report = match crate::eval::read_report(path) {
        Ok(r) => r,
        Err(crate::eval::ReportError::Io { .. }) => return Vec::new(),
        Err(e) => return vec![e.to_string()],
    };
    let e = &sweep.file.eval;
    let mut out = Vec::new();
    let mut compare = |key: &str, was: f64, now: f64| {
        if was != now {
            out.push(format!("eval.{key}: {was} → {now}"));
        }
    };
    compare("k", report.k as f64, f64::from(e.k));
    compare("temperature", report.temperature, e.temperature);
    compare("top_p", report.top_p, e.top_p);
    compare(
        "success_threshold",
        report.success_threshold,
        e.success_threshold,
    );
    // The tasks evaluated: those with a completed episode (a task whose every episode
    // failed has no count, and is not taken for one no longer asked for).
    if let Some(tasks) = tasks {
        let was: BTreeSet<&String> = report.overall.per_task.keys().collect();
        let now: BTreeSet<&String> = tasks.uids.iter().collect();
        let gone = was.difference(&now).count();
        let new = now.difference(&was).count();
        let failed = report.failed_episodes > 0;
        if gone > 0 || (new > 0 && !failed) {
            out.push(format!(
                "eval tasks: {} → {} ({gone} no longer asked for, {new} new)",
                was.len(),
                now.len()
            ));
        }
    }
    out
}

/// One line per run that `changes` finds, and what to do; `None` when there is none.
pub fn changed_message(sweep: &Sweep, changed: &[(&RunPlan, Vec<String>)]) -> Option<String> {
    if changed.is_empty() {
        return None;
    }
    let mut text = format!(
        "{}: {} run(s) were made with settings this sweep no longer asks for (its file or its base experiment changed since); their results would be reported as the new settings':",
        sweep.path.display(),
        changed.len()
    );
    for (run, changes) in changed {
        text.push_str(&format!(
            "\n  {} ({}): {}",
            run.label(),
            run.dir.display(),
            changes.join("; ")
        ));
    }
    text.push_str(
        "\nput the settings back, or move these run folders away (or give the sweep another [sweep] output_dir) to run them again with the new settings",
    );
    Some(text)
}
