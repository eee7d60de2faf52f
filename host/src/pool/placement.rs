//! Where each model worker goes: models with an explicit device stay there; `auto`
//! models are packed onto the pool's devices by estimated memory, largest first, each
//! to the device it leaves the most room on. When they cannot fit, nothing is loaded:
//! the error is a table of every model's estimate, its device and that device's free
//! memory.
//!
//! What a device must hold depends on the offload mode, because workers on one device
//! take turns computing (one device lock) and offloaded state leaves the device:
//!
//! - `none`: Σ (weights + gradients + optimizer) + the largest transient budget
//!   (KV cache of a generation batch, or activations of an update micro-batch);
//! - `optimizer`: Σ (weights + gradients) + the largest of (KV cache) or (optimizer +
//!   activations): optimizer state comes on only for its model's update;
//! - `inactive`: the larger of the rollout (Σ weights + the largest KV cache) and the
//!   largest single update (weights + gradients + optimizer + activations), since
//!   idle models are in host memory during updates.
//!
//! In a data-parallel job the footprint is one rank's, and `[[models]] shard` divides
//! it ([`Sharding`]): with `"optimizer"` the moments, masters and reduced gradient are
//! 1/N; with `"full"` the weights during the update are 1/N too, plus the units whole at
//! once, while rollouts still hold them whole.

use super::device::DeviceSpec;
use super::offload::Offload;
use crate::model::memory::gib;
use std::fmt::Write as _;
use tch::Device;
use thiserror::Error;

/// One worker's memory, by part, in bytes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Footprint {
    pub weights: u64,
    pub gradients: u64,
    pub optimizer: u64,
    /// The KV cache and sampling work of the largest generation batch budgeted.
    pub kv_cache: u64,
    /// The saved activations and logits of one update micro-batch.
    pub activations: u64,
    /// With the weights sharded (`shard = "full"`): what of them the rank holds during
    /// its update (its shards and the units gathered at once); `None`: whole.
    pub update_weights: Option<u64>,
}

impl Footprint {
    /// What this worker alone needs resident at its peak under `offload`.
    pub fn alone(&self, offload: Offload) -> u64 {
        need(std::slice::from_ref(self), offload)
    }

    pub fn describe(&self) -> String {
        let mut parts = vec![match self.update_weights {
            None => format!("weights {}", gib(self.weights)),
            Some(u) => format!("weights {} ({} in the update)", gib(self.weights), gib(u)),
        }];
        for (name, b) in [
            ("gradients", self.gradients),
            ("optimizer", self.optimizer),
            ("KV cache", self.kv_cache),
            ("activations", self.activations),
        ] {
            if b > 0 {
                parts.push(format!("{name} {}", gib(b)));
            }
        }
        parts.join(", ")
    }
}

/// Bytes a device must hold for the workers `on` it (see the module's rules).
pub fn need(on: &[Footprint], offload: Offload) -> u64 {
    let sum = |f: fn(&Footprint) -> u64| on.iter().map(f).fold(0u64, u64::saturating_add);
    let max = |f: &dyn Fn(&Footprint) -> u64| on.iter().map(f).max().unwrap_or(0);
    match offload {
        Offload::None => sum(|f| f.weights + f.gradients + f.optimizer)
            .saturating_add(max(&|f| f.kv_cache.max(f.activations))),
        Offload::Optimizer => sum(|f| f.weights + f.gradients)
            .saturating_add(max(&|f| f.kv_cache.max(f.optimizer + f.activations))),
        Offload::Inactive => {
            let rollout = sum(|f| f.weights).saturating_add(max(&|f| f.kv_cache));
            let update = max(&|f| {
                f.update_weights.unwrap_or(f.weights) + f.gradients + f.optimizer + f.activations
            });
            rollout.max(update)
        }
    }
}

/// One worker to place: the models it serves (a LoRA base serves several), where it
/// was asked to go, and what it needs.
#[derive(Debug, Clone)]
pub struct Unit {
    pub models: Vec<String>,
    pub device: DeviceSpec,
    /// One rank's footprint ([`footprint`]).
    pub footprint: Footprint,
    /// How the footprint was divided among a job's ranks.
    pub sharding: Sharding,
}

impl Unit {
    fn name(&self) -> String {
        self.models.join(" + ")
    }
}

/// Where every unit goes, with the memory each device then needs and has.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The device of each unit, in the order given.
    pub devices: Vec<Device>,
    pub units: Vec<Unit>,
    pub offload: Offload,
    /// (device, bytes needed, bytes free where known).
    pub per_device: Vec<(Device, u64, Option<u64>)>,
}

