//! The optimizer a model's worker holds (ARCHITECTURE.md, "update"): AdamW whole on
//! every rank, or sharded across the ranks of a data-parallel job
//! (`[[models]] shard = "optimizer"`; docs/distributed.md, "Sharding").

use super::{AdamW, ShardedAdamW};
use serde::{Deserialize, Serialize};
use tch::{Device, Tensor};

/// `[[models]] shard`: what of a model's training state each rank of a data-parallel
/// job keeps only its share of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Shard {
    /// Every rank holds everything (the data-parallel job as it always was).
    #[default]
    None,
    /// ZeRO-2: the AdamW moments, the f32 master weights and the reduced gradient.
    Optimizer,
    /// ZeRO-3 / FSDP: the weights too, during the update (`update::full`).
    Full,
}

impl Shard {
    pub fn is_none(&self) -> bool {
        *self == Shard::None
    }

    /// The name the experiment file uses.
    pub fn name(self) -> &'static str {
        match self {
            Shard::None => "none",
            Shard::Optimizer => "optimizer",
            Shard::Full => "full",
        }
    }
}

#[derive(Debug)]
pub enum Optimizer {
    Whole(AdamW),
    Sharded(ShardedAdamW),
}

impl Optimizer {
    /// The parameters it steps, name-sorted.
    pub fn params(&self) -> &[(String, Tensor)] {
        match self {
            Optimizer::Whole(o) => o.params(),
            Optimizer::Sharded(o) => o.params(),
        }
    }

    /// The state this rank holds, sharing storage with it, and the step count: the whole
    /// AdamW's ([`AdamW::state`]), or this rank's shards ([`ShardedAdamW::shard_state`]).
    /// A checkpoint of a sharded state gathers it first ([`ShardedAdamW::write_state`]).
    pub fn state(&self) -> (Vec<(String, Tensor)>, i64) {
        match self {
            Optimizer::Whole(o) => o.state(),
            Optimizer::Sharded(o) => (o.shard_state(), o.steps()),
        }
    }

    pub fn steps(&self) -> i64 {
        match self {
            Optimizer::Whole(o) => o.steps(),
            Optimizer::Sharded(o) => o.steps(),
        }
    }

    /// Bytes of state this rank holds (moments and master weights).
    pub fn state_bytes(&self) -> u64 {
        match self {
            Optimizer::Whole(o) => o.state_bytes(),
            Optimizer::Sharded(o) => o.state_bytes(),
        }
    }

    /// Replaces every state tensor by `f` of it (to host memory and back).
    pub fn map_state(&mut self, f: impl FnMut(&Tensor) -> Tensor) {
        match self {
            Optimizer::Whole(o) => o.map_state(f),
            Optimizer::Sharded(o) => o.map_state(f),
        }
    }

    pub fn to_device(&mut self, device: Device) {
        match self {
            Optimizer::Whole(o) => o.to_device(device),
            Optimizer::Sharded(o) => o.to_device(device),
        }
    }
}
