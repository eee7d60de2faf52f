//! What the search agents show the model besides their templates: the information
//! gathered so far and the queries already made, read from the transcript.

use drmas_plugin_api::{Action, EpisodeView};

/// What `{information}` renders as before any search returned something.
pub const NOTHING_RETRIEVED: &str = "(nothing retrieved yet)";
/// What `{queries}` renders as before the first search.
pub const NO_QUERIES: &str = "(no searches yet)";

/// Every tool output of the episode so far (the `<information>…</information>` blocks),
/// in order, each trimmed, one per line; [`NOTHING_RETRIEVED`] when there is none.
pub fn information(view: &EpisodeView) -> String {
    let outputs: Vec<&str> = view
        .transcript
        .iter()
        .filter_map(|t| t.tool_output.as_deref())
        .map(str::trim)
        .filter(|o| !o.is_empty())
        .collect();
    if outputs.is_empty() {
        NOTHING_RETRIEVED.to_string()
    } else {
        outputs.join("\n")
    }
}

/// The inputs of the episode's calls of the tool `tool`, in order.
pub fn queries<'v>(view: &'v EpisodeView, tool: &str) -> Vec<&'v str> {
    view.transcript
        .iter()
        .filter_map(|t| match &t.action {
            Action::Tool { name, input } if name == tool => Some(input.as_str()),
            _ => None,
        })
        .collect()
}

/// Queries as numbered lines (`1. first query`); [`NO_QUERIES`] when there is none.
pub fn numbered(queries: &[impl AsRef<str>]) -> String {
    if queries.is_empty() {
        return NO_QUERIES.to_string();
    }
    queries
        .iter()
        .enumerate()
        .map(|(i, q)| format!("{}. {}", i + 1, q.as_ref()))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The information of a few-shot example: as written, or [`NOTHING_RETRIEVED`] when
/// empty (as in a real first turn).
pub fn example_information(information: &str) -> &str {
    if information.trim().is_empty() {
        NOTHING_RETRIEVED
    } else {
        information
    }
}
