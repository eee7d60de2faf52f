//! The training loop (ARCHITECTURE.md): each step takes the next tasks, runs G episodes per
//! task, turns scores into advantages with the normalizer plugin, has every model's
//! worker update on its own samples, logs one metrics line, and checkpoints.

mod batch;
mod console;
mod folder;
mod log;
mod policy;
mod resume;
mod rollout;
mod setup;
mod step;
mod stop;

use super::{
    checkpoint::{self, TrainerState},
    data_order::DataCursor,
    fingerprint::Fingerprint,
    run_error::RunError,
    signal,
};
use crate::tracking::Trackers;
use crate::{
    config::{DataSource, TrainerSection},
    plugin::NormalizerHandle,
    pool::{ModelHandle, WorkerConfig},
    rollout::{Sample, Team},
};
use drmas_plugin_api::Task;
use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    sync::Arc,
    time::Instant,
};

pub const METRICS_FILE: &str = "metrics.jsonl";
/// The experiment as the run's last start resolved it (`--set` overrides applied).
pub const EXPERIMENT_FILE: &str = "experiment.toml";
/// One line per resume that went on with a changed experiment (`--accept-changes`).
pub const CHANGES_FILE: &str = "changes.jsonl";

#[derive(Debug, Clone, Default)]
pub struct TrainOptions {
    /// Continue from the run folder's latest complete checkpoint.
    pub resume: bool,
    /// On resume, go on with an experiment that differs from the checkpoint's (the
    /// changes are listed and recorded in `changes.jsonl`) instead of refusing.
    pub accept_changes: bool,
    /// No progress bars or step lines.
    pub quiet: bool,
    pub worker: WorkerConfig,
    /// End this invocation after this many steps without a final checkpoint, as if the
    /// process had been killed there (tests of resume).
    pub halt_after: Option<u32>,
    /// What the models keep in host memory between their uses ([pool] offload).
    pub offload: crate::pool::Offload,
    /// Threads that drive the episodes ([pool] episode_threads; 0 = the default).
    pub episode_threads: usize,
    /// A job of several ranks (docs/distributed.md); `None`: one process.
    pub dist: Option<Arc<crate::pool::DistJob>>,
    /// The experiment's settings and files ([`fingerprint::of_files`]) when taken
    /// already (a rank compares them with the others' when it joins its job);
    /// `None`: [`Trainer::from_experiment`] takes them.
    pub fingerprint: Option<Fingerprint>,
}

/// What a trainer runs that is not a setting: the team (agents, models, environment,
/// rewards) and the normalizers. [`Trainer::from_experiment`] makes them from the
/// experiment's plugins; an embedder or a test may hand in its own
/// ([`Trainer::with_components`]), and everything else is built from the experiment
/// the same way in both.
pub struct Components {
    pub team: Team,
    pub normalizer: NormalizerHandle,
    /// `[trainer] shadow_normalizer`: advantages computed for the metrics only.
    pub shadow: Option<NormalizerHandle>,
}

/// Everything a trainer runs on, from the experiment and its [`Components`].
struct Parts {
    name: String,
    seed: u64,
    run_dir: PathBuf,
    settings: TrainerSection,
    /// `[[models]] grad_clip` where a model has its own.
    grad_clips: std::collections::BTreeMap<String, f64>,
    team: Arc<Team>,
    normalizer: NormalizerHandle,
    shadow: Option<NormalizerHandle>,
    /// Each model with its base learning rate, in the experiment's order.
    models: Vec<(String, ModelHandle, f64)>,
    tasks: Vec<Task>,
    val: Vec<DataSource>,
    /// Where the run's metrics and sample tables go besides `metrics.jsonl`.
    tracking: TrackingSetup,
}

/// `[tracking]` with what MLflow records of a new run.
#[derive(Debug, Clone, Default)]
pub struct TrackingSetup {
    pub settings: crate::tracking::TrackingSection,
    /// The resolved experiment's settings ([`crate::config::mlflow_params`]).
    pub params: Vec<(String, String)>,
    /// drmas's version, the commit and whether the tree was dirty.
    pub tags: Vec<(String, String)>,
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq)]
pub struct RunSummary {
    pub steps_done: u32,
    pub stopped_early: bool,
    pub last_checkpoint: Option<PathBuf>,
    /// The record of the last step this invocation trained.
    pub last_record: Option<crate::record::StepRecord>,
}

pub struct Trainer {
    parts: Parts,
    /// `[trainer]` as the loop uses it.
    policy: policy::Policies,
    handles: Vec<(String, ModelHandle)>,
    state: TrainerState,
    opts: TrainOptions,
    runtime: crate::rollout::EpisodeRuntime,
    /// The checkpoint the last step wrote, if it wrote one.
    last_saved: Option<PathBuf>,
    /// Seconds the last checkpoint took; reported in the next step's line (a step's line
    /// is written before its checkpoint).
    save_seconds: f64,
    /// Each worker's move totals at the last step line (seconds, bytes).
    moves: BTreeMap<String, (f64, u64)>,
    /// The data cursor at the start of the step in flight, while the step has changed
    /// nothing else (no model has taken its update): a stop then can checkpoint the
    /// steps before it. `None` once an update has begun.
    untouched: Option<DataCursor>,
    /// The samples the last step trained on, for `drmas bench step`'s count of the work
    /// the step had to do (a step's prompt and response ids: small beside its models).
    last_samples: Vec<Sample>,
    /// Data parallelism: the trainer's process group and this rank (docs/distributed.md).
    dist: Option<super::dist::TrainerDist>,
    /// TensorBoard and MLflow (rank 0 only).
    trackers: Option<Trackers>,
    /// Rank 0 (or the only process) holds the run folder and alone writes into it.
    _lock: Option<crate::output::OutputLock>,
}

