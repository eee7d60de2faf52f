//! The component traits plugin authors implement. They are ordinary Rust traits;
//! the host uses the very same traits for built-in and dynamically loaded components.

use crate::{
    data::{EpisodeRecord, EpisodeView, Message, Parsed, SampleRow, Task, ToolCall, ToolResult},
    error::PluginResult,
};

/// A role in the team (solver, verifier, searcher, ...).
pub trait Agent: Send + Sync {
    /// The chat messages for this agent's turn. The host applies the model's chat
    /// template to them.
    fn render(&self, view: &EpisodeView) -> PluginResult<Vec<Message>>;
    /// Interprets the agent's completion. Malformed output is an invalid [`Parsed`], not
    /// an error: errors are for broken plugins, invalid samples for bad completions.
    fn parse(&self, view: &EpisodeView, completion: &str) -> PluginResult<Parsed>;
    /// The other agents of the experiment this agent's config names (by their
    /// `[[agents]] name`): the agents it hands off to or whose turns it reads. The host
    /// checks before any episode that each exists, so a misspelt name is a config error
    /// at `drmas check`, not a failure in every episode.
    fn linked_agents(&self) -> Vec<String> {
        Vec::new()
    }
}

/// Prepares tasks and executes tool calls.
pub trait Environment: Send + Sync {
    /// Called once per episode before the first turn; may rewrite the task.
    fn prepare(&self, task: &Task) -> PluginResult<Task>;
    /// Executes a tool call made by an agent.
    fn call_tool(&self, task: &Task, call: &ToolCall) -> PluginResult<ToolResult>;
    /// Whether tool calls are slow enough (I/O, search) that the host should run them
    /// off the rollout threads with a timeout.
    fn is_slow(&self) -> bool {
        false
    }
}

/// Scores a finished episode. The host refuses NaN and infinite scores.
pub trait Reward: Send + Sync {
    fn score(&self, episode: &EpisodeRecord) -> PluginResult<f32>;
}

/// Maps the flat table of samples to one advantage per sample, in the same order.
/// The host refuses a result of the wrong length or with NaN or infinite values.
pub trait Normalizer: Send + Sync {
    fn advantages(&self, samples: &[SampleRow]) -> PluginResult<Vec<f32>>;
}
