//! The runs of a sweep (arm × seed), each an ordinary run folder
//! `SWEEP_DIR/<arm>/seed-<s>/`, and how far each got, read from its files alone.

use super::file::{Arm, Sweep};
use crate::config::{ConfigErrors, Experiment, Override, load_experiment_with};
use crate::train::{METRICS_FILE, checkpoint};
use std::path::PathBuf;

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
            .and_then(|rows| rows.last().map(|r| r.step));
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
    let base = &sweep.file.sweep.base;
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
    })
}

/// An override as the `drmas` command line takes it: `KEY=VALUE`, the value in TOML.
pub fn as_arg(o: &Override) -> String {
    format!("{}={}", o.key(), o.value)
}
