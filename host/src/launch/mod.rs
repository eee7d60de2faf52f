//! The one place that turns an experiment into running parts, for `eval` and `train`:
//! resolves the pool's devices, starts one worker per model (weights, and for training
//! the optimizer and reference copy, created on the worker's thread), and builds the
//! team of agents, environment and rewards around their handles.

use crate::{
    config::{EngineKind, EngineSection, Experiment, ExportDtype, ModelSection, Offload, Shard},
    engine::{EngineClient, LlamaCpp, ManagedServer, Protocol, Retry, Sglang, Vllm},
    model::{
        ModelError, TextTokenizer, checked_config, default_kind, gguf::ExportType, load_pretrained,
        memory,
    },
    plugin::Registry,
    pool::{
        Backend, BackendError, DeviceError, DeviceTurn, EngineBackend, EngineFailure, ModelBackend,
        OffloadParts, WeightSync, WorkerConfig, WorkerError, cuda_count, load_adapter_dir,
        placement::{self, Budget, PlacementError, Plan, Trains, Unit},
        sizing::{self, Sizes},
        spawn_worker_on, start_serving,
    },
    rollout::{ModelSlot, RolloutError, Team},
    update::Optimizer,
};
use std::{
    collections::HashMap,
    path::{Path, PathBuf},
    sync::Arc,
};
use thiserror::Error;

mod settings;
mod step_memory;
pub use settings::{asked_sizes, update_settings};
pub use step_memory::{check_step_memory, step_memory_problems};

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
    #[error("{path}: {source}")]
    Placement {
        path: PathBuf,
        #[source]
        source: PlacementError,
    },
    #[error("model `{model}`: engine: {message}")]
    Engine { model: String, message: String },
    /// `shard = "optimizer" | "full"` shards across a job's ranks: one process has none.
    #[error(
        "models[{index}].shard = \"{mode}\" (model `{model}`) shards {what} across the ranks of a data-parallel job, and this is one process: start it as a job (torchrun, or RANK, WORLD_SIZE and MASTER_ADDR; docs/distributed.md) or set shard = \"none\""
    )]
    ShardWithoutJob {
        index: usize,
        model: String,
        mode: &'static str,
        what: &'static str,
    },
    #[error(
        "[trainer] shadow_gradients is not built for a data-parallel job ({ranks} ranks): the second backward would need its own reductions; run it in one process"
    )]
    ShadowGradientsInJob { ranks: usize },
    /// Counts that size a training step beyond what the machine can hold.
    #[error(transparent)]
    StepMemory(#[from] crate::config::ConfigErrors),
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
    /// A job of several ranks: each training worker joins its model's process group.
    pub dist: Option<Arc<crate::pool::DistJob>>,
}

/// The worker settings of an experiment: `base` with the `[pool]` batching keys
/// (`batching`, `gather_window_ms`) of the experiment in place of its own, and the
/// worker's generation rows (`max_batch_rows`, or sized for its device: [`Unit::sizes`]).
pub fn worker_config(
    base: &WorkerConfig,
    pool: &crate::config::PoolSection,
    sizes: &Sizes,
) -> WorkerConfig {
    WorkerConfig {
        max_sequences: sizes.rows,
        gather_window: std::time::Duration::from_millis(pool.gather_window_ms),
        batching: pool.batching,
        ..base.clone()
    }
}

/// The folder model `id` loads from.
pub fn model_path(default: &Path, id: &str, checkpoint: Option<&Path>) -> PathBuf {
    match checkpoint {
        Some(dir) if dir.join(id).is_dir() => dir.join(id),
        Some(dir) => dir.to_path_buf(),
        None => default.to_path_buf(),
    }
}

