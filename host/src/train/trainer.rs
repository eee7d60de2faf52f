//! The training loop (ARCHITECTURE.md): each step takes the next tasks, runs G episodes per
//! task, turns scores into advantages with the normalizer plugin, has every model's
//! worker update on its own samples, logs one metrics line, and checkpoints.

use super::{
    checkpoint::{self, TrainerState},
    data_order::DataCursor,
    fingerprint::{self, Fingerprint},
    mechanism::ShadowComparison,
    metrics::{ModelStep, Staleness, StepInput, StepTimes, line_step, step_line},
    run_error::RunError,
    signal,
};
use crate::tracking::Trackers;
use crate::{
    config::{DataSource, Experiment, TrainerSection},
    eval::{EvalOptions, evaluate},
    launch::{LaunchOptions, launch},
    output,
    plugin::{NormalizerHandle, Registry},
    pool::{ModelHandle, WorkerConfig},
    rollout::{
        EpisodeOutcome, EpisodeSpec, FailureWatch, RolloutError, Sample, Team, run_episodes_until,
    },
    update::{BatchShare, LrSchedule, TrainSample, UpdateBatch, UpdateProgress, UpdateReport},
};
use drmas_plugin_api::{SampleRow, Task};
use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    sync::Arc,
    time::{Duration, Instant},
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

/// Everything a trainer runs on; [`Trainer::from_experiment`] builds it from a file,
/// tests build it by hand.
pub struct TrainerParts {
    pub name: String,
    pub seed: u64,
    pub run_dir: PathBuf,
    pub settings: TrainerSection,
    pub team: Arc<Team>,
    pub normalizer: NormalizerHandle,
    /// `[trainer] shadow_normalizer`: advantages computed for the metrics only.
    pub shadow: Option<NormalizerHandle>,
    /// Each model with its base learning rate, in the experiment's order.
    pub models: Vec<(String, ModelHandle, f64)>,
    pub tasks: Vec<Task>,
    pub val: Vec<DataSource>,
    /// Where the run's metrics and sample tables go besides `metrics.jsonl`.
    pub tracking: TrackingSetup,
}

/// `[tracking]` with what MLflow records of a new run.
#[derive(Debug, Clone, Default)]
pub struct TrackingSetup {
    pub settings: crate::tracking::TrackingSection,
    /// The resolved experiment, flattened (`trainer.group_size` → `8`).
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
    pub last_line: Option<serde_json::Value>,
}

pub struct Trainer {
    parts: TrainerParts,
    handles: Vec<(String, ModelHandle)>,
    state: TrainerState,
    opts: TrainOptions,
    runtime: crate::rollout::EpisodeRuntime,
    schedule: LrSchedule,
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
    /// Loads the experiment's data, starts its models for training, creates the
    /// normalizer, takes the run folder, and restores the latest checkpoint when
    /// resuming.
    pub fn from_experiment(
        exp: &Experiment,
        registry: &Registry,
        opts: TrainOptions,
    ) -> Result<Self, RunError> {
        let f = &exp.file;
        let train = f
            .data
            .train
            .as_ref()
            .ok_or_else(|| RunError::NoTrainData(exp.path.clone()))?;
        let tasks = crate::data::load_tasks(train)?;
        let run_dir = exp.output_dir();
        // Only rank 0 of a data-parallel job writes into the run folder.
        let root = opts.dist.as_ref().is_none_or(|d| d.rank == 0);
        // Refuse before loading models: that takes a while, and a refusal should not.
        let lock = root
            .then(|| take_run_folder(&run_dir, opts.resume))
            .transpose()?;
        if root {
            // The experiment as this run trains it (any overrides applied), loadable as is.
            let resolved = run_dir.join(EXPERIMENT_FILE);
            crate::output::write_atomic(&resolved, exp.resolved_text().as_bytes())
                .map_err(|e| RunError::io(&resolved, e))?;
        }
        let warm = f.trainer.warm_start.as_ref();
        let team = launch(
            exp,
            registry,
            &LaunchOptions {
                // A warm start loads its weights where the experiment's would be; a
                // resume then puts the run's own on top.
                checkpoint: warm.map(|w| w.checkpoint.clone()),
                worker: opts.worker.clone(),
                train: true,
                dist: opts.dist.clone(),
            },
        )?;
        let opts = TrainOptions {
            offload: f.pool.offload,
            episode_threads: f.pool.episode_threads,
            ..opts
        };
        let normalizer = registry
            .create_normalizer(
                &f.normalizer.component,
                &crate::config::config_text(&f.normalizer.config),
                &exp.resolve_policy(),
            )
            .map_err(RolloutError::from)?;
        let shadow = f
            .trainer
            .shadow_normalizer
            .as_ref()
            .map(|s| {
                registry.create_normalizer(
                    &s.component,
                    &crate::config::config_text(&s.config),
                    &exp.resolve_policy(),
                )
            })
            .transpose()
            .map_err(RolloutError::from)?;
        let models: Vec<(String, ModelHandle, f64)> = f
            .models
            .iter()
            .map(|m| {
                let handle = team.models[&m.id].handle.clone();
                (m.id.clone(), handle, m.lr)
            })
            .collect();
        let handles: Vec<(String, ModelHandle)> = models
            .iter()
            .map(|(id, h, _)| (id.clone(), h.clone()))
            .collect();
        let fingerprint = match opts.fingerprint.clone() {
            // Taken when this rank joined its job (before the models loaded).
            Some(files) => fingerprint::with_dtypes(files, &handles),
            None => {
                fingerprint::of_experiment(exp, &handles).map_err(|(p, e)| RunError::io(p, e))?
            }
        };
        let record = super::run_record::RunRecord::gather(exp, registry, &fingerprint);
        if root {
            record.write(&run_dir)?;
        }
        let record_tags = record.tags();
        if let Some(w) = warm
            && !opts.resume
            && root
        {
            super::warm_start::begin(&run_dir, w, &handles)?;
        }
        Self::with_lock(
            TrainerParts {
                name: f.experiment.name.clone(),
                seed: f.experiment.seed,
                run_dir,
                settings: f.trainer.clone(),
                team: Arc::new(team),
                normalizer,
                shadow,
                models,
                tasks,
                val: f.data.val.clone(),
                tracking: TrackingSetup {
                    settings: f.tracking.clone(),
                    params: super::run_record::experiment_params(&exp.resolved_text()),
                    tags: record_tags,
                },
            },
            opts,
            lock,
            fingerprint,
        )
    }

