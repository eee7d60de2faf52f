//! Training samples: every agent call that produced tokens (DESIGN §3).

use serde::Serialize;

#[derive(Debug, Clone, PartialEq, Serialize)]
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
}