/// The workers an experiment starts: each full model alone, and the LoRA models that
/// share a base, dtype, device and engine together (indices into `[[models]]`).
pub fn worker_groups(exp: &Experiment) -> Vec<Vec<usize>> {
    let mut groups: Vec<Vec<usize>> = Vec::new();
    let f = &exp.file;
    for (i, m) in f.models.iter().enumerate() {
        let same = |j: &usize| {
            let o = &f.models[*j];
            o.base.is_some()
                && o.base == m.base
                && o.dtype == m.dtype
                && o.device == m.device
                && o.engine == m.engine
        };
        match groups
            .iter_mut()
            .find(|g| m.base.is_some() && g.first().is_some_and(same))
        {
            Some(g) => g.push(i),
            None => groups.push(vec![i]),
        }
    }
    groups
}

/// The dtype of model `m` on `device`.
fn kind_of(m: &ModelSection, device: tch::Device) -> tch::Kind {
    m.dtype.map_or_else(|| default_kind(device), |d| d.kind())
}

/// The workers an experiment starts ([`worker_groups`]), where they go, and the batch
/// sizes each runs with ([`sizing`]), in the order of the groups.
#[derive(Debug, Clone)]
pub struct Planned {
    pub groups: Vec<Vec<usize>>,
    pub plan: Plan,
    pub sizes: Vec<Sizes>,
}

/// Where the experiment's workers go ([`placement::plan`]), refused with a table of
/// estimates when they cannot fit. Reads only the models' `config.json`.
pub fn plan_experiment(
    exp: &Experiment,
    train: bool,
    ranks: usize,
) -> Result<Planned, LaunchError> {
    plan_for_rank(exp, train, None, ranks)
}

