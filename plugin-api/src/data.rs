//! The data that crosses the plugin boundary, as ordinary Rust types.
//!
//! Between the host and a dynamically loaded plugin these values travel as JSON (see
//! [`crate::ffi`]), which is what lets the API grow without breaking built plugins:
//!
//! - every struct reads a missing field as its default (`#[serde(default)]`) and ignores
//!   fields it does not know, so a field added in API 1.y is invisible to a plugin built
//!   against 1.x and absent (default) when an older host sends the value;
//! - every enum that may gain variants is `#[non_exhaustive]` (authors match it with a
//!   `_` arm) and reads a variant it does not know as its `Unknown` variant.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::fmt;

/// The four kinds of component a plugin can provide.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[serde(rename_all = "lowercase")]
pub enum ComponentKind {
    /// A role in the team: renders its prompt and parses its completion into an [`Action`].
    Agent,
    /// Prepares tasks, keeps per-episode state and executes tool calls.
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

    /// The kind named `name` (as in [`ComponentKind::as_str`]).
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == name)
    }
}

impl fmt::Display for ComponentKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One key of a component's configuration table, as `drmas plugins inspect` shows it
/// and `drmas check` checks it (a key in the experiment that no [`ConfigKey`] names is
/// refused, when the component describes its keys at all).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default)]
#[serde(default)]
pub struct ConfigKey {
    pub name: String,
    /// The TOML type, as a reader would write it: `string`, `integer`, `float`,
    /// `boolean`, `array of strings`, `table`, ...
    pub ty: String,
    /// The value used when the key is absent, as TOML text; `None` when the key is
    /// required.
    pub default: Option<String>,
    /// One line: what the key does.
    pub doc: String,
}

impl ConfigKey {
    /// A required key.
    pub fn required(name: &str, ty: &str, doc: &str) -> Self {
        Self {
            name: name.to_string(),
            ty: ty.to_string(),
            default: None,
            doc: doc.to_string(),
        }
    }
    /// An optional key and the TOML text of its default (`"512"`, `"\"none\""`).
    pub fn optional(name: &str, ty: &str, default: &str, doc: &str) -> Self {
        Self {
            default: Some(default.to_string()),
            ..Self::required(name, ty, doc)
        }
    }
}

/// One component a plugin offers.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct ComponentInfo {
    pub kind: ComponentKind,
    /// The component's name inside its plugin (`drmas` in `norms/drmas`).
    pub name: String,
    /// One line for `drmas plugins list`.
    #[serde(default)]
    pub summary: String,
    /// The keys of its `config` table: `None` when the component does not describe
    /// them (its own parser decides), `Some(vec![])` when it takes none.
    #[serde(default)]
    pub config: Option<Vec<ConfigKey>>,
}

/// What a plugin says about itself when loaded.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Manifest {
    /// The plugin's name: the namespace of its components (`norms` in `norms/drmas`).
    pub plugin: String,
    /// The plugin's own semver, checked against an experiment's `[plugins] require`.
    pub version: String,
    /// The version of `drmas-plugin-api` the plugin was compiled against.
    pub api_version: String,
    #[serde(default)]
    pub components: Vec<ComponentInfo>,
}

/// One row of the sample table a [`crate::Normalizer`] sees: one agent call that
/// produced tokens.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
#[serde(default)]
pub struct SampleRow {
    /// The task (prompt group) the sample belongs to.
    pub uid: String,
    /// Which of the G trajectories of that task.
    pub traj: u32,
    /// The agent (role) that acted.
    pub agent: String,
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

/// A task from a data set (see docs/plugins.md, "From a data row to a Task").
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default)]
#[serde(default)]
pub struct Task {
    /// The row's id, unique within its source.
    pub id: String,
    /// The data source (`gsm8k`, `math500`, `arith-l1`), used to split metrics.
    pub source: String,
    pub question: String,
    /// The gold answer, as text (a numeric answer in the file becomes its decimal text).
    pub answer: String,
    /// Every other column of the data row (and the fields of a `meta` object column).
    pub meta: Map<String, Value>,
}

/// One chat message an agent renders for the model's chat template.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default)]
#[serde(default)]
pub struct Message {
    /// `system`, `user` or `assistant`.
    pub role: String,
    pub content: String,
}

