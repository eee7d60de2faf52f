//! What can stop an episode.

use crate::plugin::ComponentError;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum RolloutError {
    #[error(transparent)]
    Component(#[from] ComponentError),
    #[error("model `{model}`: {message}")]
    Model { model: String, message: String },
    #[error(
        "agent `{agent}` handed off to `{to}`, which is not an agent of this experiment (agents: {known})"
    )]
    UnknownHandoff {
        agent: String,
        to: String,
        known: String,
    },
    #[error("environment `{component}`: tool call `{tool}` timed out after {seconds}s")]
    ToolTimeout {
        component: String,
        tool: String,
        seconds: u64,
    },
    #[error("the batcher of model `{model}` has stopped")]
    BatcherGone { model: String },
    #[error("{0}")]
    Other(String),
}