/// [`plan_experiment`] for one rank of a data-parallel job of `ranks`: on a machine
/// with GPUs, `auto` is the rank's own GPU (`cuda:LOCAL_RANK`), not every GPU; a model
/// with `shard` set counts this rank's share of its state.
pub fn plan_for_rank(
    exp: &Experiment,
    train: bool,
    local_rank: Option<usize>,
    ranks: usize,
) -> Result<Planned, LaunchError> {
    let f = &exp.file;
    if train {
        let problems = check_step_memory(exp);
        if !problems.is_empty() {
            return Err(crate::config::ConfigErrors(problems).into());
        }
    }
    let device_err = |source| LaunchError::Device {
        path: exp.path.clone(),
        source,
    };
    let gpus = cuda_count();
    let for_rank = |spec: crate::pool::DeviceSpec| match (spec, local_rank) {
        (crate::pool::DeviceSpec::Auto, Some(r)) if gpus > 0 => crate::pool::DeviceSpec::Cuda(r),
        (spec, _) => spec,
    };
    let specs = f
        .pool
        .devices
        .iter()
        .map(|d| d.spec().map(for_rank))
        .collect::<Result<Vec<_>, _>>()
        .map_err(device_err)?;
    let limit = f
        .pool
        .memory_limit_gib
        .map(|g| (g * (1u64 << 30) as f64) as u64);
    let free = |d: tch::Device| {
        let free = memory::available_memory(d).map(|a| a.bytes);
        match (free, limit) {
            (Some(f), Some(l)) => Some(f.min(l)),
            (f, l) => f.or(l),
        }
    };
    let groups = worker_groups(exp);
    let asked = asked_sizes(f);
    let mut units = Vec::new();
    let mut plans: Vec<WorkerPlan> = Vec::new();
    let episodes = u64::from(f.trainer.prompts_per_step) * u64::from(f.trainer.group_size);
    for g in &groups {
        let first = &f.models[g[0]];
        let config =
            checked_config(first.weights_dir()).map_err(|source| LaunchError::Tokenizer {
                model: first.id.clone(),
                source,
            })?;
        let spec = for_rank(first.device.spec().map_err(device_err)?);
        // The dtype where the model will most likely go: the first device it may use.
        let likely = match spec {
            crate::pool::DeviceSpec::Auto => specs
                .first()
                .and_then(|s| s.resolve_with(gpus).ok())
                .and_then(|d| d.first().copied())
                .unwrap_or(tch::Device::Cpu),
            other => other.resolve_with(gpus).map_err(device_err)?[0],
        };
        let kind = kind_of(first, likely);
        let adapters: u64 = g
            .iter()
            .filter_map(|&i| f.models[i].lora.as_ref())
            .map(|l| placement::adapter_parameters(&config, l))
            .sum();
        let trains = match (train, first.lora.is_some()) {
            (false, _) => Trains::Nothing,
            (true, false) => Trains::Full,
            (true, true) => Trains::Adapters(adapters),
        };
        // A full model trained with a KL term holds a frozen reference copy too.
        let reference = train && first.lora.is_none() && f.trainer.kl.is_some();
        let ids: Vec<&str> = g.iter().map(|&i| f.models[i].id.as_str()).collect();
        let new_tokens = f
            .agents
            .iter()
            .filter(|a| ids.contains(&a.model.as_str()))
            .map(|a| u64::from(a.sampling.max_new_tokens.get()))
            .max()
            .unwrap_or_else(|| u64::from(crate::config::Sampling::default().max_new_tokens.get()));
        let context = config.max_position_embeddings.max(1) as u64;
        let prompt_tokens = PROMPT_BUDGET.min(context.saturating_sub(new_tokens).max(1));
        let sharding = placement::Sharding {
            mode: if ranks > 1 {
                first.shard
            } else {
                crate::config::Shard::None
            },
            ranks: ranks as u64,
        };
        plans.push(WorkerPlan {
            config,
            kind,
            adapters,
            trains,
            sharding,
            prompt_tokens,
            new_tokens,
            reference,
            engine: first.engine.is_some(),
            likely,
        });
        units.push(Unit {
            models: ids.iter().map(|s| s.to_string()).collect(),
            device: spec,
            sharding,
            footprint: placement::Footprint::default(),
        });
    }
    // Sizing against each device's free memory less what the other workers that may
    // share it hold (under inactive offload, only their weights stay during a rollout).
    let mut unit_sizes = Vec::with_capacity(units.len());
    for (u, plan) in plans.iter().enumerate() {
        let sizes = if plan.likely.is_cuda() {
            let others: u64 = (plans.iter().enumerate())
                .filter(|(o, other)| *o != u && other.likely == plan.likely)
                .map(|(_, other)| {
                    let fp = other.footprint(&asked.on_cpu(), episodes);
                    match f.pool.offload {
                        crate::config::Offload::Inactive => fp.weights,
                        _ => fp.weights + fp.gradients + fp.optimizer,
                    }
                })
                .sum();
            let free = free(plan.likely).map(|b| b.saturating_sub(others));
            sizing::for_gpu(asked, free, &plan.worker())
        } else {
            asked.on_cpu()
        };
        units[u].footprint = plan.footprint(&sizes, episodes);
        unit_sizes.push(sizes);
    }
    let plan = placement::plan(&units, &specs, gpus, f.pool.offload, &free).map_err(|source| {
        let source = match source {
            // Where "free" comes from: the machine's, or the cap the experiment sets.
            PlacementError::DoesNotFit {
                offload,
                summary,
                table,
            } => PlacementError::DoesNotFit {
                offload,
                summary: match f.pool.memory_limit_gib {
                    Some(g) => format!(
                        "{summary} (the lower of what it has and [pool] memory_limit_gib = {g})"
                    ),
                    None => format!(
                        "{summary} (MemAvailable on the CPU, the driver's free memory on a GPU)"
                    ),
                },
                table,
            },
            other => other,
        };
        LaunchError::Placement {
            path: exp.path.clone(),
            source,
        }
    })?;
    Ok(Planned {
        groups,
        plan,
        sizes: unit_sizes,
    })
}

/// What placing and sizing one worker needs: its model's shape and dtype, what it
/// trains and how its state is sharded, the token budget of a row, whether it holds a
/// KL reference copy or rolls out on an engine, and the device it most likely gets.
struct WorkerPlan {
    config: crate::model::ModelConfig,
    kind: tch::Kind,
    adapters: u64,
    trains: Trains,
    sharding: placement::Sharding,
    prompt_tokens: u64,
    new_tokens: u64,
    reference: bool,
    engine: bool,
    likely: tch::Device,
}

