//! Turning plugins and models into episodes (ARCHITECTURE.md): a generic orchestra driven by
//! the agents' actions, talking to model workers through their handles, and the
//! samples the trainer consumes.

mod codec;
mod episode_set;
mod error;
mod failures;
mod footprint;
mod orchestra;
mod runtime;
mod sample;
mod team;

pub use codec::Codec;
pub use episode_set::{
    EpisodeFailure, EpisodeSet, EpisodeSetError, EpisodeSetPlan, FailedEpisode, Progress, rank_of,
    run_episode_set,
};
pub use error::RolloutError;
pub use failures::{
    Blame, ComponentFailures, FailureTally, failure_limit_message, over_failure_limit,
};
pub use footprint::{EPISODE_FLOOR_BYTES, episodes_floor};
pub use orchestra::{
    EpisodeOutcome, EpisodeSpec, call_seed, run_episode, run_episodes, run_episodes_until,
};
pub use runtime::{EPISODE_THREADS, EpisodeRuntime};
pub use sample::{Finish, Sample};
pub use team::{AgentSlot, ModelSlot, RewardSlot, Team, TeamOptions, reward_names};
