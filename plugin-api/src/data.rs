//! Plain `#[repr(C)]` data that crosses the plugin boundary. No tensors, no async,
//! no serde types: strings, vectors, small structs and tagged enums only.

use abi_stable::{
    StableAbi,
    std_types::{ROption, RString, RVec},
};
use std::fmt;

/// The four kinds of component a plugin can provide.
#[repr(u8)]
#[derive(StableAbi, Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ComponentKind {
    /// A role in the team: renders its prompt and parses its completion into an [`Action`].
    Agent,
    /// Prepares tasks and executes tool calls.
    Environment,
    /// Scores a finished episode.
    Reward,
    /// Maps the table of samples to one advantage per sample.
    Normalizer,
}

impl ComponentKind {
    pub const ALL: [ComponentKind; 4] = [
        ComponentKind::Agent,
        ComponentKind::Environment,
        ComponentKind::Reward,
        ComponentKind::Normalizer,
    ];

    /// The lower-case name used in experiment files and messages.
    pub fn as_str(self) -> &'static str {
        match self {
            ComponentKind::Agent => "agent",
            ComponentKind::Environment => "environment",
            ComponentKind::Reward => "reward",
            ComponentKind::Normalizer => "normalizer",
        }
    }
}

impl fmt::Display for ComponentKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One component a plugin offers.
#[repr(C)]
#[derive(StableAbi, Debug, Clone, PartialEq, Eq)]
pub struct ComponentInfo {
    pub kind: ComponentKind,
    /// The component's name inside its plugin (`drmas` in `norms/drmas`).
    pub name: RString,
    /// One line for `drmas plugins list`.
    pub summary: RString,
}

/// What a plugin says about itself when loaded.
#[repr(C)]
#[derive(StableAbi, Debug, Clone, PartialEq, Eq)]
pub struct Manifest {
    /// The plugin's name: the namespace of its components (`norms` in `norms/drmas`).
    pub plugin: RString,
    /// The plugin's own semver, checked against an experiment's `[plugins] require`.
    pub version: RString,
    /// The API version the plugin was compiled against.
    pub api_version: RString,
    pub components: RVec<ComponentInfo>,
}

/// One row of the sample table a [`crate::Normalizer`] sees: one agent call that
/// produced tokens.
#[repr(C)]
#[derive(StableAbi, Debug, Clone, PartialEq)]
pub struct SampleRow {
    /// The task (prompt group) the sample belongs to.
    pub uid: RString,
    /// Which of the G trajectories of that task.
    pub traj: u32,
    /// The agent (role) that acted.
    pub agent: RString,
    /// The turn of the episode in which it acted (0-based).
    pub turn: u32,
    /// `team_reward - invalid_penalty * (1 - valid)`.
    pub score: f32,
}

impl SampleRow {
    pub fn new(uid: &str, traj: u32, agent: &str, turn: u32, score: f32) -> Self {
        Self {
            uid: uid.into(),
            traj,
            agent: agent.into(),
            turn,
            score,
        }
    }
}

/// A task from a data set.
#[repr(C)]
#[derive(StableAbi, Debug, Clone, PartialEq, Eq, Default)]
pub struct Task {
    pub id: RString,
    /// The data source (`gsm8k`, `math500`, `arith-l1`), used to split metrics.
    pub source: RString,
    pub question: RString,
    /// The gold answer, as text.
    pub answer: RString,
    /// Anything else from the data row, as a JSON object (`{}` when empty).
    pub meta_json: RString,
}

/// One chat message an agent renders for the model's chat template.
#[repr(C)]
#[derive(StableAbi, Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// `system`, `user` or `assistant`.
    pub role: RString,
    pub content: RString,
}

impl Message {
    pub fn new(role: &str, content: impl Into<String>) -> Self {
        Self {
            role: role.into(),
            content: RString::from(content.into()),
        }
    }
    pub fn system(content: impl Into<String>) -> Self {
        Self::new("system", content)
    }
    pub fn user(content: impl Into<String>) -> Self {
        Self::new("user", content)
    }
    pub fn assistant(content: impl Into<String>) -> Self {
        Self::new("assistant", content)
    }
}

/// What an agent's completion means for the episode.
#[repr(u8)]
#[derive(StableAbi, Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Pass control to another agent (by its name in the experiment).
    Handoff { to: RString },
    /// Call a tool of the environment; the result is appended to the transcript.
    Tool { name: RString, input: RString },
    /// End the episode with this answer.
    Finish { answer: RString },
    /// Nothing sensible can follow: the episode ends here without an answer.
    Invalid { reason: RString },
}

/// An agent's reading of its completion: what happens next, and whether the completion
/// followed the agent's format. An invalid sample is penalised (`invalid_penalty`) but
/// the episode can go on with `action`, as when an unparseable verdict counts as
/// approval.
#[repr(C)]
#[derive(StableAbi, Debug, Clone, PartialEq, Eq)]
pub struct Parsed {
    pub action: Action,
    pub valid: bool,
    /// Why the completion is invalid (empty when valid).
    pub note: RString,
}

impl Parsed {
    /// A well-formed completion.
    pub fn valid(action: Action) -> Self {
        Self {
            action,
            valid: true,
            note: RString::new(),
        }
    }
    /// A malformed completion that still leads to `action`.
    pub fn invalid(action: Action, note: impl Into<String>) -> Self {
        Self {
            action,
            valid: false,
            note: RString::from(note.into()),
        }
    }
}

/// One turn of an episode as the team sees it.
#[repr(C)]
#[derive(StableAbi, Debug, Clone, PartialEq, Eq)]
pub struct TurnRecord {
    pub turn: u32,
    pub agent: RString,
    /// The decoded completion the agent produced.
    pub completion: RString,
    pub action: Action,
    /// Whether the completion followed the agent's format.
    pub valid: bool,
    /// The environment's answer when the action was a tool call.
    pub tool_output: ROption<RString>,
}

/// What an agent sees when it is asked to act.
#[repr(C)]
#[derive(StableAbi, Debug, Clone, PartialEq, Eq)]
pub struct EpisodeView {
    pub task: Task,
    /// The name of the agent being asked to act.
    pub agent: RString,
    /// The turn about to be taken (0-based).
    pub turn: u32,
    pub transcript: RVec<TurnRecord>,
}

/// A tool call for the environment.
#[repr(C)]
#[derive(StableAbi, Debug, Clone, PartialEq, Eq)]
pub struct ToolCall {
    pub name: RString,
    pub input: RString,
}

/// The environment's answer to a tool call.
#[repr(C)]
#[derive(StableAbi, Debug, Clone, PartialEq, Eq)]
pub struct ToolResult {
    /// Text appended to the transcript (for search: the `<information>` block).
    pub output: RString,
    /// The environment ends the episode after this call.
    pub done: bool,
}

/// A finished episode, as rewards score it.
#[repr(C)]
#[derive(StableAbi, Debug, Clone, PartialEq, Eq)]
pub struct EpisodeRecord {
    pub task: Task,
    /// The answer of the last `Finish` action, if any agent finished.
    pub final_answer: ROption<RString>,
    pub transcript: RVec<TurnRecord>,
    /// The episode hit the turn limit instead of finishing.
    pub truncated: bool,
}