impl WorkerPlan {
    fn worker(&self) -> sizing::Worker<'_> {
        sizing::Worker {
            config: &self.config,
            kind: self.kind,
            adapter_params: self.adapters,
            trains: self.trains,
            sharding: self.sharding,
            prompt_tokens: self.prompt_tokens,
            new_tokens: self.new_tokens,
        }
    }

    /// The worker's footprint with `sizes` (at most `episodes` generation rows).
    fn footprint(&self, sizes: &Sizes, episodes: u64) -> placement::Footprint {
        let budget = Budget {
            rows: (sizes.rows as u64).min(episodes.max(1)),
            prompt_tokens: self.prompt_tokens,
            new_tokens: self.new_tokens,
            micro_batch_tokens: sizes.micro_batch_tokens as u64,
            logits_bytes: sizes.logits_bytes as u64,
        };
        let mut fp = placement::footprint(
            &self.config,
            self.kind,
            self.adapters,
            self.trains,
            &budget,
            self.sharding,
        );
        if self.engine {
            // Its rollouts run on the engine: no KV cache in this process.
            fp.kv_cache = 0;
        }
        if self.reference {
            fp.weights = fp.weights.saturating_add(
                memory::parameter_count(&self.config) * self.kind.elt_size_in_bytes() as u64,
            );
        }
        fp
    }
}

/// Prompt tokens per row the KV-cache budget assumes (prompts are rendered only during
/// the rollout; the worker still splits batches by the memory it really has).
pub const PROMPT_BUDGET: u64 = 1024;

/// An engine drmas starts once for a model (SGLang, vLLM given a `command`): on a free
/// port of 127.0.0.1, on the model's folder, its output in `log`.
struct EngineStart {
    command: Vec<String>,
    port: u16,
    model: PathBuf,
    log: PathBuf,
    ready_within: std::time::Duration,
}

impl EngineStart {
    /// Starts it and waits until `client` finds it serving; a server that ends or never
    /// answers is an error with the end of its log.
    fn run(&self, client: &EngineClient) -> Result<ManagedServer, BackendError> {
        if let Some(dir) = self.log.parent() {
            std::fs::create_dir_all(dir).map_err(|source| EngineFailure::LogDir {
                dir: dir.to_path_buf(),
                source,
            })?;
        }
        Ok(start_serving(
            &self.command,
            &[],
            self.port,
            &self.model,
            &self.log,
            client,
            self.ready_within,
        )?)
    }
}

/// What a model's engine takes: its client, requests in flight, how it takes new
/// weights, and the server drmas starts first, if any.
type EnginePlan = (EngineClient, usize, WeightSync, Option<EngineStart>);

/// A model's engine (docs/engines.md): its client, requests in flight, and how it takes
/// new weights. An engine drmas runs gets a free port of 127.0.0.1 now; `model_dir` is
/// what an SGLang or vLLM started by drmas serves.
fn engine_plan(
    e: &EngineSection,
    model: &str,
    model_dir: &Path,
    output_dir: &Path,
) -> Result<EnginePlan, LaunchError> {
    let sync_dir = e
        .sync_dir
        .clone()
        .unwrap_or_else(|| output_dir.join("engine").join(model));
    let retry = Retry {
        attempts: e.attempts.get(),
        backoff: std::time::Duration::from_millis(500),
    };
    let timeout = std::time::Duration::from_secs_f64(e.timeout_s);
    let free_port = || {
        crate::engine::free_port().map_err(|source| LaunchError::Engine {
            model: model.to_string(),
            message: format!("no free port for the engine: {source}"),
        })
    };
    // SGLang and vLLM: at the given address, or started here once by drmas.
    let remote = |sync_dir: PathBuf| -> Result<(String, Option<EngineStart>), LaunchError> {
        match (&e.url, &e.command) {
            (Some(url), _) => Ok((url.clone(), None)),
            (None, Some(command)) => {
                let port = free_port()?;
                let start = EngineStart {
                    command: command.clone(),
                    port,
                    model: model_dir.to_path_buf(),
                    log: sync_dir.join("engine.log"),
                    ready_within: timeout,
                };
                Ok((format!("http://127.0.0.1:{port}"), Some(start)))
            }
            (None, None) => unreachable!("validated"),
        }
    };
    let (protocol, url, sync, start): (Box<dyn Protocol>, String, WeightSync, _) = match e.kind {
        EngineKind::LlamaCpp => {
            let port = free_port()?;
            let sync = WeightSync::Restart {
                log: sync_dir.join("engine.log"),
                dir: sync_dir,
                port,
                template: e.gguf.clone().expect("validated"),
                kind: match e.export {
                    ExportDtype::F32 => ExportType::F32,
                    ExportDtype::F16 => ExportType::F16,
                },
                command: e.command.clone().expect("validated"),
                ready_within: timeout,
            };
            (
                Box::new(LlamaCpp),
                format!("http://127.0.0.1:{port}"),
                sync,
                None,
            )
        }
        EngineKind::Sglang => {
            let (url, start) = remote(sync_dir.clone())?;
            (
                Box::new(Sglang),
                url,
                WeightSync::Folder { dir: sync_dir },
                start,
            )
        }
        EngineKind::Vllm => {
            let (url, start) = remote(sync_dir.clone())?;
            let protocol = Box::new(Vllm {
                model: e.served_model.clone(),
            });
            (protocol, url, WeightSync::Folder { dir: sync_dir }, start)
        }
    };
    Ok((
        EngineClient::new(&url, protocol, timeout, retry),
        e.parallel,
        sync,
        start,
    ))
}

