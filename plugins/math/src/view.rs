//! What the agents read of an episode's transcript.

use drmas_plugin_api::EpisodeView;

/// The latest completion of `agent` in `view` ("" before it has acted, or when `agent`
/// is "").
pub(crate) fn latest_completion<'v>(view: &'v EpisodeView, agent: &str) -> &'v str {
    view.transcript
        .iter()
        .rev()
        .find(|t| !agent.is_empty() && t.agent.as_str() == agent)
        .map_or("", |t| t.completion.as_str())
}
