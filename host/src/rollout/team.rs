//! A team: the experiment's agents with their models, the environment, the rewards,
//! and the workflow settings, ready to run episodes.

use super::{codec::Codec, error::RolloutError};
use crate::{
    config::{DEFAULT_TOOL_TIMEOUT_S, Experiment, Sampling, config_text},
    plugin::{AgentHandle, EnvironmentHandle, Registry, RewardHandle},
    pool::ModelHandle,
};
use drmas_plugin_api::ToolSpec;
use std::{collections::HashMap, sync::Arc, time::Duration};

pub struct AgentSlot {
    pub name: String,
    pub handle: AgentHandle,
    /// A key of [`Team::models`].
    pub model: String,
    pub sampling: Sampling,
}

pub struct ModelSlot {
    pub id: String,
    pub codec: Arc<dyn Codec>,
    pub handle: ModelHandle,
}

#[derive(Debug, Clone)]
pub struct TeamOptions {
    pub entry: String,
    pub max_turns: u32,
    /// The agent that takes the last turn (`max_turns − 1`) whatever the previous action
    /// named (`[workflow] final_agent`).
    pub final_agent: Option<String>,
    /// How often control may come back to the entry agent.
    pub max_loops: Option<u32>,
    pub invalid_penalty: f64,
    /// Mixed into every sampling seed.
    pub seed: u64,
    /// For environments that declare themselves slow (`[environment] tool_timeout_s`).
    pub tool_timeout: Duration,
    /// The fraction of a run's episodes (a training step's, an evaluation's) that may
    /// fail before the run stops (`[workflow] max_failed_episodes`).
    pub max_failed_episodes: f64,
    /// Keep each turn's prompt text in the outcome (for sample dumps).
    pub keep_prompts: bool,
}

/// One `[[rewards]]` entry: the reward, its weight, and the agents whose samples it
/// scores (`None`: the whole team; it is then part of the team reward).
pub struct RewardSlot {
    pub handle: RewardHandle,
    pub weight: f64,
    pub agents: Option<Vec<String>>,
    /// Part of the team reward (success, evaluation): `[[rewards]] team`, by default
    /// when `agents` is absent.
    pub team: bool,
}

impl RewardSlot {
    /// A reward of the whole team.
    pub fn team(handle: RewardHandle, weight: f64) -> Self {
        Self {
            handle,
            weight,
            agents: None,
            team: true,
        }
    }

    /// Whether this reward scores the samples of `agent`.
    pub fn applies_to(&self, agent: &str) -> bool {
        self.agents
            .as_ref()
            .is_none_or(|a| a.iter().any(|n| n == agent))
    }
}

pub struct Team {
    pub agents: Vec<AgentSlot>,
    pub models: HashMap<String, ModelSlot>,
    pub environment: Option<EnvironmentHandle>,
    /// The tools the environment offers, shown to agents in every episode view.
    pub tools: Vec<ToolSpec>,
    /// Each reward with its weight and scope, in the experiment's order.
    pub rewards: Vec<RewardSlot>,
    pub options: TeamOptions,
}

impl Team {
    pub fn agent(&self, name: &str) -> Option<&AgentSlot> {
        self.agents.iter().find(|a| a.name == name)
    }

    /// The rewards' names for reports, in the experiment's order: the component
    /// (`search/em`), with `#2`, `#3`, ... after the first when one is named twice.
    pub fn reward_names(&self) -> Vec<String> {
        reward_names(self.rewards.iter().map(|r| r.handle.id.name.as_str()))
    }

    /// Builds the experiment's team around model workers that already run (see
    /// [`crate::launch`]): creates every agent, the environment and the rewards.
    pub fn from_experiment(
        exp: &Experiment,
        registry: &Registry,
        models: HashMap<String, ModelSlot>,
    ) -> Result<Self, RolloutError> {
        let f = &exp.file;
        let policy = exp.resolve_policy();
        let agents = f
            .agents
            .iter()
            .map(|a| {
                Ok(AgentSlot {
                    name: a.name.clone(),
                    handle: registry.create_agent(
                        &a.component,
                        &config_text(&a.config),
                        &policy,
                    )?,
                    model: a.model.clone(),
                    sampling: a.sampling.clone(),
                })
            })
            .collect::<Result<Vec<_>, RolloutError>>()?;
        let environment = f
            .environment
            .as_ref()
            .map(|e| registry.create_environment(&e.component, &config_text(&e.config), &policy))
            .transpose()?;
        let tools = match &environment {
            Some(env) => env.tools()?,
            None => Vec::new(),
        };
        let rewards = f
            .rewards
            .iter()
            .map(|r| {
                Ok(RewardSlot {
                    handle: registry.create_reward(
                        &r.component,
                        &config_text(&r.config),
                        &policy,
                    )?,
                    weight: r.weight,
                    agents: r.agents.clone(),
                    team: r.in_team(),
                })
            })
            .collect::<Result<Vec<_>, RolloutError>>()?;
        Ok(Self {
            agents,
            models,
            environment,
            tools,
            rewards,
            options: TeamOptions {
                entry: f.workflow.entry.clone(),
                max_turns: f.workflow.max_turns.get(),
                final_agent: f.workflow.final_agent.clone(),
                max_loops: f.workflow.max_loops.map(std::num::NonZeroU32::get),
                invalid_penalty: f.trainer.invalid_penalty,
                seed: f.experiment.seed,
                tool_timeout: Duration::from_secs_f64(
                    f.environment
                        .as_ref()
                        .map_or(DEFAULT_TOOL_TIMEOUT_S, |e| e.tool_timeout_s),
                ),
                max_failed_episodes: f.workflow.max_failed_episodes,
                keep_prompts: false,
            },
        })
    }
}

/// [`Team::reward_names`] of these components.
pub fn reward_names<'a>(components: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let mut seen: HashMap<&str, usize> = HashMap::new();
    components
        .into_iter()
        .map(|c| {
            let n = seen.entry(c).or_default();
            *n += 1;
            if *n == 1 {
                c.to_string()
            } else {
                format!("{c}#{n}")
            }
        })
        .collect()
}