impl Trainer {
    pub fn run_dir(&self) -> &Path {
        &self.parts.run_dir
    }

    /// The samples of the last step (prompts, responses, agents, models); empty before
    /// the first.
    pub fn last_step_samples(&self) -> &[Sample] {
        &self.last_samples
    }

    /// Seconds the last checkpoint took (0 before the first).
    pub fn last_save_seconds(&self) -> f64 {
        self.save_seconds
    }

    pub fn steps_done(&self) -> u32 {
        self.state.step
    }

    pub fn team(&self) -> &Arc<Team> {
        &self.parts.team
    }

    /// Trains until `[trainer] steps`, a stop request (Ctrl-C), or an error; the
    /// trackers then end the run with its status.
    pub fn run(&mut self) -> Result<RunSummary, RunError> {
        let result = self.train_steps();
        let status = match &result {
            Ok(s) if !s.stopped_early => "FINISHED",
            Ok(_) => "KILLED",
            Err(_) => "FAILED",
        };
        if let Some(t) = &mut self.trackers {
            t.finish(status);
        }
        self.tracker_warnings();
        result
    }

    /// The trackers' warnings, to the log and the terminal.
    fn tracker_warnings(&mut self) {
        let warnings = self
            .trackers
            .as_mut()
            .map(Trackers::take_warnings)
            .unwrap_or_default();
        for w in warnings {
            self.warn(&w);
        }
    }

    fn train_steps(&mut self) -> Result<RunSummary, RunError> {
        let total = self.policy.steps.total;
        let mut last_record = None;
        let mut last_checkpoint = checkpoint::latest(&self.parts.run_dir)?.map(|(_, p)| p);
        let mut this_run = 0u32;
        if self.state.step >= total && !self.opts.quiet {
            crate::output::console::err_line(format_args!(
                "the run has done {} steps already; nothing to train (asked for {total})",
                self.state.step
            ));
        }
        while self.state.step < total {
            if self.stop_agreed()? {
                let dir = self.save()?;
                crate::output::console::err_line(format_args!(
                    "stopped at step {}; checkpoint {} (continue with --resume)",
                    self.state.step,
                    dir.display()
                ));
                return Ok(RunSummary {
                    steps_done: self.state.step,
                    stopped_early: true,
                    last_checkpoint: Some(dir),
                    last_record,
                });
            }
            let record = match self.step() {
                Ok(Some(record)) => record,
                Ok(None) => continue, // stopped mid-rollout: the loop top saves and returns
                Err(e) => return Err(self.stopped_by(e)),
            };
            if let Some(dir) = self.last_saved.take() {
                last_checkpoint = Some(dir);
            }
            last_record = Some(record);
            this_run += 1;
            if self.opts.halt_after == Some(this_run) && self.state.step < total {
                return Ok(RunSummary {
                    steps_done: self.state.step,
                    stopped_early: true,
                    last_checkpoint,
                    last_record,
                });
            }
        }
        if self.state.step == total
            && last_checkpoint.as_deref() != Some(&checkpoint::step_dir(&self.parts.run_dir, total))
        {
            last_checkpoint = Some(self.save()?);
        }
        Ok(RunSummary {
            steps_done: self.state.step,
            stopped_early: false,
            last_checkpoint,
            last_record,
        })
    }

    fn is_root(&self) -> bool {
        self.dist.as_ref().is_none_or(|d| d.is_root())
    }

    /// A stop was asked for here or, in a data-parallel job, on any rank.
    fn stop_agreed(&mut self) -> Result<bool, RunError> {
        let here = signal::requested();
        match &mut self.dist {
            Some(d) => d.any(here),
            None => Ok(here),
        }
    }

    /// The checkpoint of the steps done: rank 0 writes it while the others wait (every
    /// rank's weights are the same, and so are its moments, or a sharded optimizer's
    /// are first gathered from every rank, one unit at a time, for rank 0 to write
    /// whole).
    fn save(&mut self) -> Result<PathBuf, RunError> {
        let started = Instant::now();
        let (run, step, keep) = (&self.parts.run_dir, self.state.step, self.policy.saves.keep);
        let staged = match self.is_root() {
            true => checkpoint::stage(run, step)?,
            false => None,
        };
        if let Some(d) = &mut self.dist {
            for (id, handle) in &self.handles {
                let to = staged.as_ref().map(|s| crate::pool::GatherTo {
                    file: checkpoint::gather_file(s, id),
                    model: id.clone(),
                });
                handle.gather_optimizer(to)?;
            }
            d.barrier()?;
        }
        let dir = match staged {
            Some(staged) => checkpoint::commit(staged, run, &self.handles, &self.state, keep)?,
            None => checkpoint::step_dir(run, step),
        };
        if let Some(d) = &mut self.dist {
            d.barrier()?;
        }
        tracing::info!(
            step = self.state.step,
            seconds = started.elapsed().as_secs_f64(),
            "checkpoint written"
        );
        Ok(dir)
    }
}
