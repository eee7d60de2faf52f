//! The training loop (see ARCHITECTURE.md, "train"): roll out a step's episodes,
//! normalize advantages per agent, send each model its update, watch for non-finite
//! steps and gradient spikes, evaluate, log metrics and checkpoint. What a worker runs
//! for an update lives in [`crate::update`].

pub mod balance;
pub mod checkpoint;
pub mod data_order;
mod dist;
pub mod dynamic;
pub mod fingerprint;
mod manifest;
pub mod mechanism;
pub mod metrics;
mod run_error;
pub mod run_record;
pub mod signal;
pub mod spike;
mod trainer;
mod warm_start;

pub use dist::check_ranks_agree;
pub use run_error::RunError;
pub use trainer::{
    CHANGES_FILE, Components, EXPERIMENT_FILE, METRICS_FILE, RunSummary, TrackingSetup,
    TrainOptions, Trainer,
};
