//! Building a trainer from an experiment: its data, its components (made from its
//! plugins, or handed in), its run folder and fingerprint, then the state it starts
//! from (fresh or resumed). There is one way: [`Trainer::from_experiment`] and
//! [`Trainer::with_components`] differ only in where the components come from.

use super::folder::take_run_folder;
use super::resume::resume;
use super::{
    Components, EXPERIMENT_FILE, METRICS_FILE, Parts, TrackingSetup, TrainOptions, Trainer,
};
use crate::config::Experiment;
use crate::launch::{LaunchOptions, launch};
use crate::plugin::Registry;
use crate::pool::ModelHandle;
use crate::rollout::RolloutError;
use crate::tracking::{Resume, Trackers};
use crate::train::checkpoint::TrainerState;
use crate::train::fingerprint::Fingerprint;
use crate::train::{RunError, checkpoint, fingerprint};
use drmas_plugin_api::Task;
use std::collections::BTreeMap;
use std::sync::Arc;

impl Components {
    /// The experiment's team, started for training, and its normalizers, from the
    /// plugins in `registry`.
    pub fn build(
        exp: &Experiment,
        registry: &Registry,
        opts: &TrainOptions,
    ) -> Result<Self, RunError> {
        let f = &exp.file;
        let team = launch(
            exp,
            registry,
            &LaunchOptions {
                // A warm start loads its weights where the experiment's would be; a
                // resume then puts the run's own on top.
                checkpoint: f.trainer.warm_start.as_ref().map(|w| w.checkpoint.clone()),
                worker: opts.worker.clone(),
                train: true,
                dist: opts.dist.clone(),
            },
        )?;
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
        Ok(Self {
            team,
            normalizer,
            shadow,
        })
    }
}

impl Trainer {
    /// Loads the experiment's data, takes the run folder, starts its models for
    /// training, creates the normalizer, and restores the latest checkpoint when
    /// resuming.
    pub fn from_experiment(
        exp: &Experiment,
        registry: &Registry,
        opts: TrainOptions,
    ) -> Result<Self, RunError> {
        let tasks = train_tasks(exp)?;
        // Refuse before loading models: that takes a while, and a refusal should not.
        let lock = take_folder(exp, &opts)?;
        let components = Components::build(exp, registry, &opts)?;
        Self::assemble(exp, registry, tasks, components, opts, lock)
    }

    /// [`Self::from_experiment`] with components made elsewhere (agents, rewards or a
    /// normalizer that are no registered plugin): the data, run folder, fingerprint,
    /// run record and resume are the experiment's, as for any run. `registry` is what
    /// the run record names as the loaded plugins.
    pub fn with_components(
        exp: &Experiment,
        registry: &Registry,
        components: Components,
        opts: TrainOptions,
    ) -> Result<Self, RunError> {
        let tasks = train_tasks(exp)?;
        let lock = take_folder(exp, &opts)?;
        Self::assemble(exp, registry, tasks, components, opts, lock)
    }

    /// The trainer of `exp` on `components`, with the run folder's lock taken.
    fn assemble(
        exp: &Experiment,
        registry: &Registry,
        tasks: Vec<Task>,
        components: Components,
        opts: TrainOptions,
        lock: Option<crate::output::OutputLock>,
    ) -> Result<Self, RunError> {
        let f = &exp.file;
        let run_dir = exp.output_dir();
        let root = opts.dist.as_ref().is_none_or(|d| d.rank == 0);
        let opts = TrainOptions {
            offload: f.pool.offload,
            episode_threads: f.pool.episode_threads,
            ..opts
        };
        let Components {
            team,
            normalizer,
            shadow,
        } = components;
        let models: Vec<(String, ModelHandle, f64)> = f
            .models
            .iter()
            .map(|m| match team.models.get(&m.id) {
                Some(slot) => Ok((m.id.clone(), slot.handle.clone(), m.lr)),
                None => Err(RunError::MissingModel {
                    path: exp.path.clone(),
                    id: m.id.clone(),
                }),
            })
            .collect::<Result<_, _>>()?;
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
        let record = crate::train::run_record::RunRecord::gather(exp, registry, &fingerprint);
        if root {
            record.write(&run_dir)?;
        }
        if let Some(w) = &f.trainer.warm_start
            && !opts.resume
            && root
        {
            crate::train::warm_start::begin(&run_dir, w, &handles)?;
        }
        Self::with_lock(
            Parts {
                name: f.experiment.name.clone(),
                seed: f.experiment.seed,
                run_dir,
                settings: f.trainer.clone(),
                grad_clips: f
                    .models
                    .iter()
                    .filter_map(|m| Some((m.id.clone(), m.grad_clip?)))
                    .collect(),
                team: Arc::new(team),
                normalizer,
                shadow,
                models,
                tasks,
                val: f.data.val.clone(),
                tracking: TrackingSetup {
                    settings: f.tracking.clone(),
                    params: crate::config::mlflow_params(&crate::config::flatten(f)),
                    tags: record.tags(),
                },
            },
            opts,
            lock,
            fingerprint,
        )
    }

    /// The trainer of `parts`, with the run folder's lock already held and the run's
    /// fingerprint taken: its state, fresh or resumed, and its trackers.
    fn with_lock(
        parts: Parts,
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
                let group = job.group("trainer", tch::Device::Cpu)?;
                Ok::<_, RunError>(crate::train::dist::TrainerDist {
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
            let lines = parts.run_dir.join(METRICS_FILE);
            Trackers::open(
                &parts.run_dir,
                &tracking.settings,
                opts.resume.then_some(Resume {
                    state: &state.tracking,
                    step: u64::from(state.step),
                    lines: &lines,
                }),
                &tracking.params,
                &tracking.tags,
            )
        });
        if let Some(t) = &trackers {
            state.tracking = t.state();
        }
        let runtime = crate::rollout::EpisodeRuntime::with_threads(opts.episode_threads)
            .map_err(|e| RunError::io(&parts.run_dir, e))?;
        let mut policy = super::policy::Policies::from(&parts.settings);
        policy.grad_clips = parts.grad_clips.clone();
        Ok(Self {
            parts,
            policy,
            handles,
            state,
            opts,
            runtime,
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
}

/// The experiment's train set, loaded.
fn train_tasks(exp: &Experiment) -> Result<Vec<Task>, RunError> {
    let train = exp
        .file
        .data
        .train
        .as_ref()
        .ok_or_else(|| RunError::NoTrainData(exp.path.clone()))?;
    Ok(crate::data::load_tasks(train)?)
}

/// The run folder, held by rank 0 (or the only process), which alone writes into it;
/// and in it the experiment as this run trains it (any overrides applied), loadable as
/// is.
fn take_folder(
    exp: &Experiment,
    opts: &TrainOptions,
) -> Result<Option<crate::output::OutputLock>, RunError> {
    if opts.dist.as_ref().is_some_and(|d| d.rank != 0) {
        return Ok(None);
    }
    let run_dir = exp.output_dir();
    let lock = take_run_folder(&run_dir, opts.resume)?;
    let resolved = run_dir.join(EXPERIMENT_FILE);
    crate::output::write_atomic(&resolved, exp.resolved_text().as_bytes())
        .map_err(|e| RunError::io(&resolved, e))?;
    Ok(Some(lock))
}