#[derive(Debug, Error, PartialEq)]
pub enum PlacementError {
    #[error("model `{model}`: device: {source}")]
    Device {
        model: String,
        #[source]
        source: super::DeviceError,
    },
    #[error(
        "the models do not fit the pool's devices (offload = \"{offload}\"): {summary}; nothing was loaded:\n{table}\nfree memory, a smaller model or batch, `offload = \"inactive\"`, bf16, LoRA or more devices would help"
    )]
    DoesNotFit {
        offload: String,
        /// What each device that is short asks for and has: `cpu needs 9.4 GiB and has
        /// 4.0 GiB free`.
        summary: String,
        table: String,
    },
}

fn device_name(d: Device) -> String {
    match d {
        Device::Cuda(i) => format!("cuda:{i}"),
        _ => "cpu".into(),
    }
}

/// The offload rule that applies on `d`: offload is skipped on the CPU (host memory is
/// its memory), so the `none` rule holds there.
fn mode_on(d: Device, offload: Offload) -> Offload {
    if d.is_cuda() { offload } else { Offload::None }
}

/// Places `units` on a machine with `cuda_count` GPUs whose pool is `pool`; `free`
/// gives the memory a device can still allocate (`None`: unknown, not checked).
pub fn plan(
    units: &[Unit],
    pool: &[DeviceSpec],
    cuda_count: usize,
    offload: Offload,
    free: &dyn Fn(Device) -> Option<u64>,
) -> Result<Plan, PlacementError> {
    let mut pool_devices: Vec<Device> = Vec::new();
    for spec in pool {
        let resolved = spec
            .resolve_with(cuda_count)
            .map_err(|source| PlacementError::Device {
                model: "[pool]".into(),
                source,
            })?;
        for d in resolved {
            if !pool_devices.contains(&d) {
                pool_devices.push(d);
            }
        }
    }
    if pool_devices.is_empty() {
        pool_devices.push(Device::Cpu);
    }
    let mut chosen: Vec<Option<Device>> = vec![None; units.len()];
    for (i, u) in units.iter().enumerate() {
        if u.device != DeviceSpec::Auto {
            let d = u
                .device
                .resolve_with(cuda_count)
                .map_err(|source| PlacementError::Device {
                    model: u.name(),
                    source,
                })?;
            chosen[i] = Some(d[0]);
        }
    }
    let on = |chosen: &[Option<Device>], d: Device| -> Vec<Footprint> {
        units
            .iter()
            .zip(chosen)
            .filter(|(_, c)| **c == Some(d))
            .map(|(u, _)| u.footprint.clone())
            .collect()
    };
    let mode = |d: Device| mode_on(d, offload);
    let room = |chosen: &[Option<Device>], d: Device| -> Option<i128> {
        free(d).map(|f| f as i128 - need(&on(chosen, d), mode(d)) as i128)
    };
    // Largest first, each where it leaves the most room (unknown free memory counts as
    // unlimited); ties go to the earlier device of the pool.
    let mut autos: Vec<usize> = (0..units.len()).filter(|&i| chosen[i].is_none()).collect();
    autos.sort_by_key(|&i| std::cmp::Reverse(units[i].footprint.alone(offload)));
    let mut fits = true;
    for i in autos {
        let mut best: Option<(Device, Option<i128>)> = None;
        for &d in &pool_devices {
            let mut trial = chosen.clone();
            trial[i] = Some(d);
            let left = room(&trial, d);
            let better = match (&best, left) {
                (None, _) => true,
                (Some((_, None)), _) => false,
                (Some((_, Some(_))), None) => true,
                (Some((_, Some(b))), Some(l)) => l > *b,
            };
            if better {
                best = Some((d, left));
            }
        }
        let (d, left) = best.expect("the pool has a device");
        fits &= left.is_none_or(|l| l >= 0);
        chosen[i] = Some(d);
    }
    let devices: Vec<Device> = chosen.into_iter().map(|d| d.expect("placed")).collect();
    let mut per_device: Vec<(Device, u64, Option<u64>)> = Vec::new();
    let placed: Vec<Option<Device>> = devices.iter().copied().map(Some).collect();
    for &d in &devices {
        if per_device.iter().any(|(x, _, _)| *x == d) {
            continue;
        }
        let needed = need(&on(&placed, d), mode(d));
        let f = free(d);
        fits &= f.is_none_or(|f| needed <= f);
        per_device.push((d, needed, f));
    }
    let plan = Plan {
        devices,
        units: units.to_vec(),
        offload,
        per_device,
    };
    if fits {
        Ok(plan)
    } else {
        let summary = plan
            .per_device
            .iter()
            .filter_map(|(d, needed, free)| match free {
                Some(f) if needed > f => Some(format!(
                    "{} needs {} and has {} free",
                    device_name(*d),
                    gib(*needed),
                    gib(*f)
                )),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join(", ");
        Err(PlacementError::DoesNotFit {
            offload: offload.name().into(),
            summary,
            table: plan.table(),
        })
    }
}

impl Plan {
    /// One line per model (its estimate and device), then one per device (what it must
    /// hold under the offload mode and what it has free).
    pub fn table(&self) -> String {
        let mut out = String::new();
        let width = self
            .units
            .iter()
            .map(|u| u.name().len())
            .max()
            .unwrap_or(5)
            .max(5);
        let _ = writeln!(
            out,
            "  {:<width$}  {:>10}  {:<7}  parts",
            "model", "estimate", "device"
        );
        for (u, d) in self.units.iter().zip(&self.devices) {
            let sharded = match u.sharding.mode {
                crate::update::Shard::None => String::new(),
                mode => format!(
                    "; shard = \"{}\", this rank's of {}",
                    mode.name(),
                    u.sharding.ranks
                ),
            };
            let _ = writeln!(
                out,
                "  {:<width$}  {:>10}  {:<7}  {}{sharded}",
                u.name(),
                gib(u.footprint.alone(mode_on(*d, self.offload))),
                device_name(*d),
                u.footprint.describe()
            );
        }
        let _ = writeln!(out, "  {:<7}  {:>10}  {:>10}", "device", "needs", "free");
        for (d, needed, free) in &self.per_device {
            let free = free.map_or_else(|| "unknown".to_string(), gib);
            let mark = match self.per_device.iter().find(|x| x.0 == *d) {
                Some((_, n, Some(f))) if n > f => "  does not fit",
                _ => "",
            };
            let _ = writeln!(
                out,
                "  {:<7}  {:>10}  {:>10}{mark}",
                device_name(*d),
                gib(*needed),
                free
            );
        }
        out.trim_end().to_string()
    }
}

/// What a worker trains, for its footprint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trains {
    Nothing,
    /// Every weight.
    Full,
    /// Only adapters of this many parameters in all.
    Adapters(u64),
}

/// The generation batch and update micro-batch a footprint budgets for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    pub rows: u64,
    pub prompt_tokens: u64,
    pub new_tokens: u64,
    pub micro_batch_tokens: u64,
    pub logits_bytes: u64,
}