impl Message {
    pub fn new(role: &str, content: impl Into<String>) -> Self {
        Self {
            role: role.to_string(),
            content: content.into(),
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

/// What an agent's completion means for the episode. Match it with a `_` arm: later
/// 1.x versions may add variants, which older plugins then see as [`Action::Unknown`].
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Action {
    /// Pass control to another agent (by its name in the experiment).
    Handoff { to: String },
    /// Call a tool of the environment; the result is appended to the transcript and
    /// control returns to the workflow's entry agent.
    Tool { name: String, input: String },
    /// End the episode with this answer.
    Finish { answer: String },
    /// Nothing sensible can follow: the episode ends here without an answer.
    Invalid { reason: String },
    /// An action of a newer API version than the one this code was built against.
    #[default]
    #[serde(other)]
    Unknown,
}

impl Action {
    pub fn handoff(to: impl Into<String>) -> Self {
        Action::Handoff { to: to.into() }
    }
    pub fn tool(name: impl Into<String>, input: impl Into<String>) -> Self {
        Action::Tool {
            name: name.into(),
            input: input.into(),
        }
    }
    pub fn finish(answer: impl Into<String>) -> Self {
        Action::Finish {
            answer: answer.into(),
        }
    }
    pub fn invalid(reason: impl Into<String>) -> Self {
        Action::Invalid {
            reason: reason.into(),
        }
    }
}

/// An agent's reading of its completion: what happens next, and whether the completion
/// followed the agent's format. An invalid sample is penalised (`invalid_penalty`) but
/// the episode can go on with `action`, as when an unparseable verdict counts as
/// approval.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default)]
#[serde(default)]
pub struct Parsed {
    pub action: Action,
    pub valid: bool,
    /// Why the completion is invalid (empty when valid).
    pub note: String,
}

impl Parsed {
    /// A well-formed completion.
    pub fn valid(action: Action) -> Self {
        Self {
            action,
            valid: true,
            note: String::new(),
        }
    }
    /// A malformed completion that still leads to `action`.
    pub fn invalid(action: Action, note: impl Into<String>) -> Self {
        Self {
            action,
            valid: false,
            note: note.into(),
        }
    }
}

/// One turn of an episode as the team sees it.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default)]
#[serde(default)]
pub struct TurnRecord {
    pub turn: u32,
    pub agent: String,
    /// The decoded completion the agent produced (stop strings removed, see
    /// docs/plugins.md).
    pub completion: String,
    pub action: Action,
    /// Whether the completion followed the agent's format.
    pub valid: bool,
    /// The agent's note on an invalid completion (empty when valid).
    pub note: String,
    /// The environment's answer when the action was a tool call.
    pub tool_output: Option<String>,
    /// The reward the environment returned with that answer, if any
    /// ([`ToolResult::reward`]; since 1.4).
    pub tool_reward: Option<RewardValue>,
}

/// A tool an environment offers (see [`crate::Environment::tools`]).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default)]
#[serde(default)]
pub struct ToolSpec {
    /// What an agent's [`Action::Tool`] names.
    pub name: String,
    /// One line, for prompts and `drmas plugins inspect`.
    pub description: String,
    /// What the input should look like (`an arithmetic expression, e.g. (3 + 4) * 5`).
    pub input_format: Option<String>,
}

impl ToolSpec {
    pub fn new(name: &str, description: &str) -> Self {
        Self {
            name: name.to_string(),
            description: description.to_string(),
            input_format: None,
        }
    }
    pub fn with_input_format(mut self, format: &str) -> Self {
        self.input_format = Some(format.to_string());
        self
    }
}

/// Named numbers an environment reports about an episode
/// ([`crate::Environment::episode_metrics`]).
pub type Metrics = std::collections::BTreeMap<String, f64>;

/// Identifies one episode of a run. Unique within the host process: the G concurrent
/// episodes of one task have different ids.
pub type EpisodeId = u64;

/// What an agent sees when it is asked to act.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default)]
#[serde(default)]
pub struct EpisodeView {
    pub episode: EpisodeId,
    pub task: Task,
    /// The name of the agent being asked to act.
    pub agent: String,
    /// The turn about to be taken (0-based).
    pub turn: u32,
    pub transcript: Vec<TurnRecord>,
    /// The tools the experiment's environment offers (empty without one).
    pub tools: Vec<ToolSpec>,
}

/// A tool call for the environment.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default)]
#[serde(default)]
pub struct ToolCall {
    pub name: String,
    pub input: String,
}

/// Where a tool call comes from: the episode it serves and what happened so far.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default)]
#[serde(default)]
pub struct ToolContext {
    pub episode: EpisodeId,
    /// The task as [`crate::Environment::prepare`] returned it.
    pub task: Task,
    /// The agent that made the call.
    pub agent: String,
    /// The turn in which it made it.
    pub turn: u32,
    /// The turns before this one.
    pub transcript: Vec<TurnRecord>,
}

/// The environment's answer to a tool call.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default)]
#[serde(default)]
pub struct ToolResult {
    /// Text appended to the transcript (for search: the `<information>` block).
    pub output: String,
    /// The environment ends the episode after this call.
    pub done: bool,
    /// The environment's own reward for this call (a remote environment's step
    /// reward), kept on the turn as [`TurnRecord::tool_reward`] for rewards to read;
    /// must be finite. Since 1.4; `None` (the default) for none.
    pub reward: Option<RewardValue>,
}

/// A reward an environment returned with a tool call's result ([`ToolResult::reward`]).
/// A plain `f64` on the wire; a type of its own so that the structs holding it stay
/// `Eq` (two values are equal when their numbers are, and NaN equals NaN, though the
/// host refuses one). Since 1.4.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, Default)]
#[serde(transparent)]
pub struct RewardValue(pub f64);

impl PartialEq for RewardValue {
    fn eq(&self, other: &Self) -> bool {
        self.0 == other.0 || (self.0.is_nan() && other.0.is_nan())
    }
}

impl Eq for RewardValue {}

impl From<f64> for RewardValue {
    fn from(value: f64) -> Self {
        Self(value)
    }
}

impl ToolResult {
    pub fn output(text: impl Into<String>) -> Self {
        Self {
            output: text.into(),
            done: false,
            reward: None,
        }
    }
}

/// An episode is about to take its first turn.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default)]
#[serde(default)]
pub struct EpisodeStart {
    pub episode: EpisodeId,
    /// The task as [`crate::Environment::prepare`] returned it.
    pub task: Task,
    /// Which of the task's G trajectories this is.
    pub traj: u32,
}

/// How an episode ended. Match it with a `_` arm.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum EpisodeStatus {
    /// An agent finished with an answer, or the environment ended the episode (a tool
    /// result's `done`; since API 1.4 this status, before it `Truncated`).
    Finished,
    /// The turn or loop limit or an invalid action ended it without an answer (before
    /// API 1.4 hosts also reported an episode the environment ended this way).
    Truncated,
    /// A component (or a model) failed; the episode is dropped from the run.
    Failed,
    /// The run stopped (Ctrl-C, a failure limit) before the episode ended.
    Cancelled,
    /// A status of a newer API version.
    #[default]
    #[serde(other)]
    Unknown,
}

/// An episode ended. The host sends exactly one for every [`EpisodeStart`], whatever
/// ended the episode.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default)]
#[serde(default)]
pub struct EpisodeEnd {
    pub episode: EpisodeId,
    pub status: EpisodeStatus,
    /// The answer of the last `Finish` action, if any agent finished.
    pub final_answer: Option<String>,
    /// Why the episode failed (`Failed` only).
    pub error: Option<String>,
}

/// A finished episode, as rewards score it.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default)]
#[serde(default)]
pub struct EpisodeRecord {
    pub episode: EpisodeId,
    pub task: Task,
    /// The answer of the last `Finish` action, if any agent finished.
    pub final_answer: Option<String>,
    pub transcript: Vec<TurnRecord>,
    /// The episode hit the turn limit instead of finishing.
    pub truncated: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_field_added_later_is_ignored_and_a_missing_one_is_its_default() {
        let newer = r#"{"id":"7","question":"2+2","answer":"4","difficulty":3}"#;
        let task: Task = serde_json::from_str(newer).unwrap();
        assert_eq!((task.id.as_str(), task.answer.as_str()), ("7", "4"));
        assert_eq!(task.source, "");
        assert!(task.meta.is_empty());
        let view: EpisodeView = serde_json::from_str(r#"{"agent":"solver"}"#).unwrap();
        assert!(view.tools.is_empty() && view.transcript.is_empty());
    }

    #[test]
    fn a_variant_added_later_reads_as_unknown() {
        let a: Action = serde_json::from_str(r#"{"type":"delegate","to":"x"}"#).unwrap();
        assert_eq!(a, Action::Unknown);
        let s: EpisodeStatus = serde_json::from_str(r#""paused""#).unwrap();
        assert_eq!(s, EpisodeStatus::Unknown);
        let a = Action::tool("calc", "1+2");
        let text = serde_json::to_string(&a).unwrap();
        assert_eq!(text, r#"{"type":"tool","name":"calc","input":"1+2"}"#);
        assert_eq!(serde_json::from_str::<Action>(&text).unwrap(), a);
    }
}
