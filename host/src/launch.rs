//! The one place that turns an experiment into running parts, for `eval` and `train`:
//! resolves the pool's devices, starts one worker per model (weights, and for training
//! the optimizer and reference copy, created on the worker's thread), and builds the
//! team of agents, environment and rewards around their handles.

use crate::{
    config::Experiment,
    model::{ModelError, TextTokenizer, load_pretrained},
    plugin::Registry,
    pool::{
        Backend, BackendError, DeviceError, ModelBackend, WorkerConfig, WorkerError, cuda_count,
        parse_device, placement, spawn_worker,
    },
    rollout::{ModelSlot, RolloutError, Team},
    train::update_settings,
};
use std::{
    collections::HashMap,
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
};
use thiserror::Error;

#[derive(Debug, Error)]
pub enum LaunchError {
    #[error("{path}: [pool] devices: {source}")]
    Device {
        path: PathBuf,
        #[source]
        source: DeviceError,
    },
    #[error("model `{model}`: {source}")]
    Tokenizer {
        model: String,
        #[source]
        source: ModelError,
    },
    #[error(transparent)]
    Worker(#[from] WorkerError),
    #[error(transparent)]
    Team(#[from] RolloutError),
}

#[derive(Debug, Clone, Default)]
pub struct LaunchOptions {
    /// Model folders to use instead of the experiment's: `DIR/<model id>` when that
    /// folder exists, else `DIR` itself.
    pub checkpoint: Option<PathBuf>,
    pub worker: WorkerConfig,
    /// Give every model an optimizer (and a frozen reference copy when the loss has a
    /// KL term).
    pub train: bool,
}

/// The folder model `id` loads from.
pub fn model_path(default: &Path, id: &str, checkpoint: Option<&Path>) -> PathBuf {
    match checkpoint {
        Some(dir) if dir.join(id).is_dir() => dir.join(id),
        Some(dir) => dir.to_path_buf(),
        None => default.to_path_buf(),
    }
}

/// Starts the experiment's model workers and builds its team.
pub fn launch(
    exp: &Experiment,
    registry: &Registry,
    opts: &LaunchOptions,
) -> Result<Team, LaunchError> {
    let f = &exp.file;
    let device_err = |source| LaunchError::Device {
        path: exp.path.clone(),
        source,
    };
    let specs = f
        .pool
        .devices
        .iter()
        .map(|d| parse_device(d))
        .collect::<Result<Vec<_>, _>>()
        .map_err(device_err)?;
    let devices = placement(&specs, f.models.len(), cuda_count()).map_err(device_err)?;
    let mut locks: HashMap<tch::Device, Arc<Mutex<()>>> = HashMap::new();
    let mut models = HashMap::new();
    for (m, device) in f.models.iter().zip(devices) {
        let mut worker = opts.worker.clone();
        worker.device_lock = Some(locks.entry(device).or_default().clone());
        let path = model_path(&m.path, &m.id, opts.checkpoint.as_deref());
        let tokenizer =
            Arc::new(
                TextTokenizer::from_dir(&path).map_err(|source| LaunchError::Tokenizer {
                    model: m.id.clone(),
                    source,
                })?,
            );
        let kind = m.dtype.map(|d| d.kind());
        let settings = opts.train.then(|| update_settings(f, m));
        // The reference is the run's starting point: the experiment's folder, even when
        // resuming from a checkpoint.
        let reference_path = (opts.train && f.trainer.kl.is_some()).then(|| m.path.clone());
        let backend_tokenizer = tokenizer.clone();
        let load_path = path.clone();
        let handle = spawn_worker(&m.id, worker, move || {
            let model = load_pretrained(&load_path, device, kind)?;
            let mut backend = ModelBackend::new(model, Some(backend_tokenizer), load_path);
            if let Some(settings) = settings {
                let reference = reference_path
                    .map(|p| load_pretrained(&p, device, kind))
                    .transpose()?;
                backend = backend.with_training(settings, reference);
            }
            Ok::<Box<dyn Backend>, BackendError>(Box::new(backend))
        })?;
        tracing::info!(model = %m.id, path = %path.display(), ?device, "model loaded");
        models.insert(
            m.id.clone(),
            ModelSlot {
                id: m.id.clone(),
                codec: tokenizer,
                handle,
            },
        );
    }
    Ok(Team::from_experiment(exp, registry, models)?)
}