/// What of a model's state a rank keeps only its share of, and among how many ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sharding {
    pub mode: crate::update::Shard,
    pub ranks: u64,
}

impl Sharding {
    /// Every rank holds everything (one process, or `shard = "none"`).
    pub const NONE: Sharding = Sharding {
        mode: crate::update::Shard::None,
        ranks: 1,
    };

    /// A rank's elements of a flat unit of `n` (padded to a multiple of the ranks).
    fn share(&self, n: u64) -> u64 {
        n.div_ceil(self.ranks.max(1))
    }
}

/// The footprint on one rank of a decoder `config` in `kind` with `adapter_params` LoRA
/// parameters (float32) on it, training `trains`, under `budget`, its state sharded as
/// `shard` says.
///
/// Sharded, per rank (as `update::sharded` and `update::full` hold it; N ranks, e the
/// trained parameters' bytes each, S = Σ over the flat units of ⌈unit / N⌉):
///
/// - `"optimizer"`: the optimizer 1/N (S·(8 + master)); the gradients the parameters'
///   own whole ones, plus this rank's reduced shard of the step's and of the agent's
///   (2·S·e);
/// - `"full"`: the same optimizer; the gradients the outer unit's whole (embeddings
///   and head: their gradient is kept until the micro-batch ends), one layer's
///   transient and the two shards; the weights in the update this rank's shard plus the
///   outer unit and two layers whole (one computing, the next prefetched); the
///   activations each layer's input per token (kept for the backward) plus one layer's
///   recomputed forward.
pub fn footprint(
    config: &crate::model::ModelConfig,
    kind: tch::Kind,
    adapter_params: u64,
    trains: Trains,
    budget: &Budget,
    shard: Sharding,
) -> Footprint {
    use crate::model::memory::{estimate_generation, parameter_count, parameter_split};
    use crate::update::Shard;
    let e = kind.elt_size_in_bytes() as u64;
    let p = parameter_count(config);
    let (layer, outer) = parameter_split(config);
    let layers = dim(config.num_layers);
    let weights = p.saturating_mul(e).saturating_add(adapter_params * 4);
    // What the optimizer steps, in elements and bytes each, and its shard.
    let (trained, te) = match trains {
        Trains::Nothing => (0, e),
        Trains::Full => (p, e),
        Trains::Adapters(n) => (n, 4),
    };
    // The rank's shard of the decoder's flat units, and of what the optimizer steps.
    let base_share = layers
        .saturating_mul(shard.share(layer))
        .saturating_add(shard.share(outer));
    let trained_share = match trains {
        Trains::Full => base_share,
        _ => shard.share(trained),
    };
    let master = if te == 4 { 0 } else { 4 };
    let (gradients, optimizer, update_weights) = match (trains, shard.mode) {
        (Trains::Nothing, _) => (0, 0, None),
        // f32 moments, plus an f32 master copy of weights that are not f32.
        (_, Shard::None) => (
            trained.saturating_mul(te),
            trained.saturating_mul(8 + master),
            None,
        ),
        (_, mode) => {
            let reduced = 2 * trained_share * te;
            let (held, update_weights) = match mode {
                Shard::Full => (
                    match trains {
                        Trains::Full => (outer + layer) * te,
                        _ => trained * te,
                    },
                    Some(
                        base_share
                            .saturating_add(outer + layer * layers.min(2))
                            .saturating_mul(e)
                            .saturating_add(adapter_params * 4),
                    ),
                ),
                _ => (trained.saturating_mul(te), None),
            };
            (
                held.saturating_add(reduced),
                trained_share.saturating_mul(8 + master),
                update_weights,
            )
        }
    };
    let kv_cache = estimate_generation(
        config,
        budget.rows,
        budget.prompt_tokens,
        budget.new_tokens,
        kind,
    )
    .total();
    let per_token = match shard.mode {
        // Each layer's input, and one layer's forward recomputed in the backward.
        crate::update::Shard::Full => layers
            .saturating_mul(dim(config.hidden_size) * e)
            .saturating_add(saved_per_token_layer(config, kind)),
        _ => layers.saturating_mul(saved_per_token_layer(config, kind)),
    };
    let activations = if trains == Trains::Nothing {
        0
    } else {
        budget
            .micro_batch_tokens
            .saturating_mul(per_token)
            // The log-softmax chunks are sized so that their logits, log-probs and
            // gradient together stay under the budget (`model::rows_per_chunk`).
            .saturating_add(budget.logits_bytes)
    };
    Footprint {
        weights,
        gradients,
        optimizer,
        kv_cache,
        activations,
        update_weights,
    }
}

