//! The component traits plugin authors implement. They are ordinary Rust traits;
//! the host uses the very same traits for built-in and dynamically loaded components.
//!
//! Every method with a default may be left out; a plugin built against an API version
//! that did not have a method gets its default in a newer host too.

use crate::{
    data::{
        EpisodeEnd, EpisodeId, EpisodeRecord, EpisodeStart, EpisodeView, Message, Metrics, Parsed,
        SampleRow, Task, ToolCall, ToolContext, ToolResult, ToolSpec,
    },
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
    /// The tools this agent's config says it calls. `drmas check` refuses an experiment
    /// whose environment does not offer each of them ([`Environment::tools`]).
    fn tools_used(&self) -> Vec<String> {
        Vec::new()
    }
}

/// Prepares tasks, keeps per-episode state and executes tool calls.
///
/// One environment object serves every episode of a run, concurrently: state that
/// belongs to an episode is kept by the plugin under the [`crate::EpisodeId`] that
/// [`Environment::start_episode`] receives (a `Mutex<HashMap<EpisodeId, _>>` is
/// enough) and dropped in [`Environment::end_episode`].
pub trait Environment: Send + Sync {
    /// Called once per episode before the first turn; may rewrite the task.
    fn prepare(&self, task: &Task) -> PluginResult<Task> {
        Ok(task.clone())
    }
    /// The tools this environment offers. Agents see them in
    /// [`EpisodeView::tools`](crate::EpisodeView); `drmas check` checks the tools an
    /// agent's config names against them.
    fn tools(&self) -> Vec<ToolSpec> {
        Vec::new()
    }
    /// An episode starts (after [`Environment::prepare`], before its first turn). An
    /// error here fails the episode; [`Environment::end_episode`] still follows.
    fn start_episode(&self, start: &EpisodeStart) -> PluginResult<()> {
        let _ = start;
        Ok(())
    }
    /// Executes a tool call made in the episode `context.episode`.
    fn call_tool(&self, context: &ToolContext, call: &ToolCall) -> PluginResult<ToolResult>;
    /// The episode ended: sent exactly once for every started episode, whether it
    /// finished, was cut by a limit, failed or was cancelled. Errors are logged only.
    fn end_episode(&self, end: &EpisodeEnd) -> PluginResult<()> {
        let _ = end;
        Ok(())
    }
    /// Numbers about the episode `episode` (`searches`, `retrieval_failures`,
    /// `answer_recall`), asked once when it completed, before
    /// [`Environment::end_episode`]. The host reports each one's mean over the episodes
    /// of every data source, in evaluation reports and training metrics. Every value must
    /// be finite. Since API 1.1; the default reports none.
    fn episode_metrics(&self, episode: EpisodeId) -> PluginResult<Metrics> {
        let _ = episode;
        Ok(Metrics::new())
    }
    /// Numbers about a completed episode computed from its record (transcript, answer,
    /// task) as well as any state the environment kept: what the agents did, which the
    /// environment does not see turn by turn (a verifier's approve rate given the
    /// solution's correctness). The host asks this instead of
    /// [`Environment::episode_metrics`], once per completed episode, and reports each
    /// value's mean over the episodes that reported it, so a metric that only some
    /// episodes have (a conditional rate) is left out where it does not apply. Since
    /// API 1.3; the default is [`Environment::episode_metrics`] of the record's episode.
    fn record_metrics(&self, record: &EpisodeRecord) -> PluginResult<Metrics> {
        self.episode_metrics(record.episode)
    }
    /// Reaches whatever the environment depends on outside the process (a server, an
    /// index service) and checks it as far as it can without running an episode:
    /// `drmas check --online` asks this before any model loads and prints the lines it
    /// returns; an error fails the check. Nothing else calls it. Since API 1.4; the
    /// default has nothing to reach.
    fn probe(&self) -> PluginResult<Vec<String>> {
        Ok(Vec::new())
    }
    /// How many episodes may run at once with this environment (a server's session
    /// limit): the host starts no more than this many of a rollout together, and the
    /// others wait their turn without holding up the model batches. Since API 1.4;
    /// `None`, the default, is no limit.
    fn max_episodes(&self) -> Option<usize> {
        None
    }
    /// Whether tool calls are slow (I/O, search). The host runs every tool call off the
    /// rollout threads under `[environment] tool_timeout_s` either way (a tool that
    /// hangs must not hang the run); this is information for reports and schedulers.
    fn is_slow(&self) -> bool {
        false
    }
}

/// Scores a finished episode. The host refuses NaN and infinite scores.
pub trait Reward: Send + Sync {
    /// The episode's score: what evaluation and success report, and, unless
    /// [`Reward::turn_scores`] says otherwise, the score of every turn's sample.
    fn score(&self, episode: &EpisodeRecord) -> PluginResult<f32>;
    /// A score per turn of `episode.transcript` (same length, same order), for rewards
    /// that judge each agent's own turns (a verifier rewarded for a verdict that matches
    /// the solution's correctness). `None`, the default, gives every turn the episode's
    /// [`Reward::score`], the team reward of the paper. The host sums, per sample, the
    /// turn scores of the rewards that apply to the sample's agent (`[[rewards]] agents`).
    /// Since API 1.3; a plugin built before it gives every turn its episode score.
    fn turn_scores(&self, episode: &EpisodeRecord) -> PluginResult<Option<Vec<f32>>> {
        let _ = episode;
        Ok(None)
    }
}

/// Maps the flat table of samples to one advantage per sample, in the same order.
/// The host refuses a result of the wrong length or with NaN or infinite values.
pub trait Normalizer: Send + Sync {
    fn advantages(&self, samples: &[SampleRow]) -> PluginResult<Vec<f32>>;
}
