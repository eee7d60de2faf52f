//! Training samples: every agent call that produced tokens (docs/algorithms.md), with what the
//! update needs: the behaviour policy's log-probs, temperature, policy version, how the
//! completion ended, and (once the normalizer ran) its advantage.

use crate::model::FinishReason;
use serde::{Deserialize, Serialize};

/// Why a sample's completion ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Finish {
    StopToken,
    StopString,
    /// `max_new_tokens` was reached.
    Length,
    /// The episode's last sample, when the turn or loop limit ended the episode.
    TurnLimit,
}

impl Finish {
    pub const ALL: [Finish; 4] = [
        Finish::StopToken,
        Finish::StopString,
        Finish::Length,
        Finish::TurnLimit,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Finish::StopToken => "stop_token",
            Finish::StopString => "stop_string",
            Finish::Length => "length",
            Finish::TurnLimit => "turn_limit",
        }
    }
}

impl From<FinishReason> for Finish {
    fn from(f: FinishReason) -> Self {
        match f {
            FinishReason::StopToken => Finish::StopToken,
            FinishReason::StopString => Finish::StopString,
            FinishReason::Length => Finish::Length,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// The task group.
    pub uid: String,
    /// Which of the group's trajectories.
    pub traj: u32,
    pub agent: String,
    pub model: String,
    pub turn: u32,
    pub prompt_ids: Vec<i64>,
    pub response_ids: Vec<i64>,
    /// log p of each response token when it was sampled (logits / temperature).
    pub logprobs: Vec<f32>,
    /// The temperature the tokens were sampled at (the loss divides logits by it too).
    pub temperature: f64,
    pub valid: bool,
    /// `team_reward − invalid_penalty · (1 − valid)`.
    pub score: f32,
    pub finish: Finish,
    /// Updates the sampling weights had received (the trainer step it was sampled at).
    pub policy_version: u64,
    /// Set by the normalizer; 0 until then.
    pub advantage: f32,
}