    pub fn new(parts: TrainerParts, opts: TrainOptions) -> Result<Self, RunError> {
        let root = opts.dist.as_ref().is_none_or(|d| d.rank == 0);
        let lock = root
            .then(|| take_run_folder(&parts.run_dir, opts.resume))
            .transpose()?;
        let rewards: Vec<(String, f64, Option<Vec<String>>)> = parts
            .team
            .rewards
            .iter()
            .map(|r| (r.handle.id.name.clone(), r.weight, r.agents.clone()))
            .collect();
        let fingerprint = fingerprint::of_parts(
            &parts.settings,
            &parts.models,
            &parts.normalizer.id.name,
            &rewards,
            &parts.tasks,
        );
        Self::with_lock(parts, opts, lock, fingerprint)
    }

    /// [`Self::new`] with the run folder's lock already held and the run's fingerprint
    /// taken.
    fn with_lock(
        parts: TrainerParts,
        opts: TrainOptions,
        lock: Option<crate::output::OutputLock>,
        fingerprint: Fingerprint,
    ) -> Result<Self, RunError> {
        if parts.tasks.is_empty() {
            return Err(RunError::EmptyTrainData {
                path: parts.run_dir.clone(),
            });
        }
        let dist = opts
            .dist
            .as_ref()
            .map(|job| {
                let group = job
                    .group("trainer", tch::Device::Cpu)
                    .map_err(|e| RunError::Dist(e.to_string()))?;
                Ok::<_, RunError>(super::dist::TrainerDist {
                    group,
                    rank: job.rank,
                    world_size: job.world_size,
                })
            })
            .transpose()?;
        let root = dist.as_ref().is_none_or(|d| d.is_root());
        if root {
            checkpoint::clean_leftovers(&parts.run_dir)?;
        }
        let handles: Vec<(String, ModelHandle)> = parts
            .models
            .iter()
            .map(|(id, h, _)| (id.clone(), h.clone()))
            .collect();
        let state = match opts.resume {
            true => resume(&parts, &handles, &opts, &fingerprint, root)?,
            false => TrainerState {
                fingerprint: Some(fingerprint),
                ..TrainerState::new(&parts.name, parts.seed)
            },
        };
        let mut state = state;
        let trackers = root.then(|| {
            let tracking = &parts.tracking;
            Trackers::open(
                &parts.run_dir,
                &tracking.settings,
                opts.resume
                    .then_some((&state.tracking, u64::from(state.step))),
                &tracking.params,
                &tracking.tags,
            )
        });
        if let Some(t) = &trackers {
            state.tracking = t.state();
        }
        let runtime = crate::rollout::EpisodeRuntime::with_threads(opts.episode_threads)
            .map_err(|e| RunError::io(&parts.run_dir, e))?;
        let t = &parts.settings;
        let schedule = LrSchedule {
            kind: t.lr_schedule,
            warmup_steps: t.warmup_steps,
            total_steps: t.steps,
            min_lr_ratio: t.min_lr_ratio,
        };
        Ok(Self {
            parts,
            handles,
            state,
            opts,
            runtime,
            schedule,
            last_saved: None,
            save_seconds: 0.0,
            moves: BTreeMap::new(),
            untouched: None,
            last_samples: Vec::new(),
            dist,
            trackers,
            _lock: lock,
        })
    }

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
        let total = self.parts.settings.steps;
        let mut last_line = None;
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
                    last_line,
                });
            }
            let line = match self.step() {
                Ok(Some(line)) => line,
                Ok(None) => continue, // stopped mid-rollout: the loop top saves and returns
                Err(e) => return Err(self.stopped_by(e)),
            };
            if let Some(dir) = self.last_saved.take() {
                last_checkpoint = Some(dir);
            }
            last_line = Some(line);
            this_run += 1;
            if self.opts.halt_after == Some(this_run) && self.state.step < total {
                return Ok(RunSummary {
                    steps_done: self.state.step,
                    stopped_early: true,
                    last_checkpoint,
                    last_line,
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
            last_line,
        })
    }
}

/// What the rollout phase of a step hands on.
struct Rollout {
    outcomes: Vec<EpisodeOutcome>,
    /// Whether each outcome's episode ran on this rank (all of them in one process).
    local: Vec<bool>,
    /// Episodes that failed (their samples are dropped).
    failed: usize,
    tally: crate::rollout::FailureTally,
    epoch: u64,
}

/// What watching one model's update found.
struct Watched {
    spike: bool,
    spikes_total: u64,
    skipped_in_a_row: u32,
}

/// Model `id`'s share of this rank's samples as its worker's update batch: the step's
/// `samples` (every rank's, in episode order) where `mine` says they are this rank's.
/// In a data-parallel job (`distributed`) the batch says where its samples sit among
/// all ranks' (see [`BatchShare`]).
///
/// A sample more than `policy.bound` versions behind the model's weights
/// (`policy.current`) is left out, on every rank alike (each rank sees every sample's
/// version), and counted in the returned [`Staleness`] over all ranks' samples.
fn update_batch(
    samples: &[Sample],
    mine: &[bool],
    distributed: bool,
    id: &str,
    step: u32,
    lr: f64,
    policy: PolicyWindow,
) -> (UpdateBatch, Staleness) {
    let mut totals: BTreeMap<String, usize> = BTreeMap::new();
    let mut local = Vec::new();
    let mut positions = Vec::new();
    let mut staleness = Staleness::default();
    for (s, &mine) in samples.iter().zip(mine).filter(|(s, _)| s.model == id) {
        let lag = policy.current.saturating_sub(s.policy_version);
        staleness.max = staleness.max.max(lag);
        if lag > 0 {
            staleness.stale += 1;
        }
        if lag > policy.bound {
            staleness.refused += 1;
            continue;
        }
        let place = totals.entry(s.agent.clone()).or_default();
        if mine {
            local.push(TrainSample {
                agent: s.agent.clone(),
                prompt: s.prompt_ids.clone(),
                response: s.response_ids.clone(),
                sample_logprobs: s.logprobs.clone(),
                temperature: s.temperature,
                advantage: s.advantage,
            });
            positions.push(*place);
        }
        *place += 1;
    }
    let batch = UpdateBatch {
        step,
        lr,
        samples: local,
        share: distributed.then_some(BatchShare {
            agent_totals: totals,
            positions,
        }),
        progress: Arc::new(UpdateProgress::default()),
    };
    (batch, staleness)
}

