//! The three agents of the search team (docs/search.md) and the config keys they describe.
//!
//! The verifier is the entry agent: `<verify>no</verify>` hands off to the searcher,
//! whose `<search>query</search>` calls the environment's search tool (control then
//! returns to the verifier, which sees the new `<information>` block);
//! `<verify>yes</verify>` hands off to the answerer, whose `<answer>…</answer>` ends
//! the episode.
//!
//! All three share the format rules of [`tags`]: exactly one block of the agent's tag,
//! and `<think>` blocks as their `think` key says. An invalid completion still leads to
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

use drmas_plugin_api::{ConfigKey, PluginError, PluginResult};
use prompt::toml_string;
use serde::Deserialize;

/// One worked turn of the verifier or the answerer: what it saw and the reply it
/// should give.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Example {
    pub question: String,
    /// The information shown, as `{information}` would render it; empty = nothing
    /// retrieved yet.
    #[serde(default)]
    pub information: String,
    /// The assistant's reply, e.g. `<verify>no</verify>` or `<answer>Paris</answer>`.
    pub reply: String,
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

/// The keys every search agent takes, in its config struct's field order.
fn common_keys(system_prompt: &str, user_template: &str, placeholders: &str) -> Vec<ConfigKey> {
    vec![
        ConfigKey::optional(
            "system_prompt",
            "string",
            &toml_string(system_prompt),
            "the system message, as is; \"\" for none",
        ),
        ConfigKey::optional(
            "user_template",
            "string",
            &toml_string(user_template),
            &format!("the user turn: {placeholders}"),
        ),
        ConfigKey::optional(
            "think",
            "string",
            &toml_string(Think::default().as_str()),
            "\"optional\" (at most one <think>…</think> block, before the tag), \
             \"required\" (exactly one) or \"forbidden\"",
        ),
    ]
}

/// The keys of [`VerifierConfig`] (a test keeps them equal to the fields it accepts).
pub fn verifier_keys() -> Vec<ConfigKey> {
    let d = VerifierConfig::default();
    let mut keys = common_keys(
        &d.system_prompt,
        &d.user_template,
        "{question} and {information} (every tool output so far)",
    );
    keys.extend([
        ConfigKey::optional(
            "examples",
            "array of tables {question, information, reply}",
            "[]",
            "worked verdicts shown before the real one",
        ),
        ConfigKey::optional(
            "searcher",
            "string",
            &toml_string(&d.searcher),
            "the agent <verify>no</verify> hands off to",
        ),
        ConfigKey::optional(
            "answerer",
            "string",
            &toml_string(&d.answerer),
            "the agent <verify>yes</verify> (or an unreadable verdict) hands off to",
        ),
    ]);
    keys
}

/// The keys of [`SearcherConfig`] (a test keeps them equal to the fields it accepts).
pub fn searcher_keys() -> Vec<ConfigKey> {
    let d = SearcherConfig::default();
    let mut keys = common_keys(
        &d.system_prompt,
        &d.user_template,
        "{question}, {information} (every tool output so far) and optionally {queries} \
         (the queries made so far, numbered)",
    );
    keys.extend([
        ConfigKey::optional(
            "examples",
            "array of tables {question, information, queries, reply}",
            "[]",
            "worked queries shown before the real turn",
        ),
        ConfigKey::optional(
            "tool",
            "string",
            &toml_string(&d.tool),
            "the environment tool a <search> query calls",
        ),
    ]);
    keys
}

/// The keys of [`AnswererConfig`] (a test keeps them equal to the fields it accepts).
pub fn answerer_keys() -> Vec<ConfigKey> {
    let d = AnswererConfig::default();
    let mut keys = common_keys(
        &d.system_prompt,
        &d.user_template,
        "{question} and {information} (every tool output so far)",
    );
    keys.push(ConfigKey::optional(
        "examples",
        "array of tables {question, information, reply}",
        "[]",
        "worked answers shown before the real one",
    ));
    keys
}