/// Starts the experiment's model workers and builds its team.
pub fn launch(
    exp: &Experiment,
    registry: &Registry,
    opts: &LaunchOptions,
) -> Result<Team, LaunchError> {
    let f = &exp.file;
    if opts.train
        && opts.dist.is_none()
        && let Some((index, m)) = f
            .models
            .iter()
            .enumerate()
            .find(|(_, m)| !m.shard.is_none())
    {
        return Err(LaunchError::ShardWithoutJob {
            index,
            model: m.id.clone(),
            mode: m.shard.name(),
            what: match m.shard {
                crate::config::Shard::Full => "the weights and the optimizer state",
                _ => "the optimizer state",
            },
        });
    }
    let local_rank = opts.dist.as_ref().map(|d| d.local_rank);
    let ranks = opts.dist.as_ref().map_or(1, |d| d.world_size);
    if opts.train && opts.dist.is_some() && f.trainer.shadow_gradients {
        return Err(LaunchError::ShadowGradientsInJob { ranks });
    }
    let Planned {
        groups,
        plan,
        sizes: unit_sizes,
    } = plan_for_rank(exp, opts.train, local_rank, ranks)?;
    let mut turns: HashMap<tch::Device, DeviceTurn> = HashMap::new();
    let mut models = HashMap::new();
    let asked = asked_sizes(f);
    for ((group, device), unit) in groups
        .iter()
        .zip(plan.devices.iter().copied())
        .zip(&unit_sizes)
    {
        // Sized for the GPU it was most likely to get; placed on the CPU, the CPU's.
        let sizes = if device.is_cuda() {
            *unit
        } else {
            asked.on_cpu()
        };
        let worker = worker_config(&opts.worker, &f.pool, &sizes);
        let turn = turns.entry(device).or_default().clone();
        let members: Vec<&ModelSection> = group.iter().map(|&i| &f.models[i]).collect();
        let m = members[0];
        let path = match m.base {
            Some(_) => m.weights_dir().to_path_buf(),
            None => model_path(&m.path, &m.id, opts.checkpoint.as_deref()),
        };
        let tokenizer =
            Arc::new(
                TextTokenizer::from_dir(&path).map_err(|source| LaunchError::Tokenizer {
                    model: m.id.clone(),
                    source,
                })?,
            );
        let kind = Some(kind_of(m, device));
        let settings: Option<Vec<_>> = opts.train.then(|| {
            members
                .iter()
                .map(|a| update_settings(f, a, &sizes))
                .collect()
        });
        let shards: Vec<Shard> = members.iter().map(|a| a.shard).collect();
        let ids: Vec<String> = members.iter().map(|a| a.id.clone()).collect();
        // The reference is the run's starting point: the experiment's folder (or the
        // warm start's), even when resuming from a checkpoint.
        // A LoRA model's reference is its frozen base, already loaded.
        let reference_path =
            (opts.train && f.trainer.kl.is_some() && m.base.is_none()).then(|| path.clone());
        let backend_tokenizer = tokenizer.clone();
        let load_path = path.clone();
        let adapters: Option<Vec<(String, crate::model::lora::LoraConfig, Option<PathBuf>)>> =
            m.base.is_some().then(|| {
                members
                    .iter()
                    .map(|a| {
                        let dir = opts.checkpoint.as_deref().map(|c| {
                            // Several adapters on one base each need their own folder.
                            if members.len() > 1 || c.join(&a.id).is_dir() {
                                c.join(&a.id)
                            } else {
                                c.to_path_buf()
                            }
                        });
                        (a.id.clone(), a.lora.clone().expect("validated"), dir)
                    })
                    .collect()
            });
        let seed = f.experiment.seed;
        let offload = f.pool.offload;
        let dist = opts.dist.clone().filter(|_| opts.train);
        let group_name = format!("model/{}", m.id);
        let engine = m
            .engine
            .as_ref()
            .map(|e| engine_plan(e, &m.id, &path, &exp.output_dir()))
            .transpose()?;
        let model_id = m.id.clone();
        let handle = spawn_worker_on(&m.id, worker, turn, move || {
            let model = load_pretrained(&load_path, device, kind)?;
            let mut backend = match &adapters {
                None => {
                    let mut b = ModelBackend::new(model, Some(backend_tokenizer), load_path);
                    b.slots[0].id = model_id;
                    b
                }
                Some(list) => {
                    let configs: Vec<_> = list
                        .iter()
                        .map(|(id, c, _)| (id.clone(), c.clone()))
                        .collect();
                    let mut b = ModelBackend::with_adapters(
                        model,
                        Some(backend_tokenizer),
                        load_path,
                        &configs,
                        seed,
                    );
                    for (slot, (_, _, dir)) in list.iter().enumerate() {
                        if let Some(dir) = dir {
                            load_adapter_dir(&mut b.model, slot, dir)?;
                        }
                    }
                    b
                }
            };
            if let Some(settings) = settings {
                let reference = reference_path
                    .map(|p| load_pretrained(&p, device, kind))
                    .transpose()?;
                if let Some(job) = &dist {
                    // On the worker's thread, which alone will use it; before the
                    // optimizers, which a sharded one is made for.
                    backend.collective = Some(job.model_group(&group_name, device)?);
                }
                backend = backend.with_training_sharded(settings, &shards, reference)?;
                for (slot, id) in ids.iter().enumerate() {
                    if let Some(Optimizer::Sharded(o)) =
                        backend.training(slot).map(|t| &t.optimizer)
                    {
                        tracing::info!(
                            model = %id,
                            rank = o.rank(),
                            world_size = o.layout().world_size,
                            state_bytes = o.state_bytes(),
                            "optimizer state sharded: this rank holds its shard only"
                        );
                    }
                }
                if offload != Offload::None {
                    // Optimizer state waits in host memory for the first update.
                    backend.offload(OffloadParts::Optimizer)?;
                }
            }
            if let Some((client, parallel, sync, start)) = engine {
                let server = start.map(|s| s.run(&client)).transpose()?;
                let backend = EngineBackend::start_on(backend, client, parallel, sync, server)?;
                return Ok::<Box<dyn Backend>, BackendError>(Box::new(backend));
            }
            Ok::<Box<dyn Backend>, BackendError>(Box::new(backend))
        })?;
        for (slot, member) in members.iter().enumerate() {
            tracing::info!(model = %member.id, path = %path.display(), ?device, "model loaded");
            models.insert(
                member.id.clone(),
                ModelSlot {
                    id: member.id.clone(),
                    codec: tokenizer.clone(),
                    handle: handle.for_slot(&member.id, slot),
                },
            );
        }
    }
    Ok(Team::from_experiment(exp, registry, models)?)
}