/// The policy versions a model's update takes samples from: its weights' version and
/// how far behind it a sample may be (`[trainer] max_staleness`).
#[derive(Debug, Clone, Copy)]
struct PolicyWindow {
    current: u64,
    bound: u64,
}

/// Refuses a run folder that is a file, takes the folder's lock, and then — with the
/// lock held, so that a folder another process is training is reported as in use, not
/// as holding a run — judges what is in it.
fn take_run_folder(run: &Path, resume: bool) -> Result<crate::output::OutputLock, RunError> {
    if run.exists() && !run.is_dir() {
        return Err(RunError::Resume {
            path: run.to_path_buf(),
            message: "the run folder is a file".into(),
        });
    }
    let lock = crate::output::OutputLock::run_folder(run)?;
    check_run_folder(run, resume)?;
    Ok(lock)
}

/// The run's own files must be what drmas writes there, and a fresh run must not write
/// over another run's results.
fn check_run_folder(run: &Path, resume: bool) -> Result<(), RunError> {
    let metrics = run.join(METRICS_FILE);
    if metrics.exists() && !metrics.is_file() {
        return Err(RunError::Resume {
            path: metrics,
            message: "is a folder, not the run's metrics log (a file drmas writes one line per step to): move it out of the way".into(),
        });
    }
    let checkpoints = checkpoint::checkpoints_dir(run);
    if checkpoints.exists() && !checkpoints.is_dir() {
        return Err(RunError::Resume {
            path: checkpoints,
            message: "is a file, not the run's folder of checkpoints: move it out of the way"
                .into(),
        });
    }
    if resume {
        return Ok(());
    }
    let has_metrics = std::fs::metadata(&metrics).is_ok_and(|m| m.len() > 0);
    let has_checkpoints = !checkpoint::list(run)?.is_empty();
    if has_metrics || has_checkpoints {
        return Err(RunError::Resume {
            path: run.to_path_buf(),
            message: "this run folder already holds a run: continue it with --resume, or set another [experiment] output_dir".into(),
        });
    }
    Ok(())
}

/// A note for the log, and for the terminal unless quiet.
fn note(quiet: bool, msg: &str) {
    tracing::warn!("{msg}");
    if !quiet {
        crate::output::console::err_line(format_args!("{msg}"));
    }
}

/// The state a resume starts from: the newest checkpoint, none of whose parts is
/// trusted (its files against its manifest, its state against its folder, its
/// experiment against this one, the metrics log against its step), then its models;
/// the metrics lines past it are dropped. Without a checkpoint, a fresh state.
fn resume(
    parts: &TrainerParts,
    handles: &[(String, ModelHandle)],
    opts: &TrainOptions,
    fingerprint: &Fingerprint,
    root: bool,
) -> Result<TrainerState, RunError> {
    let metrics = parts.run_dir.join(METRICS_FILE);
    let Some((step, dir)) = checkpoint::latest(&parts.run_dir)? else {
        if root {
            output::truncate_lines(&metrics, |_| false).map_err(|e| RunError::io(&metrics, e))?;
        }
        return Ok(TrainerState {
            fingerprint: Some(fingerprint.clone()),
            ..TrainerState::new(&parts.name, parts.seed)
        });
    };
    let (mut state, verified) =
        checkpoint::open(&dir).map_err(|e| with_the_way_back(e, &parts.run_dir, step))?;
    if state.experiment != parts.name || state.seed != parts.seed {
        return Err(RunError::Resume {
            path: dir,
            message: format!(
                "it is a checkpoint of experiment `{}` with seed {}, not `{}` with seed {}",
                state.experiment, state.seed, parts.name, parts.seed
            ),
        });
    }
    let changes = match &state.fingerprint {
        Some(old) => fingerprint::changes(old, fingerprint),
        None => Vec::new(),
    };
    if !changes.is_empty() && !opts.accept_changes {
        return Err(RunError::Changed {
            checkpoint: dir,
            changes: changes.iter().map(|c| c.to_string()).collect(),
            record: parts.run_dir.join(CHANGES_FILE),
        });
    }
    let text = match std::fs::read_to_string(&metrics) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(RunError::io(&metrics, e)),
    };
    super::metrics::check_steps(&text, step).map_err(|m| RunError::Resume {
        path: metrics.clone(),
        message: format!(
            "{m}; resuming from {} needs one line for each of steps 1 to {step}",
            dir.display()
        ),
    })?;
    checkpoint::load_models(&dir, handles)?;
    // Lines of steps after the checkpoint are redone; a cut-off line dropped.
    if root {
        output::truncate_lines(&metrics, |l| line_step(l).is_some_and(|s| s <= step))
            .map_err(|e| RunError::io(&metrics, e))?;
    }
    if state.fingerprint.is_none() || !verified {
        note(
            opts.quiet,
            &format!(
                "note: {} was written by an older drmas: its files are not checked against a manifest, and what changed in the experiment since cannot be listed (the next checkpoint records both)",
                dir.display()
            ),
        );
    }
    if !changes.is_empty() && root {
        let record = parts.run_dir.join(CHANGES_FILE);
        let line = serde_json::json!({
            "step": step,
            "checkpoint": dir,
            "changes": changes,
        });
        output::append_line(&record, &line.to_string()).map_err(|e| RunError::io(&record, e))?;
        for c in &changes {
            note(opts.quiet, &format!("resuming with a change: {c}"));
        }
    }
    if !opts.quiet && root {
        crate::output::console::err_line(format_args!(
            "resuming from {} (step {step})",
            dir.display()
        ));
    }
    state.fingerprint = Some(fingerprint.clone());
    Ok(state)
}

