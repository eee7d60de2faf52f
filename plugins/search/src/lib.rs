//! The search plugin (docs/search.md): a three-agent retrieval team and its tools.
//!
//! | component         | kind        | what it does                                                        |
//! |-------------------|-------------|---------------------------------------------------------------------|
//! | `search/env`      | environment | owns the retriever (local index or Search-R1 server), runs `search` |
//! | `search/verifier` | agent       | `<verify>yes</verify>` hands to the answerer, `no` to the searcher  |
//! | `search/searcher` | agent       | `<search>query</search>`: a call of the `search` tool               |
//! | `search/answerer` | agent       | `<answer>…</answer>` ends the episode                               |
//! | `search/em`       | reward      | exact match after SQuAD normalization with any gold alias: 1 or 0   |
//! | `search/f1`       | reward      | the best token F1 over the gold aliases                             |

pub mod agents;
pub mod answer;
pub mod env;
pub mod index;
pub mod passage;
pub mod protocol;
pub mod remote;
pub mod retriever;
pub mod reward;

pub use passage::{Passage, format_information};
pub use retriever::{RetrieveError, Retriever};

use drmas_plugin_api::PluginSpec;

/// The `search` plugin. Each component's described keys are those of the config table
/// it parses; the rewards take none.
pub fn plugin() -> PluginSpec {
    PluginSpec::new("search", env!("CARGO_PKG_VERSION"))
        .environment_with(
            "env",
            "retrieval over a local BM25 index or a Search-R1 server; one tool, `search`",
            env::SearchEnv::new,
        )
        .agent_with(
            "verifier",
            "decides whether the information so far answers the question: <verify>yes|no</verify>",
            agents::Verifier::new,
        )
        .agent_with(
            "searcher",
            "writes the next query: <search>query</search>",
            agents::Searcher::new,
        )
        .agent_with(
            "answerer",
            "answers from the information gathered: <answer>…</answer> ends the episode",
            agents::Answerer::new,
        )
        .reward_with(
            "em",
            "1 if the last <answer> equals a gold alias after SQuAD normalization, else 0",
            |drmas_plugin_api::kit::NoConfig {}| Ok(reward::ExactMatch),
        )
        .reward_with(
            "f1",
            "the best SQuAD token F1 of the last <answer> against the gold aliases",
            |drmas_plugin_api::kit::NoConfig {}| Ok(reward::TokenF1),
        )
}

// Linked into the host, it registers as a built-in; built alone, it is a `.so`.
#[cfg(feature = "builtin")]
drmas_plugin_api::register_builtin!(plugin);
#[cfg(not(feature = "builtin"))]
drmas_plugin_api::export_plugin!(plugin);
