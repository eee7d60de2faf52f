//! Environments served over the network. `openenv` is a client of OpenEnv environment
//! servers (meta-pytorch/OpenEnv): one WebSocket session per episode, JSON messages.
//! Nothing in the experiment names it yet; the component that puts it in a team is
//! the next step (ARCHITECTURE.md, `remote`).

pub mod openenv;

pub use openenv::{OpenEnvSession, RemoteError, Reply};
