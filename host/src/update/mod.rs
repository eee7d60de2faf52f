//! The update a model worker runs on its samples (see ARCHITECTURE.md, "update"): the
//! policy loss, AdamW whose moments drmas owns, learning-rate schedules, and the
//! micro-batched forward/backward over one step's samples. It depends on `model` alone;
//! the pool runs it, the trainer only sends it batches.

pub mod batch;
pub mod error;
pub mod flat;
mod full;
pub mod gathered;
mod held;
pub mod loss;
pub mod optimizer;
mod run;
pub mod schedule;
pub mod sharded;
mod stepper;
pub mod sync;

pub use batch::{
    AgentUpdate, BatchShare, GradNorm, LogpOld, ProgressCounts, ShadowNorms, TrainSample,
    UpdateBatch, UpdatePhases, UpdateProgress, UpdateReport, UpdateSettings,
};
pub use error::TrainError;
pub use flat::{FlatError, FlatLayout, FlatParam, FlatUnit, ShardPiece, UnitKind};
pub use gathered::{ShardedWeights, WeightBytes};
pub use held::{Optimizer, Shard};
pub use loss::{
    Denominators, KlEstimator, LossAgg, LossInputs, LossOutput, LossSettings, LossStats,
    policy_loss,
};
pub use optimizer::{AdamW, AdamWConfig};
pub use run::{accumulate_gradients, run_update, run_update_full, run_update_sharded};
pub use schedule::{LrSchedule, ScheduleKind};
pub use sharded::ShardedAdamW;
pub use sync::{Collective, Pending, Solo};
