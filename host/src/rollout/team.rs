//! A team: the experiment's agents with their models, the environment, the rewards,
//! and the workflow settings, ready to run episodes.

use super::{
    backend::{Codec, ModelBackend},
    batcher::{BatcherConfig, BatcherHandle, spawn_batcher},
    error::RolloutError,
};
use crate::{
    config::{Experiment, Sampling, config_text},
    model::{TextTokenizer, load_pretrained},
    plugin::{AgentHandle, EnvironmentHandle, Registry, RewardHandle},
    pool::{DeviceSpec, parse_device},
};
use std::{collections::HashMap, path::PathBuf, sync::Arc, time::Duration};

pub struct AgentSlot {
    pub name: String,
    pub handle: AgentHandle,
    /// A key of [`Team::models`].
    pub model: String,
    pub sampling: Sampling,
}

pub struct ModelSlot {
    pub id: String,
    pub codec: Arc<dyn Codec>,
    pub batcher: BatcherHandle,
}

#[derive(Debug, Clone)]
pub struct TeamOptions {
    pub entry: String,
    pub max_turns: u32,
    /// How often control may come back to the entry agent.
    pub max_loops: Option<u32>,
    pub invalid_penalty: f64,
    /// Mixed into every sampling seed.
    pub seed: u64,
    /// For environments that declare themselves slow.
    pub tool_timeout: Duration,
    /// Replaces every agent's temperature and top-p (evaluation settings).
    pub sampling_override: Option<(f64, f64)>,
}

pub struct Team {
    pub agents: Vec<AgentSlot>,
    pub models: HashMap<String, ModelSlot>,
    pub environment: Option<EnvironmentHandle>,
    /// Each reward with its weight.
    pub rewards: Vec<(RewardHandle, f64)>,
    pub options: TeamOptions,
}

impl Team {
    pub fn agent(&self, name: &str) -> Option<&AgentSlot> {
        self.agents.iter().find(|a| a.name == name)
    }

    /// Builds the experiment's team: creates every component, loads every model on its
    /// device (models are placed round-robin over `[pool] devices`) and starts one
    /// batcher per model. `checkpoint` replaces model paths: `DIR/<model id>` when that
    /// folder exists, else `DIR` itself.
    pub fn from_experiment(
        exp: &Experiment,
        registry: &Registry,
        checkpoint: Option<&std::path::Path>,
        batcher: BatcherConfig,
    ) -> Result<Self, RolloutError> {
        let f = &exp.file;
        let policy = exp.resolve_policy();
        let err = |e: crate::plugin::ResolveError| RolloutError::Other(e.to_string());
        let devices = placement(&f.pool.devices, f.models.len());
        let mut locks: HashMap<String, Arc<std::sync::Mutex<()>>> = HashMap::new();
        let mut models = HashMap::new();
        for (m, device) in f.models.iter().zip(devices) {
            let mut batcher = batcher.clone();
            batcher.device_lock = Some(locks.entry(format!("{device:?}")).or_default().clone());
            let path = match checkpoint {
                Some(dir) if dir.join(&m.id).is_dir() => dir.join(&m.id),
                Some(dir) => dir.to_path_buf(),
                None => m.path.clone(),
            };
            let tokenizer =
                Arc::new(
                    TextTokenizer::from_dir(&path).map_err(|e| RolloutError::Model {
                        model: m.id.clone(),
                        message: e.to_string(),
                    })?,
                );
            let kind = m.dtype.map(|d| match d {
                crate::config::Dtype::F32 => tch::Kind::Float,
                crate::config::Dtype::F16 => tch::Kind::Half,
                crate::config::Dtype::Bf16 => tch::Kind::BFloat16,
            });
            let backend_tokenizer = tokenizer.clone();
            let load_path: PathBuf = path.clone();
            let handle = spawn_batcher(&m.id, batcher, move || {
                let model = load_pretrained(&load_path, device, kind).map_err(|e| e.to_string())?;
                Ok(Box::new(ModelBackend {
                    model,
                    tokenizer: Some(backend_tokenizer),
                }) as Box<dyn super::Backend>)
            })?;
            tracing::info!(model = %m.id, path = %path.display(), ?device, "model loaded");
            models.insert(
                m.id.clone(),
                ModelSlot {
                    id: m.id.clone(),
                    codec: tokenizer,
                    batcher: handle,
                },
            );
        }
        let agents = f
            .agents
            .iter()
            .map(|a| {
                Ok(AgentSlot {
                    name: a.name.clone(),
                    handle: registry
                        .create_agent(&a.component, &config_text(&a.config), &policy)
                        .map_err(err)?,
                    model: a.model.clone(),
                    sampling: a.sampling.clone(),
                })
            })
            .collect::<Result<Vec<_>, RolloutError>>()?;
        let environment = f
            .environment
            .as_ref()
            .map(|e| {
                registry
                    .create_environment(&e.component, &config_text(&e.config), &policy)
                    .map_err(err)
            })
            .transpose()?;
        let rewards = f
            .rewards
            .iter()
            .map(|r| {
                Ok((
                    registry
                        .create_reward(&r.component, &config_text(&r.config), &policy)
                        .map_err(err)?,
                    r.weight,
                ))
            })
            .collect::<Result<Vec<_>, RolloutError>>()?;
        Ok(Self {
            agents,
            models,
            environment,
            rewards,
            options: TeamOptions {
                entry: f.workflow.entry.clone(),
                max_turns: f.workflow.max_turns,
                max_loops: f.workflow.max_loops,
                invalid_penalty: f.trainer.invalid_penalty,
                seed: f.experiment.seed,
                tool_timeout: Duration::from_secs(60),
                sampling_override: None,
            },
        })
    }
}

/// The device of each of `n` models: round-robin over the configured devices, with
/// `auto` meaning every visible GPU, or the CPU where there is none.
pub fn placement(devices: &[String], n: usize) -> Vec<tch::Device> {
    let mut pool: Vec<tch::Device> = Vec::new();
    for d in devices {
        match parse_device(d) {
            Ok(DeviceSpec::Cpu) => pool.push(tch::Device::Cpu),
            Ok(DeviceSpec::Cuda(i)) => pool.push(tch::Device::Cuda(i)),
            Ok(DeviceSpec::Auto) | Err(_) => {
                let gpus = tch::Cuda::device_count() as usize;
                if gpus == 0 {
                    pool.push(tch::Device::Cpu);
                } else {
                    pool.extend((0..gpus).map(tch::Device::Cuda));
                }
            }
        }
    }
    if pool.is_empty() {
        pool.push(tch::Device::Cpu);
    }
    (0..n).map(|i| pool[i % pool.len()]).collect()
}

#[cfg(test)]
mod tests {
    use super::placement;
    use tch::Device;

    #[test]
    fn models_are_placed_round_robin() {
        let devices = vec!["cuda:0".to_string(), "cuda:1".to_string()];
        assert_eq!(
            placement(&devices, 3),
            vec![Device::Cuda(0), Device::Cuda(1), Device::Cuda(0)]
        );
        assert_eq!(
            placement(&["cpu".to_string()], 2),
            vec![Device::Cpu, Device::Cpu]
        );
        // No GPU on the test machines: auto is the CPU.
        if tch::Cuda::device_count() == 0 {
            assert_eq!(placement(&["auto".to_string()], 1), vec![Device::Cpu]);
        }
        assert_eq!(placement(&[], 1), vec![Device::Cpu]);
    }
}