/// A newest checkpoint that cannot be used leaves the one before it: the refusal says
/// how to resume from that (the user decides; losing steps silently is not an option).
fn with_the_way_back(error: RunError, run: &Path, step: u32) -> RunError {
    let RunError::Checkpoint { path, message } = error else {
        return error;
    };
    let earlier = checkpoint::list(run)
        .ok()
        .and_then(|all| all.into_iter().rev().find(|(s, _)| *s < step));
    let message = match earlier {
        Some((_, dir)) => format!(
            "{message}; to resume from the checkpoint before it ({}), move this one out of the checkpoints folder",
            dir.file_name().unwrap_or_default().to_string_lossy()
        ),
        None => message,
    };
    RunError::Checkpoint { path, message }
}

/// "step 3" or "steps 1–3".
fn steps_upto(n: u32) -> String {
    match n {
        1 => "step 1".into(),
        n => format!("steps 1–{n}"),
    }
}

/// "is" for one step, "are" for more.
fn is_are(n: u32) -> &'static str {
    match n {
        1 => "is",
        _ => "are",
    }
}

impl Trainer {
    /// What a run that stops on `error` keeps, said with the error. While the step in
    /// flight has changed nothing but the data cursor (a rollout or advantages error:
    /// the failure limit, every episode failed, a plugin error), the cursor goes back
    /// and the steps done are checkpointed, as Ctrl-C does. Once a model may have taken
    /// its update, the state is not a step boundary: the newest checkpoint is named, and
    /// a resume redoes the steps after it (it drops their metrics lines).
    fn stopped_by(&mut self, error: RunError) -> RunError {
        if matches!(error, RunError::TooManySkips { .. }) {
            return error; // it checkpointed and names the checkpoint itself
        }
        let done = self.state.step;
        let latest = checkpoint::latest(&self.parts.run_dir).ok().flatten();
        let newest = |latest: &Option<(u32, PathBuf)>| match latest {
            Some((k, dir)) if *k < done => format!(
                "the newest checkpoint is {} (step {k}); --resume continues from it and redoes steps {}–{done}",
                dir.display(),
                k + 1
            ),
            Some((_, dir)) => format!(
                "{} {} kept in {} (continue with --resume)",
                steps_upto(done),
                is_are(done),
                dir.display()
            ),
            None => "no checkpoint was written: the run starts again".into(),
        };
        let kept = match self.untouched.take() {
            Some(_) if done == 0 => "no step was completed, so nothing is kept".into(),
            Some(cursor) => {
                self.state.cursor = cursor;
                match &latest {
                    Some((k, _)) if *k == done => newest(&latest),
                    _ => match self.save() {
                        Ok(dir) => format!(
                            "{} {} kept in {} (fix the cause, then continue with --resume)",
                            steps_upto(done),
                            is_are(done),
                            dir.display()
                        ),
                        Err(e) => format!(
                            "the checkpoint of step {done} could not be written ({e}); {}",
                            newest(&latest)
                        ),
                    },
                }
            }
            None => newest(&latest),
        };
        RunError::Stopped {
            error: Box::new(error),
            kept,
        }
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
    /// rank's weights and moments are the same).
    fn save(&mut self) -> Result<PathBuf, RunError> {
        if let Some(d) = &mut self.dist {
            d.barrier()?;
        }
        let started = Instant::now();
        let dir = if self.is_root() {
            checkpoint::save(
                &self.parts.run_dir,
                &self.handles,
                &self.state,
                self.parts.settings.keep_checkpoints as usize,
            )?
        } else {
            checkpoint::step_dir(&self.parts.run_dir, self.state.step)
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

    /// The episodes of step `step`: the next tasks, G trajectories each.
    fn specs(&mut self) -> (Vec<EpisodeSpec>, u64) {
        let t = &self.parts.settings;
        let picks = self.state.cursor.take(
            self.parts.seed,
            self.parts.tasks.len(),
            t.prompts_per_step as usize,
        );
        let epoch = picks.first().map(|p| p.1).unwrap_or(0);
        let step = self.state.step;
        let mut specs = Vec::new();
        for (pos, (index, _)) in picks.into_iter().enumerate() {
            let task = &self.parts.tasks[index];
            // The uid groups the G trajectories and seeds their sampling: unique per
            // step and position (a small set can hold a task twice in one step).
            let uid = format!("{step}:{pos}:{}/{}", task.source, task.id);
            for traj in 0..t.group_size {
                specs.push(EpisodeSpec {
                    task: task.clone(),
                    uid: uid.clone(),
                    traj,
                    sampling_override: None,
                });
            }
        }
        (specs, epoch)
    }

    /// One training step; `None` when a stop request ended its rollout (nothing of the
    /// step is kept). The phases, in order: rollout (with the failure limit),
    /// advantages, updates (with spike and skip watch), evaluation, the metrics line,
    /// the checkpoint.
    pub fn step(&mut self) -> Result<Option<serde_json::Value>, RunError> {
        let step_started = Instant::now();
        let t = self.parts.settings.clone();
        let step = self.state.step;
        let mut times = StepTimes {
            save: std::mem::take(&mut self.save_seconds),
            ..StepTimes::default()
        };
        self.untouched = Some(self.state.cursor);

        let started = Instant::now();
        let Some(rollout) = self.rollout()? else {
            return Ok(None);
        };
        times.rollout = started.elapsed().as_secs_f64();

        let started = Instant::now();
        let mut samples: Vec<Sample> = rollout
            .outcomes
            .iter()
            .flat_map(|o| o.samples.clone())
            .collect();
        let (has_advantages, shadow) = self.assign_advantages(&mut samples)?;
        // This rank trains on its own episodes' samples (all of them in one process).
        let mine: Vec<bool> = rollout
            .outcomes
            .iter()
            .zip(&rollout.local)
            .flat_map(|(o, &mine)| std::iter::repeat_n(mine, o.samples.len()))
            .collect();
        times.advantages = started.elapsed().as_secs_f64();

        let started = Instant::now();
        self.untouched = None;
        let model_steps = self.update_models(&samples, &mine, has_advantages)?;
        times.update = started.elapsed().as_secs_f64();

        let mut eval = None;
        // In a data-parallel job the ranks share the evaluation's tasks.
        if t.eval_every > 0 && (step + 1).is_multiple_of(t.eval_every) && !self.parts.val.is_empty()
        {
            let started = Instant::now();
            eval = Some(self.evaluate()?);
            times.eval = started.elapsed().as_secs_f64();
        }

        self.state.step = step + 1;
        for (id, m) in &model_steps {
            self.state
                .clip_bound
                .entry(id.clone())
                .or_default()
                .add(&m.report, t.grad_clip);
        }
        times.total = step_started.elapsed().as_secs_f64();
        let line = step_line(&StepInput {
            step: step + 1,
            epoch: rollout.epoch,
            outcomes: &rollout.outcomes,
            failed_episodes: rollout.failed,
            failures: &rollout.tally,
            samples: &samples,
            models: &model_steps,
            times,
            success_threshold: t.success_threshold,
            reward_names: &self.parts.team.reward_names(),
            eval,
            grad_clip: t.grad_clip,
            clip_totals: &self.state.clip_bound,
            shadow: shadow.as_ref(),
        });
        let line = self.log_step(line)?;
        self.log_samples(&samples)?;
        if let Some(t) = &self.trackers {
            self.state.tracking = t.state();
        }
        self.checkpoint_if_due(&model_steps)?;
        if !self.opts.quiet && self.is_root() {
            crate::output::console::err_line(format_args!("{}", summary_line(&line, t.steps)));
        }
        self.last_samples = samples;
        Ok(Some(line))
    }

    /// The rollout phase: the step's G episodes per task. A failed episode (a plugin
    /// panicked, returned an error or a non-finite number; a model failed) is counted
    /// and logged and its samples are dropped: the normalizer sees the smaller group.
    /// Past the failure limit the run stops, as soon as the step's count can no longer
    /// stay within it. `None` when a stop request ended it; the data cursor is then
    /// back where it was, so a resume redoes the step.
    fn rollout(&mut self) -> Result<Option<Rollout>, RunError> {
        let step = self.state.step;
        let cursor_before = self.state.cursor;
        let (specs, epoch) = self.specs();
        let total = specs.len();
        let group_size = self.parts.settings.group_size.max(1) as usize;
        // This rank's episodes: the G of each of its tasks (every one in one process).
        let mine: Vec<usize> = (0..total)
            .filter(|i| {
                self.dist
                    .as_ref()
                    .is_none_or(|d| d.owns_task(i / group_size))
            })
            .collect();
        let specs: Vec<EpisodeSpec> = mine.iter().map(|&i| specs[i].clone()).collect();
        let limit = self.parts.team.options.max_failed_episodes;
        let distributed = self.dist.is_some();
        let watch = FailureWatch::new(&specs, limit);
        let bar = self.bar(specs.len() as u64, "episodes");
        let results = self.runtime.block_on(run_episodes_until(
            self.parts.team.clone(),
            specs,
            |i, r| {
                bar.inc(1);
                if let Some(line) = watch.record(i, r) {
                    let line = format!("step {}: {line}", step + 1);
                    if bar.is_hidden() {
                        tracing::warn!("{line}");
                    } else {
                        bar.println(line);
                    }
                }
            },
            // A rank's own failures count against the step's every episode: past the
            // limit alone, the step is (the ranks judge the rest together).
            || signal::requested() || watch.over_limit_of(total),
        ));
        bar.finish_and_clear();
        if distributed {
            return self.merge_rollout(
                results,
                &mine,
                watch.into_tally(),
                total,
                epoch,
                cursor_before,
            );
        }
        let tally = match watch.finish() {
            Ok(tally) => tally,
            Err(message) => {
                self.state.cursor = cursor_before;
                return Err(RunError::TooManyFailures {
                    step: step + 1,
                    message,
                });
            }
        };
        if signal::requested() {
            self.state.cursor = cursor_before;
            return Ok(None);
        }
        let mut outcomes: Vec<EpisodeOutcome> = Vec::new();
        let mut failures: Vec<RolloutError> = Vec::new();
        for r in results {
            match r {
                Ok(o) => outcomes.push(o),
                Err(e) => failures.push(e),
            }
        }
        if outcomes.is_empty() {
            return Err(RunError::AllEpisodesFailed {
                step: step + 1,
                first: failures
                    .into_iter()
                    .next()
                    .unwrap_or(RolloutError::Cancelled),
            });
        }
        Ok(Some(Rollout {
            local: vec![true; outcomes.len()],
            outcomes,
            failed: failures.len(),
            tally,
            epoch,
        }))
    }

    /// A data-parallel rollout's end: the ranks exchange their episodes, agree on a stop
    /// and judge the failure limit on the step's count, as one process would.
    fn merge_rollout(
        &mut self,
        results: Vec<Result<EpisodeOutcome, RolloutError>>,
        mine: &[usize],
        tally: crate::rollout::FailureTally,
        total: usize,
        epoch: u64,
        cursor_before: DataCursor,
    ) -> Result<Option<Rollout>, RunError> {
        let step = self.state.step;
        let mut outcomes = Vec::new();
        let mut failed = 0;
        for (k, r) in results.into_iter().enumerate() {
            match r {
                Ok(o) => outcomes.push((mine[k], o)),
                Err(_) => failed += 1,
            }
        }
        let ours = super::dist::RankRollout {
            stop: signal::requested(),
            outcomes,
            failed,
            tally,
        };
        let d = self.dist.as_mut().expect("a data-parallel rollout");
        let rank = d.rank;
        let all = d.gather(&ours)?;
        if all.iter().any(|r| r.stop) {
            self.state.cursor = cursor_before;
            return Ok(None);
        }
        let mut merged: Vec<(usize, bool, EpisodeOutcome)> = Vec::new();
        let mut failed = 0;
        let mut tally = crate::rollout::FailureTally::default();
        for (r, part) in all.into_iter().enumerate() {
            failed += part.failed;
            tally.merge(part.tally);
            merged.extend(part.outcomes.into_iter().map(|(i, o)| (i, r == rank, o)));
        }
        merged.sort_by_key(|(i, _, _)| *i);
        let limit = self.parts.team.options.max_failed_episodes;
        if crate::rollout::over_failure_limit(tally.total(), total, limit) || merged.is_empty() {
            self.state.cursor = cursor_before;
            return Err(RunError::TooManyFailures {
                step: step + 1,
                message: crate::rollout::failure_limit_message(&tally, total, limit),
            });
        }
        Ok(Some(Rollout {
            local: merged.iter().map(|(_, l, _)| *l).collect(),
            outcomes: merged.into_iter().map(|(_, _, o)| o).collect(),
            failed,
            tally,
            epoch,
        }))
    }

    /// The advantages phase: the normalizer turns the samples' scores into advantages,
    /// written into `samples`. Advantages a normalizer cannot make finite (huge or broken
    /// scores) make the step's samples useless: `false`, every model skips its update,
    /// as for a non-finite loss, and the run goes on.
    fn assign_advantages(
        &self,
        samples: &mut [Sample],
    ) -> Result<(bool, Option<BTreeMap<String, ShadowComparison>>), RunError> {
        let rows: Vec<SampleRow> = super::metrics::sample_rows(samples);
        let advantages = match self.parts.normalizer.advantages(&rows) {
            Ok(a) => a,
            Err(e @ crate::plugin::ComponentError::NonFinite { .. }) => {
                self.warn(&format!(
                    "step {}: {e}; every update of this step is skipped",
                    self.state.step + 1
                ));
                return Ok((false, None));
            }
            Err(e) => return Err(e.into()),
        };
        // The shadow only measures: its failure costs the step's comparison, not the step.
        let shadow = self
            .parts
            .shadow
            .as_ref()
            .and_then(|shadow| match shadow.advantages(&rows) {
                Ok(theirs) => Some(super::mechanism::compare_shadow(
                    &rows,
                    &advantages,
                    &theirs,
                )),
                Err(e) => {
                    self.warn(&format!(
                        "step {}: shadow normalizer: {e}; no comparison this step",
                        self.state.step + 1
                    ));
                    None
                }
            });
        for (s, a) in samples.iter_mut().zip(advantages) {
            s.advantage = a;
        }
        Ok((true, shadow))
    }

    /// The update phase: one model after the other (they take turns on a device
    /// anyway), each on its own agents' samples, with the pool's offload policy between
    /// them; then each model's gradient norm goes through its spike detector and its
    /// skip count.
    fn update_models(
        &mut self,
        samples: &[Sample],
        mine: &[bool],
        has_advantages: bool,
    ) -> Result<BTreeMap<String, ModelStep>, RunError> {
        let step = self.state.step;
        let models = self.parts.models.clone();
        let handles: Vec<ModelHandle> = models.iter().map(|m| m.1.clone()).collect();
        let offload = self.opts.offload;
        offload.before_updates(&handles)?;
        let mut model_steps = BTreeMap::new();
        for (i, (id, handle, base_lr)) in models.iter().enumerate() {
            let lr = self.schedule.lr_at(*base_lr, step);
            let mut staleness = Staleness::default();
            let report = if has_advantages {
                let policy = PolicyWindow {
                    current: handle.policy_version()?,
                    bound: u64::from(self.parts.settings.max_staleness),
                };
                let (batch, stale) =
                    update_batch(samples, mine, self.dist.is_some(), id, step, lr, policy);
                staleness = stale;
                if stale.refused > 0 {
                    self.warn(&format!(
                        "step {}: {} of model `{id}`'s samples are more than [trainer] max_staleness = {} policy versions behind its weights (version {}) and are left out of its update",
                        step + 1,
                        stale.refused,
                        policy.bound,
                        policy.current
                    ));
                }
                let report = self.update_with_progress(id, handle, batch)?;
                offload.after_update(&handles, i)?;
                report
            } else {
                UpdateReport {
                    grad_norms: vec![f64::NAN],
                    skipped: 1,
                    ..Default::default()
                }
            };
            let watched = self.watch_update(id, &report);
            model_steps.insert(
                id.clone(),
                ModelStep {
                    lr,
                    spike: watched.spike,
                    spikes_total: watched.spikes_total,
                    skipped_in_a_row: watched.skipped_in_a_row,
                    staleness,
                    report,
                },
            );
        }
        Ok(model_steps)
    }

    /// The spike detector and the skip count of model `id` after its update.
    fn watch_update(&mut self, id: &str, report: &UpdateReport) -> Watched {
        let t = &self.parts.settings;
        let detector = self.state.spikes.entry(id.to_string()).or_default();
        // Only a finite norm is a reading: a non-finite step is counted as skipped.
        let norm = report.grad_norm().finite();
        let spike =
            norm.is_some_and(|n| detector.observe(n, t.spike_factor, t.spike_window as usize));
        let spikes_total = detector.spikes;
        if spike {
            let msg = format!(
                "step {}: gradient spike in model `{id}`: norm {:.3} > {} × running median",
                self.state.step + 1,
                norm.unwrap_or(f64::NAN),
                t.spike_factor
            );
            self.warn(&msg);
        }
        let skips = self
            .state
            .consecutive_skips
            .entry(id.to_string())
            .or_default();
        if report.skipped > 0 && report.applied == 0 {
            *skips += 1;
        } else {
            *skips = 0;
        }
        Watched {
            spike,
            spikes_total,
            skipped_in_a_row: *skips,
        }
    }

    /// The metrics phase: the pool's residency joins the step's line, which is appended
    /// to the run's metrics file and kept (without timings) for resume checks. The line
    /// is written before the checkpoint: a checkpoint at step N always has N lines behind
    /// it, and a resume drops lines past its checkpoint.
    fn log_step(&mut self, mut line: serde_json::Value) -> Result<serde_json::Value, RunError> {
        line["pool"] = self.pool_line()?;
        if let Some(d) = &self.dist {
            line["dist"] = serde_json::json!({ "world_size": d.world_size });
        }
        if let Some(t) = &self.trackers {
            // What the trackers took so far (this line's own handling is in the next).
            let cost = t.cost();
            line["tracking"] = serde_json::json!({
                "seconds": cost.seconds,
                "tensorboard_bytes": cost.tensorboard_bytes,
            });
        }
        if self.is_root() {
            let metrics = self.parts.run_dir.join(METRICS_FILE);
            output::append_line(&metrics, &line.to_string())
                .map_err(|e| RunError::io(&metrics, e))?;
        }
        if let Some(t) = &mut self.trackers {
            t.log_line(u64::from(self.state.step), &line);
        }
        self.tracker_warnings();
        self.state
            .metrics_tail
            .push(super::metrics::without_timing(&line));
        let excess = self.state.metrics_tail.len().saturating_sub(3);
        self.state.metrics_tail.drain(..excess);
        Ok(line)
    }

    /// The checkpoint phase: a checkpoint every `save_every` steps, at the last step,
    /// and when a model has skipped too many updates in a row (then the run stops with
    /// that checkpoint named).
    fn checkpoint_if_due(
        &mut self,
        model_steps: &BTreeMap<String, ModelStep>,
    ) -> Result<(), RunError> {
        let t = &self.parts.settings;
        let too_many = model_steps
            .iter()
            .find(|(_, m)| m.skipped_in_a_row >= t.max_consecutive_skips);
        let due = t.save_every > 0 && self.state.step.is_multiple_of(t.save_every);
        if due || too_many.is_some() || self.state.step == t.steps {
            let started = Instant::now();
            self.last_saved = Some(self.save()?);
            self.save_seconds = started.elapsed().as_secs_f64();
        }
        if let Some((model, m)) = too_many {
            return Err(RunError::TooManySkips {
                model: model.clone(),
                count: m.skipped_in_a_row,
                step: self.state.step,
                checkpoint: self
                    .last_saved
                    .clone()
                    .unwrap_or_else(|| checkpoint::step_dir(&self.parts.run_dir, self.state.step)),
            });
        }
        Ok(())
    }

    /// Every `log_samples_every` steps, the first `samples_per_agent` samples of each
    /// agent (in episode order) as a table: `RUN/samples/step-NNNNNN.jsonl`, TensorBoard
    /// text, an MLflow artifact.
    fn log_samples(&mut self, samples: &[Sample]) -> Result<(), RunError> {
        let settings = &self.parts.tracking.settings;
        let step = self.state.step;
        if !self.is_root()
            || settings.log_samples_every == 0
            || !step.is_multiple_of(settings.log_samples_every)
        {
            return Ok(());
        }
        let per_agent = settings.samples_per_agent as usize;
        let mut taken: BTreeMap<&str, usize> = BTreeMap::new();
        let mut rows = Vec::new();
        for s in samples {
            let n = taken.entry(s.agent.as_str()).or_default();
            if *n >= per_agent {
                continue;
            }
            *n += 1;
            let decode = |ids: &[i64]| {
                self.parts
                    .team
                    .models
                    .get(&s.model)
                    .and_then(|m| m.codec.decode(ids).ok())
                    .unwrap_or_else(|| format!("{ids:?}"))
            };
            rows.push(crate::tracking::SampleRow {
                step: u64::from(step),
                agent: s.agent.clone(),
                model: s.model.clone(),
                uid: s.uid.clone(),
                traj: s.traj,
                turn: s.turn,
                prompt: decode(&s.prompt_ids),
                completion: decode(&s.response_ids),
                score: f64::from(s.score),
                advantage: f64::from(s.advantage),
                valid: s.valid,
                finish: s.finish.as_str().to_string(),
            });
        }
        rows.sort_by(|a, b| a.agent.cmp(&b.agent));
        let file = crate::tracking::write_samples(&self.parts.run_dir, u64::from(step), &rows)
            .map_err(|e| RunError::io(self.parts.run_dir.join("samples"), e))?;
        if let Some(t) = &mut self.trackers {
            t.log_samples(u64::from(step), &rows, &file);
        }
        Ok(())
    }

    /// A warning for the log, and for the terminal unless quiet.
    fn warn(&self, msg: &str) {
        tracing::warn!("{msg}");
        if !self.opts.quiet {
            crate::output::console::err_line(format_args!("{msg}"));
        }
    }

    /// The distinct workers of the models, each with the index of its first model.
    fn workers(&self) -> Vec<(usize, ModelHandle)> {
        let mut out: Vec<(usize, ModelHandle)> = Vec::new();
        for (i, (_, h, _)) in self.parts.models.iter().enumerate() {
            if !out.iter().any(|(_, o)| o.same_worker(h)) {
                out.push((i, h.clone()));
            }
        }
        out
    }

    /// Per worker: bytes on its device and in host memory, the device's memory in use,
    /// and this step's moves (seconds, bytes).
    fn pool_line(&mut self) -> Result<serde_json::Value, RunError> {
        let mut workers = serde_json::Map::new();
        for (i, h) in self.workers() {
            let r = h.residency()?;
            let name = self.parts.models[i].0.clone();
            let before = self
                .moves
                .insert(name.clone(), (r.move_seconds, r.moved_bytes));
            let (s0, b0) = before.unwrap_or((0.0, 0));
            workers.insert(
                name,
                serde_json::json!({
                    "device": r.device,
                    "on_device_bytes": r.on_device,
                    "on_host_bytes": r.on_host,
                    "device_used_bytes": r.device_used,
                    "move_seconds": r.move_seconds - s0,
                    "moved_bytes": r.moved_bytes - b0,
                }),
            );
        }
        Ok(serde_json::json!({
            "offload": self.opts.offload.name(),
            "workers": workers,
        }))
    }

    fn update_with_progress(
        &self,
        id: &str,
        handle: &ModelHandle,
        batch: UpdateBatch,
    ) -> Result<UpdateReport, RunError> {
        let progress = batch.progress.clone();
        let bar = self.bar(0, "micro-batches");
        bar.set_prefix(format!("update {id}"));
        let report = std::thread::scope(|scope| {
            let job = scope.spawn(|| handle.update(batch));
            while !job.is_finished() {
                bar.set_length(progress.total() as u64);
                bar.set_position(progress.done() as u64);
                std::thread::sleep(Duration::from_millis(100));
            }
            job.join()
        });
        bar.finish_and_clear();
        let report = report.map_err(|p| {
            RunError::Worker(crate::pool::WorkerError::backend(
                id,
                "update",
                crate::pool::BackendError::Panicked(crate::pool::panic_message(p.as_ref())),
            ))
        })??;
        Ok(report)
    }

    fn evaluate(&mut self) -> Result<serde_json::Value, RunError> {
        let t = &self.parts.settings;
        let opts = EvalOptions {
            k: t.eval_k as usize,
            limit: t.eval_limit,
            success_threshold: t.success_threshold,
            progress: !self.opts.quiet && self.dist.as_ref().is_none_or(|d| d.is_root()),
            ..EvalOptions::default()
        };
        let report = evaluate(
            &self.parts.team,
            &self.parts.name,
            &self.parts.val,
            &opts,
            &self.runtime,
            self.dist.as_mut().map(|d| &mut d.group),
        )?
        .report;
        let sources: BTreeMap<&String, serde_json::Value> = report
            .sources
            .iter()
            .map(|(s, r)| {
                (
                    s,
                    serde_json::json!({ "avg_at_k": r.avg_at_k, "pass_at_k": r.pass_at_k }),
                )
            })
            .collect();
        Ok(serde_json::json!({
            "k": report.k,
            "avg_at_k": report.overall.avg_at_k,
            "pass_at_k": report.overall.pass_at_k,
            "sources": sources,
            "failed_episodes": report.failed_episodes,
            "seconds": report.seconds,
        }))
    }

    fn bar(&self, len: u64, what: &str) -> indicatif::ProgressBar {
        if self.opts.quiet {
            return indicatif::ProgressBar::hidden();
        }
        let bar = indicatif::ProgressBar::new(len);
        let template =
            format!("{{prefix}} {{bar:30}} {{pos}}/{{len}} {what}  {{elapsed}} ETA {{eta}}");
        bar.set_style(
            indicatif::ProgressStyle::with_template(&template).expect("a valid template"),
        );
        bar.set_prefix(format!(
            "step {}/{}",
            self.state.step + 1,
            self.parts.settings.steps
        ));
        bar
    }
}

/// One line per step for people: rewards, per-agent gradient norm and entropy, times.
fn summary_line(line: &serde_json::Value, total: u32) -> String {
    let f = |v: &serde_json::Value| v.as_f64().map(|x| format!("{x:.3}")).unwrap_or("-".into());
    let mut out = format!(
        "step {}/{total}  reward {}  success {}",
        line["step"],
        f(&line["reward_mean"]),
        f(&line["success_rate"])
    );
    if let Some(agents) = line["agents"].as_object() {
        for (name, a) in agents {
            out.push_str(&format!(
                "  {name}: gn {} ent {} valid {}",
                f(&a["grad_norm"]),
                f(&a["entropy"]),
                f(&a["valid_ratio"])
            ));
        }
    }
    if let Some(models) = line["models"].as_object() {
        for (id, m) in models {
            if m["grad_spike"].as_bool() == Some(true) {
                out.push_str(&format!("  SPIKE({id})"));
            }
            if m["skipped"].as_bool() == Some(true) {
                out.push_str(&format!("  SKIPPED({id})"));
            }
        }
    }
    let tm = &line["time"];
    out.push_str(&format!(
        "  rollout {:.0}s update {:.0}s  {} tok/s",
        tm["rollout"].as_f64().unwrap_or(0.0),
        tm["update"].as_f64().unwrap_or(0.0),
        line["tokens_per_s"]
            .as_f64()
            .map(|x| format!("{x:.0}"))
            .unwrap_or("-".into())
    ));
    if let Some(e) = line.get("eval") {
        out.push_str(&format!("  eval avg@{} {}", e["k"], f(&e["avg_at_k"])));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rollout::Finish;

    fn sample(agent: &str, model: &str, version: u64, first_token: i64) -> Sample {
        Sample {
            uid: "t".into(),
            traj: 0,
            agent: agent.into(),
            model: model.into(),
            turn: 0,
            prompt_ids: vec![1, 2],
            response_ids: vec![first_token],
            logprobs: vec![-0.5],
            temperature: 1.0,
            valid: true,
            score: 1.0,
            finish: Finish::StopToken,
            policy_version: version,
            advantage: 0.5,
        }
    }

    /// Weights at version 5, bound 1: lags 0 and 1 are trained on, lag 3 is left out;
    /// the other model's sample is not this model's business; the count covers every
    /// rank's samples while the batch holds this rank's, with places among the kept.
    #[test]
    fn samples_past_the_staleness_bound_are_left_out_and_counted() {
        let samples = vec![
            sample("solver", "lm", 5, 10),
            sample("solver", "lm", 4, 11),
            sample("verifier", "lm", 2, 12),
            sample("solver", "other", 0, 13),
            sample("solver", "lm", 5, 14),
        ];
        let mine = [true, false, true, true, true];
        let policy = PolicyWindow {
            current: 5,
            bound: 1,
        };
        let (batch, stale) = update_batch(&samples, &mine, true, "lm", 0, 1e-3, policy);
        assert_eq!(
            stale,
            Staleness {
                stale: 2,
                refused: 1,
                max: 3
            }
        );
        let firsts: Vec<i64> = batch.samples.iter().map(|s| s.response[0]).collect();
        assert_eq!(firsts, [10, 14]);
        let share = batch.share.unwrap();
        assert_eq!(share.agent_totals, BTreeMap::from([("solver".into(), 3)]));
        assert_eq!(share.positions, [0, 2]);

        // Bound 0: only the current version's samples.
        let policy = PolicyWindow {
            current: 5,
            bound: 0,
        };
        let (batch, stale) = update_batch(&samples, &[true; 5], false, "lm", 0, 1e-3, policy);
        assert_eq!(stale.refused, 2);
        assert_eq!(batch.samples.len(), 2);
        assert!(batch.share.is_none());
    }
}
