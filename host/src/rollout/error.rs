//! What can stop an episode. Model failures keep their source (a [`WorkerError`]), so a
//! caller can tell out-of-memory from a plugin failure.

use super::failures::Blame;
use crate::{
    model::ModelError,
    plugin::{ComponentError, ComponentId, ResolveError},
    pool::WorkerError,
};
use thiserror::Error;

#[derive(Debug, Error)]
pub enum RolloutError {
    /// A component failed outside an episode (creating the team, listing tools).
    #[error(transparent)]
    Component(#[from] ComponentError),
    /// A component failed during an episode; `blame` names it for the failure counts.
    #[error("{source}")]
    Plugin {
        blame: Blame,
        #[source]
        source: ComponentError,
    },
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
        "agent `{agent}` ({component}) handed off to `{to}`, which is not an agent of this experiment (agents: {known})"
    )]
    UnknownHandoff {
        agent: String,
        /// The agent's component (`plugin/component`).
        component: String,
        to: String,
        known: String,
    },
    #[error(
        "agent `{agent}` ({component}) called tool `{tool}`, but the experiment has no \
         [environment] to offer tools"
    )]
    NoEnvironment {
        agent: String,
        /// The agent's component (`plugin/component`).
        component: String,
        tool: String,
    },
    #[error(
        "agent `{agent}` ({component}) called tool `{tool}`, which environment \
         `{environment}` does not offer (its tools: {offered})"
    )]
    UnknownTool {
        agent: String,
        /// The agent's component (`plugin/component`).
        component: String,
        tool: String,
        environment: String,
        offered: String,
    },
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

impl RolloutError {
    /// A component's failure in an episode, blamed on it.
    pub fn plugin(id: &ComponentId, source: ComponentError) -> Self {
        RolloutError::Plugin {
            blame: Blame {
                kind: id.kind.to_string(),
                name: id.name.clone(),
            },
            source,
        }
    }

    /// What the failure is blamed on; `None` for a cancelled episode (not a failure).
    pub fn blame(&self) -> Option<Blame> {
        let blame = |kind: &str, name: &str| {
            Some(Blame {
                kind: kind.into(),
                name: name.into(),
            })
        };
        match self {
            RolloutError::Plugin { blame, .. } => Some(blame.clone()),
            RolloutError::Component(e) => blame("component", component_of(e)),
            RolloutError::Resolve(_) => blame("host", "plugin registry"),
            RolloutError::Worker(e) => blame("model", model_of(e)),
            RolloutError::Codec { model, .. } | RolloutError::NoModel { model, .. } => {
                blame("model", model)
            }
            // The agent asked for something the experiment does not have.
            RolloutError::UnknownHandoff { component, .. }
            | RolloutError::NoEnvironment { component, .. }
            | RolloutError::UnknownTool { component, .. } => blame("agent", component),
            RolloutError::ToolTimeout { component, .. }
            | RolloutError::ToolTask { component, .. } => blame("environment", component),
            RolloutError::Panicked(_) => blame("host", "episode task"),
            RolloutError::Cancelled => None,
        }
    }
}

/// The component text a [`ComponentError`] names.
fn component_of(e: &ComponentError) -> &str {
    match e {
        ComponentError::Failed { component, .. }
        | ComponentError::NonFinite { component, .. }
        | ComponentError::NonFiniteMetric { component, .. }
        | ComponentError::NonFiniteToolReward { component, .. }
        | ComponentError::Length { component, .. }
        | ComponentError::TurnScores { component, .. } => component,
    }
}

/// The model a [`WorkerError`] is about.
fn model_of(e: &WorkerError) -> &str {
    match e {
        WorkerError::Backend { model, .. }
        | WorkerError::Batch { model, .. }
        | WorkerError::Gone { model }
        | WorkerError::Spawn { model, .. } => model,
    }
}
