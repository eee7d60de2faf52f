//! What can stop an episode. Model failures keep their source (a [`WorkerError`]), so a
//! caller can tell out-of-memory from a plugin failure.

use crate::{
    model::ModelError,
    plugin::{ComponentError, ResolveError},
    pool::WorkerError,
};
use thiserror::Error;

#[derive(Debug, Error)]
pub enum RolloutError {
    #[error(transparent)]
    Component(#[from] ComponentError),
    #[error(transparent)]
    Resolve(#[from] ResolveError),
    #[error(transparent)]
    Worker(#[from] WorkerError),
    /// Rendering a prompt or decoding a completion with the model's tokenizer.
    #[error("model `{model}`: {source}")]
    Codec {
        model: String,
        #[source]
        source: ModelError,
    },
    #[error("agent `{agent}` uses model `{model}`, which has no worker")]
    NoModel { agent: String, model: String },
    #[error(
        "agent `{agent}` handed off to `{to}`, which is not an agent of this experiment (agents: {known})"
    )]
    UnknownHandoff {
        agent: String,
        to: String,
        known: String,
    },
    #[error("an agent called tool `{tool}`, but the experiment has no [environment]")]
    NoEnvironment { tool: String },
    #[error(
        "environment `{component}`: tool call `{tool}` timed out after {seconds}s (raise \
         [environment] tool_timeout_s in the experiment if the tool is meant to take longer)"
    )]
    ToolTimeout {
        component: String,
        tool: String,
        seconds: f64,
    },
    #[error("environment `{component}`: tool call `{tool}` failed: {message}")]
    ToolTask {
        component: String,
        tool: String,
        message: String,
    },
    #[error("the episode task panicked: {0}")]
    Panicked(String),
    #[error("stopped before the episode finished")]
    Cancelled,
}
