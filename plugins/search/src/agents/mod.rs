//! The three agents of the search team (docs/search.md) and the config keys they describe.
//!
//! The verifier is the entry agent: `<verify>no</verify>` hands off to the searcher,
//! whose `<search>query</search>` calls the environment's search tool (control then
//! returns to the verifier, which sees the new `<information>` block);
//! `<verify>yes</verify>` hands off to the answerer, whose `<answer>…</answer>` ends
//! the episode.
//!
//! All three share the format rules of [`tags`]: exactly one block of the agent's tag,
//! and `<think>` blocks as their `think` key says. Their templates, few-shot prompts,
//! tag scanning and config tables come from the plugin API's kit. An invalid completion still leads to
//! an action (see each agent), so the episode goes on and only the sample is penalised.

pub mod answerer;
pub mod prompt;
pub mod searcher;
pub mod tags;
pub mod verifier;

pub use answerer::{Answerer, AnswererConfig};
pub use searcher::{Searcher, SearcherConfig, SearcherExample};
pub use tags::Think;
pub use verifier::{Verdict, Verifier, VerifierConfig};

use drmas_plugin_api::{PluginError, PluginResult, config_table};

config_table! {
    /// One worked turn of the verifier or the answerer: what it saw and the reply it
    /// should give.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct Example {
        /// the question, as `{question}` renders it
        pub question: String,
        /// the information shown, as `{information}` would render it; "" = nothing
        /// retrieved yet
        pub information: String = String::new(),
        /// the assistant's reply, e.g. `<verify>no</verify>` or `<answer>Paris</answer>`
        pub reply: String,
    }
}

/// Refuses an empty `name` for the config key `key`, which names the `what` (an agent
/// or a tool) to link to.
fn check_name(key: &str, what: &str, name: &str) -> PluginResult<()> {
    if name.trim().is_empty() {
        return Err(PluginError::config(format!(
            "`{key}` must not be empty: it names the {what} to use"
        )));
    }
    Ok(())
}
