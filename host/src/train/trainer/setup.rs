//! Building a trainer: from an experiment file (its data, models, normalizer, run folder
//! and fingerprint) or from parts, then the state it starts from (fresh or resumed).

use super::folder::take_run_folder;
use super::resume::resume;
use super::{EXPERIMENT_FILE, TrackingSetup, TrainOptions, Trainer, TrainerParts};
use crate::config::Experiment;
use crate::launch::{LaunchOptions, launch};
use crate::plugin::Registry;
use crate::pool::ModelHandle;
use crate::rollout::RolloutError;
use crate::tracking::Trackers;
use crate::train::checkpoint::TrainerState;
use crate::train::fingerprint::Fingerprint;
use crate::train::{RunError, checkpoint, fingerprint};
use std::collections::BTreeMap;
use std::sync::Arc;

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
        let record = crate::train::run_record::RunRecord::gather(exp, registry, &fingerprint);
        if root {
            record.write(&run_dir)?;
        }
        let record_tags = record.tags();
        if let Some(w) = warm
            && !opts.resume
            && root
        {
            crate::train::warm_start::begin(&run_dir, w, &handles)?;
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
                    params: crate::train::run_record::experiment_params(&exp.resolved_text()),
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
    pub(super) fn with_lock(
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
        let policy = super::policy::Policies::from(&parts.settings);
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
