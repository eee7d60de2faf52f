//! Errors of the trainer.

use thiserror::Error;

#[derive(Debug, Error)]
pub enum TrainError {
    #[error("{what}: expected shape {expected}, got {got:?}")]
    Shape {
        what: String,
        expected: String,
        got: Vec<i64>,
    },
    #[error("{what}: expected a floating-point tensor, got {got:?}")]
    Kind { what: String, got: tch::Kind },
    #[error("{what} is on {got:?}, expected {expected:?}")]
    Device {
        what: String,
        expected: tch::Device,
        got: tch::Device,
    },
    #[error("{what} is required when {when}")]
    Missing {
        what: &'static str,
        when: &'static str,
    },
    #[error("{name} = {value}: {why}")]
    Setting {
        name: &'static str,
        value: f64,
        why: &'static str,
    },
    #[error("optimizer state `{name}`: {message}")]
    State { name: String, message: String },
    #[error("sample {index} (agent `{agent}`): {problem}")]
    Sample {
        index: usize,
        agent: String,
        problem: String,
    },
    /// A collective with the other ranks failed (data parallelism): c10d's error, whose
    /// text names the peer that did not answer.
    #[error("data parallelism: {0}")]
    Collective(#[from] drmas_dist::DistError),
    /// The ranks' weights differ (checksums from `low` to `high`).
    #[error(
        "data parallelism: the ranks' weights differ {when} (checksums from {low} to {high}): every rank must start from the same checkpoint"
    )]
    WeightsDiffer { when: String, low: f64, high: f64 },
    /// Parameters that do not fit the sharded optimizer's flat layout.
    #[error("sharded optimizer: {0}")]
    Flat(#[from] super::flat::FlatError),
    /// A sharded optimizer used with another group than the one it was sharded for.
    #[error(
        "sharded optimizer: its state is rank {rank}'s of {world_size}, but the update's group is rank {group_rank} of {group_size}"
    )]
    ShardGroup {
        rank: usize,
        world_size: usize,
        group_rank: usize,
        group_size: usize,
    },
    #[error(transparent)]
    Model(#[from] crate::model::ModelError),
    #[error("{}", crate::model::torch_text(.0))]
    Torch(#[from] tch::TchError),
}
