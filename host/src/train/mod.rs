//! The trainer (DESIGN §3–4): the policy loss, AdamW whose moments drmas owns,
//! learning-rate schedules, the update a model worker runs on its samples, and the loop
//! that rolls out, normalizes advantages, updates, logs and checkpoints.

pub mod batch;
pub mod checkpoint;
pub mod data_order;
pub mod error;
pub mod loss;
pub mod metrics;
pub mod optimizer;
mod run_error;
pub mod schedule;
mod settings;
pub mod signal;
pub mod spike;
mod trainer;
mod update;

pub use batch::{
    AgentUpdate, LogpOld, TrainSample, UpdateBatch, UpdateProgress, UpdateReport, UpdateSettings,
};
pub use error::TrainError;
pub use loss::{Denominators, LossInputs, LossOutput, LossSettings, LossStats, policy_loss};
pub use optimizer::{AdamW, AdamWConfig};
pub use run_error::RunError;
pub use schedule::{LrSchedule, ScheduleKind};
pub use settings::update_settings;
pub use trainer::{METRICS_FILE, RunSummary, TrainOptions, Trainer, TrainerParts};
pub use update::{accumulate_gradients, run_update};
