//! The remote plugin (docs/remote-envs.md): environments served over the network, in
//! any language, and the pieces a team needs to play them.
//!
//! | component           | kind        | what it does                                                        |
//! |---------------------|-------------|---------------------------------------------------------------------|
//! | `remote/openenv`    | environment | one OpenEnv WebSocket session per episode: reset, then a step per tool call |
//! | `remote/agent`      | agent       | reads the task and the observations; `<action>…</action>` is a step, or hands off |
//! | `remote/env-reward` | reward      | the rewards the environment returned to the episode's tool calls     |

pub mod agent;
pub mod client;
pub mod env;
pub mod reward;
pub mod schema;
pub mod server;

pub use agent::{ActorConfig, RemoteAgent};
pub use client::{OpenEnvSession, RemoteError, Reply};
pub use env::{OpenEnv, OpenEnvConfig};
pub use reward::{EnvReward, EnvRewardConfig};

use drmas_plugin_api::PluginSpec;

/// The `remote` plugin.
pub fn plugin() -> PluginSpec {
    PluginSpec::new("remote", env!("CARGO_PKG_VERSION"))
        .environment_with(
            "openenv",
            "an OpenEnv server (by url, or a command drmas starts): one WebSocket session per episode",
            OpenEnv::new,
        )
        .agent_with(
            "agent",
            "acts in a remote environment with <action>…</action>, or writes a plan and hands off",
            RemoteAgent::new,
        )
        .reward_with(
            "env-reward",
            "the rewards the environment returned to the episode's tool calls (sum, last or max)",
            EnvReward::new,
        )
}

// Linked into the host, it registers as a built-in; built alone, it is a `.so`.
#[cfg(feature = "builtin")]
drmas_plugin_api::register_builtin!(plugin);
#[cfg(not(feature = "builtin"))]
drmas_plugin_api::export_plugin!(plugin);