fn dim(v: i64) -> u64 {
    v.max(0) as u64
}

/// Bytes autograd keeps for the backward pass per token and layer of the update's
/// forward (`model::decoder`, op by op; `scripts/py/saved_activations.py` checks the
/// count against torch's own hooks on saved tensors, docs/pool.md):
///
/// - each of the two RMSNorms: its input in float32 (`x.pow(2)`), the float32 rsqrt,
///   the normalized values and the scaled output in the weights' dtype
///   (4·hidden + 4 + 2·hidden·e);
/// - the attention: q and k after RoPE and v (the SDPA's inputs), its output (the
///   o projection's input) in the weights' dtype, and its float32 log-sum-exp per head
///   ((heads + 2·kv_heads)·head_dim·e + heads·head_dim·e + 4·heads);
/// - the MLP: the gate projection, its SiLU, the up projection and their product
///   (4·intermediate·e).
///
/// The prefix keys and values a packed micro-batch copies to each of its lanes are not
/// counted (they depend on the prompts); neither are the transient gradients of one
/// layer during the backward pass.
pub fn saved_per_token_layer(config: &crate::model::ModelConfig, kind: tch::Kind) -> u64 {
    let c = config;
    let e = kind.elt_size_in_bytes() as u64;
    let (h, i) = (dim(c.hidden_size), dim(c.intermediate_size));
    let q = dim(c.num_heads) * dim(c.head_dim);
    let kv = dim(c.num_kv_heads) * dim(c.head_dim);
    let norm = 4 * h + 4 + 2 * h * e;
    let attention = (2 * q + 2 * kv) * e + 4 * dim(c.num_heads);
    let mlp = 4 * i * e;
    2 * norm + attention + mlp
}

