//! Turning plugins and models into episodes (DESIGN §3): a per-model batcher thread
//! that owns its model, a generic orchestra driven by the workflow table and the
//! agents' actions, and the samples the trainer consumes.

mod backend;
mod batcher;
mod error;
mod orchestra;
mod sample;
mod team;

pub use backend::{Backend, BackendRequest, Codec, ModelBackend};
pub use batcher::{BatcherConfig, BatcherHandle, BatcherStats, spawn_batcher};
pub use error::RolloutError;
pub use orchestra::{EpisodeOutcome, EpisodeSpec, call_seed, run_episode, run_episodes};
pub use sample::Sample;
pub use team::{AgentSlot, ModelSlot, Team, TeamOptions};