/// Parameters of one LoRA adapter with `config` on the decoder `model`.
pub fn adapter_parameters(
    model: &crate::model::ModelConfig,
    config: &crate::model::lora::LoraConfig,
) -> u64 {
    let d = |v: i64| v.max(0) as u64;
    let (h, i) = (d(model.hidden_size), d(model.intermediate_size));
    let q = d(model.num_heads) * d(model.head_dim);
    let kv = d(model.num_kv_heads) * d(model.head_dim);
    let per_layer: u64 = config
        .targets
        .iter()
        .map(|t| {
            let (out_dim, in_dim) = match t.as_str() {
                "q_proj" => (q, h),
                "k_proj" | "v_proj" => (kv, h),
                "o_proj" => (h, q),
                "gate_proj" | "up_proj" => (i, h),
                _ => (h, i),
            };
            d(config.rank) * (out_dim + in_dim)
        })
        .sum();
    per_layer * d(model.num_layers)
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    fn unit(name: &str, device: DeviceSpec, weights_gib: u64) -> Unit {
        Unit {
            models: vec![name.into()],
            device,
            footprint: Footprint {
                weights: weights_gib * GIB,
                gradients: weights_gib * GIB,
                optimizer: 2 * weights_gib * GIB,
                kv_cache: GIB,
                activations: 2 * GIB,
                update_weights: None,
            },
            sharding: Sharding::NONE,
        }
    }

    fn gpus(free_gib: &[u64]) -> impl Fn(Device) -> Option<u64> + '_ {
        move |d| match d {
            Device::Cuda(i) => free_gib.get(i).map(|g| g * GIB),
            _ => Some(1000 * GIB),
        }
    }

    #[test]
    fn the_memory_rules_of_each_offload_mode() {
        let f = [
            unit("a", DeviceSpec::Auto, 1).footprint,
            unit("b", DeviceSpec::Auto, 2).footprint,
        ];
        // none: Σ(w+g+o) = 4 + 8, plus max(kv, act) = 2.
        assert_eq!(need(&f, Offload::None), 14 * GIB);
        // optimizer: Σ(w+g) = 2 + 4, plus max(kv, o + act) = 4 + 2.
        assert_eq!(need(&f, Offload::Optimizer), 12 * GIB);
        // inactive: max(Σw + kv = 4, largest update 2+2+4+2 = 10).
        assert_eq!(need(&f, Offload::Inactive), 10 * GIB);
    }

    #[test]
    fn models_are_packed_by_memory_largest_first() {
        let units = [
            unit("small", DeviceSpec::Auto, 1),
            unit("big", DeviceSpec::Auto, 4),
            unit("mid", DeviceSpec::Auto, 2),
        ];
        let pool = [DeviceSpec::Auto];
        let plan = plan(&units, &pool, 2, Offload::None, &gpus(&[30, 24])).unwrap();
        // big alone needs 4+4+8 + 2 = 18: cuda:0 (12 left, 6 on cuda:1). mid needs 8 + 2:
        // with big on cuda:0 that is 26 (4 left), alone on cuda:1 10 (14 left): cuda:1.
        // small needs 4 + 2: cuda:0 would hold 22 (8 left), cuda:1 14 (10 left): cuda:1.
        assert_eq!(plan.devices[1], Device::Cuda(0));
        assert_eq!(plan.devices[2], Device::Cuda(1));
        assert_eq!(plan.devices[0], Device::Cuda(1));
        let needs: Vec<u64> = plan.per_device.iter().map(|p| p.1 / GIB).collect();
        assert_eq!(needs, [14, 18]);
    }

    #[test]
    fn explicit_devices_are_kept_and_counted() {
        let units = [
            unit("a", DeviceSpec::Cuda(1), 1),
            unit("b", DeviceSpec::Auto, 1),
            unit("c", DeviceSpec::Cpu, 1),
        ];
        let plan = plan(
            &units,
            &[DeviceSpec::Auto],
            2,
            Offload::None,
            &gpus(&[10, 10]),
        )
        .unwrap();
        assert_eq!(
            plan.devices,
            [Device::Cuda(1), Device::Cuda(0), Device::Cpu]
        );
    }

    #[test]
    fn a_device_named_twice_in_the_pool_is_one_device() {
        // `auto` and `cuda:0` on a one-GPU machine: both models share cuda:0.
        let units = [
            unit("a", DeviceSpec::Auto, 1),
            unit("b", DeviceSpec::Auto, 1),
        ];
        let pool = [DeviceSpec::Auto, DeviceSpec::Cuda(0)];
        let plan = plan(&units, &pool, 1, Offload::None, &gpus(&[80])).unwrap();
        assert_eq!(plan.devices, [Device::Cuda(0), Device::Cuda(0)]);
        assert_eq!(plan.per_device.len(), 1);
        // No pool devices at all means the CPU.
        let plan = plan_ok_on(&units, &[]);
        assert_eq!(plan.devices, [Device::Cpu, Device::Cpu]);
    }

    fn plan_ok_on(units: &[Unit], pool: &[DeviceSpec]) -> Plan {
        plan(units, pool, 0, Offload::None, &|_| None).unwrap()
    }

    #[test]
    fn an_unknown_or_missing_device_is_named() {
        let units = [unit("solver", DeviceSpec::Cuda(3), 1)];
        let err = plan(&units, &[DeviceSpec::Cpu], 1, Offload::None, &gpus(&[10])).unwrap_err();
        assert_eq!(
            err.to_string(),
            "model `solver`: device: device `cuda:3` does not exist: this machine has one CUDA device (devices: cpu, cuda:0)"
        );
        let err = plan(&units, &[DeviceSpec::Cuda(2)], 0, Offload::None, &gpus(&[])).unwrap_err();
        assert_eq!(
            err.to_string(),
            "model `[pool]`: device: device `cuda:2` does not exist: this machine has no CUDA device (devices: cpu)"
        );
    }

    #[test]
    fn models_that_do_not_fit_are_refused_with_a_table() {
        let units = [
            unit("solver-lm", DeviceSpec::Auto, 4),
            unit("verifier-lm", DeviceSpec::Auto, 4),
        ];
        let err = plan(&units, &[DeviceSpec::Auto], 1, Offload::None, &gpus(&[24])).unwrap_err();
        let text = err.to_string();
        assert_eq!(
            text,
            "the models do not fit the pool's devices (offload = \"none\"): cuda:0 needs 34.0 GiB and has 24.0 GiB free; nothing was loaded:
  model          estimate  device   parts
  solver-lm      18.0 GiB  cuda:0   weights 4.0 GiB, gradients 4.0 GiB, optimizer 8.0 GiB, KV cache 1.0 GiB, activations 2.0 GiB
  verifier-lm    18.0 GiB  cuda:0   weights 4.0 GiB, gradients 4.0 GiB, optimizer 8.0 GiB, KV cache 1.0 GiB, activations 2.0 GiB
  device        needs        free
  cuda:0     34.0 GiB    24.0 GiB  does not fit
free memory, a smaller model or batch, `offload = \"inactive\"`, bf16, LoRA or more devices would help"
        );
        // The same two fit when idle models go to host memory: 4+4+1 for the rollout,
        // 4+4+8+2 for one update.
        let plan = plan(
            &units,
            &[DeviceSpec::Auto],
            1,
            Offload::Inactive,
            &gpus(&[24]),
        )
        .unwrap();
        assert_eq!(
            plan.per_device,
            [(Device::Cuda(0), 18 * GIB, Some(24 * GIB))]
        );
        // Unknown free memory is not checked.
        let unknown = |_: Device| None;
        assert!(plan_ok(&units, &unknown));
    }

    fn plan_ok(units: &[Unit], free: &dyn Fn(Device) -> Option<u64>) -> bool {
        plan(units, &[DeviceSpec::Auto], 1, Offload::None, free).is_ok()
    }

    #[test]
    fn the_footprints_terms_by_hand() {
        let c = crate::model::memory::tests::tiny();
        let budget = tiny_budget();
        // Parameters: embed and lm_head 2·128·64, final norm 64, per layer q and o
        // 2·64·64, k and v 2·64·32, MLP 3·64·96, two norms 2·64.
        let p = 2 * (4096 + 4096 + 4096 + 18432 + 128) + 2 * 8192 + 64;
        assert_eq!(p, 78144);
        // Saved per token and layer, f32 (hidden 64, q 4·16 = 64, kv 2·16 = 32, 4 heads,
        // intermediate 96): each norm 4·64 + 4 + 2·64·4 = 772; attention
        // (2·64 + 2·32)·4 + 4·4 = 784; MLP 4·96·4 = 1536.
        assert_eq!(
            saved_per_token_layer(&c, tch::Kind::Float),
            2 * 772 + 784 + 1536
        );
        let f = footprint(
            &c,
            tch::Kind::Float,
            0,
            Trains::Full,
            &budget,
            Sharding::NONE,
        );
        assert_eq!(
            f,
            Footprint {
                weights: p * 4,
                gradients: p * 4,
                // Two f32 moments; no master copy of f32 weights.
                optimizer: p * 8,
                // The generation batch of model::memory's own hand-computed test
                // (3 rows, 5 + 7 tokens): KV cache 36,864, logits 16,896, prefill 56,055.
                kv_cache: 36864 + 16896 + 56055,
                // 100 tokens × 2 layers × 3864, and the logits budget once (its chunks
                // are sized to hold logits, log-probs and gradient within it).
                activations: 100 * 2 * 3864 + 1000,
                update_weights: None,
            }
        );
        // bf16: the norms still keep a float32 input and rsqrt: 4·64 + 4 + 2·64·2 = 516
        // each; attention 192·2 + 16 = 400; MLP 4·96·2 = 768. The optimizer holds an f32
        // master copy beside the two moments.
        assert_eq!(
            saved_per_token_layer(&c, tch::Kind::BFloat16),
            2 * 516 + 400 + 768
        );
        let f = footprint(
            &c,
            tch::Kind::BFloat16,
            0,
            Trains::Full,
            &budget,
            Sharding::NONE,
        );
        assert_eq!(
            (f.weights, f.gradients, f.optimizer),
            (p * 2, p * 2, p * 12)
        );
        assert_eq!(f.activations, 100 * 2 * 2200 + 1000);
        // Nothing trained: no gradients, optimizer or activations.
        let f = footprint(
            &c,
            tch::Kind::Float,
            0,
            Trains::Nothing,
            &budget,
            Sharding::NONE,
        );
        assert_eq!((f.gradients, f.optimizer, f.activations), (0, 0, 0));
        // Adapters: the base once plus the adapters in f32, their gradients and moments.
        let f = footprint(
            &c,
            tch::Kind::Float,
            500,
            Trains::Adapters(500),
            &budget,
            Sharding::NONE,
        );
        assert_eq!(
            (f.weights, f.gradients, f.optimizer),
            (p * 4 + 2000, 2000, 4000)
        );
    }

    /// The generation batch of model::memory's hand-computed test (3 rows, 5 + 7
    /// tokens), micro-batches of 100 tokens and 1000 bytes of logits.
    fn tiny_budget() -> Budget {
        Budget {
            rows: 3,
            prompt_tokens: 5,
            new_tokens: 7,
            micro_batch_tokens: 100,
            logits_bytes: 1000,
        }
    }

    #[test]
    fn the_sharded_footprints_terms_by_hand() {
        use crate::update::Shard;
        let c = crate::model::memory::tests::tiny();
        let budget = tiny_budget();
        // A layer 4096·3 + 18432 + 128 = 30,848; the outer unit 2·8192 + 64 = 16,448.
        // Three ranks: ⌈30848 / 3⌉ = 10,283 per layer, ⌈16448 / 3⌉ = 5,483 outer, so a
        // rank's shard S = 2·10,283 + 5,483 = 26,049 (f32).
        let on_three = |mode| {
            let sharding = Sharding { mode, ranks: 3 };
            footprint(&c, tch::Kind::Float, 0, Trains::Full, &budget, sharding)
        };
        let f = on_three(Shard::Optimizer);
        // Whole gradients, plus the step's and the agent's reduced shards; moments 1/N.
        assert_eq!(
            (f.weights, f.gradients, f.optimizer, f.update_weights),
            (78144 * 4, 78144 * 4 + 2 * 26049 * 4, 26049 * 8, None)
        );
        assert_eq!(f.activations, 100 * 2 * 3864 + 1000);
        let f = on_three(Shard::Full);
        // The outer unit's and one layer's gradients whole; in the update the shard plus
        // the outer unit and two layers whole (one computing, the next arriving); each
        // layer's input (64 f32) per token, plus one layer's recomputed forward.
        assert_eq!(
            (f.weights, f.gradients, f.optimizer, f.update_weights),
            (
                78144 * 4,
                (16448 + 30848) * 4 + 2 * 26049 * 4,
                26049 * 8,
                Some((26049 + 16448 + 2 * 30848) * 4)
            )
        );
        assert_eq!(f.activations, 100 * (2 * 64 * 4 + 3864) + 1000);
        // With idle models in host memory the update counts the sharded weights.
        assert_eq!(
            need(std::slice::from_ref(&f), Offload::Inactive),
            (f.weights + f.kv_cache)
                .max((26049 + 16448 + 2 * 30848) * 4 + f.gradients + f.optimizer + f.activations)
        );
    }

    #[test]
    fn the_math_teams_estimate_by_hand() {
        // SmolLM2-135M-Instruct (configs/math-drmas.toml: two of it, f32 on the CPU).
        let c = crate::model::ModelConfig::from_json(
            std::path::Path::new("config.json"),
            r#"{"model_type": "llama", "vocab_size": 49152, "hidden_size": 576,
                "intermediate_size": 1536, "num_hidden_layers": 30, "num_attention_heads": 9,
                "num_key_value_heads": 3, "max_position_embeddings": 8192,
                "tie_word_embeddings": true}"#,
        )
        .unwrap();
        // Per token and layer: norms 2·(4·576 + 4 + 2·576·4) = 13,832; attention
        // (2·576 + 2·192)·4 + 4·9 = 6,180; MLP 4·1536·4 = 24,576. torch's hooks on saved
        // tensors count 45,100 for the same forward (scripts/py/saved_activations.py;
        // the rest is the RoPE tables and the mask, shared by the layers).
        assert_eq!(saved_per_token_layer(&c, tch::Kind::Float), 44588);
        let budget = Budget {
            rows: 24,
            prompt_tokens: 1024,
            new_tokens: 48,
            micro_batch_tokens: 4096,
            logits_bytes: 256 << 20,
        };
        let f = footprint(
            &c,
            tch::Kind::Float,
            0,
            Trains::Full,
            &budget,
            Sharding::NONE,
        );
        assert_eq!(f.weights, 134_515_008 * 4);
        assert_eq!(f.activations, 4096 * 30 * 44588 + (256 << 20));
        let team = [f.clone(), f];
        // Σ (weights + gradients + AdamW) of both, plus one update's activations (more
        // than the rollout's KV cache): 9.4 GiB, against 11.8 GiB before the count.
        assert_eq!(
            need(&team, Offload::None),
            2 * 134_515_008 * 16 + 5_747_408_896
        );
        assert_eq!(gib(need(&team, Offload::None)), "9.4 GiB");
    }

    /// Qwen3-4B and Qwen2.5-7B from their published shapes (no weights needed).
    fn paper_model(name: &str) -> crate::model::ModelConfig {
        let json = match name {
            "Qwen3-4B" => {
                r#"{"model_type": "qwen3", "vocab_size": 151936, "hidden_size": 2560,
                "intermediate_size": 9728, "num_hidden_layers": 36, "num_attention_heads": 32,
                "num_key_value_heads": 8, "head_dim": 128, "max_position_embeddings": 40960,
                "tie_word_embeddings": true}"#
            }
            _ => {
                r#"{"model_type": "qwen2", "vocab_size": 152064, "hidden_size": 3584,
                "intermediate_size": 18944, "num_hidden_layers": 28, "num_attention_heads": 28,
                "num_key_value_heads": 4, "max_position_embeddings": 32768,
                "tie_word_embeddings": false}"#
            }
        };
        crate::model::ModelConfig::from_json(std::path::Path::new("config.json"), json).unwrap()
    }

    /// The plan docs/distributed.md gives for the paper's teams: per rank, bf16 with f32
    /// masters, drmas's default micro-batch (4096 tokens, 256 MiB of logits) and 64
    /// rollouts of 1024 + 1024 tokens, against an 80 GB GPU.
    #[test]
    fn the_paper_teams_plan_per_rank() {
        use crate::update::Shard;
        // The published parameter counts.
        assert_eq!(
            crate::model::memory::parameter_count(&paper_model("Qwen3-4B")),
            4_022_468_096
        );
        assert_eq!(
            crate::model::memory::parameter_count(&paper_model("Qwen2.5-7B")),
            7_615_616_512
        );
        let budget = Budget {
            rows: 64,
            prompt_tokens: 1024,
            new_tokens: 1024,
            micro_batch_tokens: 4096,
            logits_bytes: 256 << 20,
        };
        let gpu = 80_000_000_000u64;
        let mut verdicts = Vec::new();
        for (model, team, ranks) in [("Qwen3-4B", 2, 4), ("Qwen2.5-7B", 3, 8)] {
            let c = paper_model(model);
            for mode in [Shard::None, Shard::Optimizer, Shard::Full] {
                let sharding = Sharding { mode, ranks };
                let f = footprint(&c, tch::Kind::BFloat16, 0, Trains::Full, &budget, sharding);
                let fs = vec![f.clone(); team];
                let needs: Vec<u64> = [Offload::None, Offload::Optimizer, Offload::Inactive]
                    .iter()
                    .map(|&o| need(&fs, o))
                    .collect();
                eprintln!(
                    "{team} × {model}, {ranks} ranks, shard = {:?}: {}; needs none {} / optimizer {} / inactive {}",
                    mode.name(),
                    f.describe(),
                    gib(needs[0]),
                    gib(needs[1]),
                    gib(needs[2])
                );
                verdicts.push((
                    model,
                    mode,
                    needs.iter().map(|&n| n <= gpu).collect::<Vec<_>>(),
                ));
            }
        }
        let fits = |model: &str, mode: Shard| {
            verdicts
                .iter()
                .find(|v| v.0 == model && v.1 == mode)
                .unwrap()
                .2
                .clone()
        };
        // Unsharded, neither team fits under any offload: one model's update alone is
        // more than the GPU (the 7B's 122 GB of weights, gradients and AdamW).
        assert_eq!(fits("Qwen3-4B", Shard::None), [false, false, false]);
        assert_eq!(fits("Qwen2.5-7B", Shard::None), [false, false, false]);
        // Sharded, both fit with idle models in host memory (`inactive`), where the
        // rollout's whole weights and KV cache are then the peak; with only the
        // optimizer offloaded, the 4B team fits once its weights are sharded too.
        assert_eq!(fits("Qwen3-4B", Shard::Optimizer), [false, false, true]);
        assert_eq!(fits("Qwen3-4B", Shard::Full), [false, true, true]);
        assert_eq!(fits("Qwen2.5-7B", Shard::Optimizer), [false, false, true]);
        assert_eq!(fits("Qwen2.5-7B", Shard::Full), [false, false, true]);
    }

    #[test]
    fn adapter_parameters_by_hand() {
        let config = crate::model::ModelConfig::from_json(
            std::path::Path::new("config.json"),
            r#"{"model_type": "llama", "vocab_size": 128, "hidden_size": 64, "intermediate_size": 96,
                "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                "max_position_embeddings": 256}"#,
        )
        .unwrap();
        let lora = crate::model::lora::LoraConfig {
            rank: 4,
            alpha: 8.0,
            dropout: 0.0,
            targets: vec!["q_proj".into(), "v_proj".into(), "down_proj".into()],
            rslora: false,
        };
        // q: 4·(64+64), v: 4·(32+64), down: 4·(64+96); two layers.
        assert_eq!(
            adapter_parameters(&config, &lora),
            2 * (4 * 128 + 4 * 96 + 4 * 160)
        );
    }
}
