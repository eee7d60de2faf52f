//! `search/env`: owns the retriever (a local index, or a Search-R1 server) and runs the
//! `search` tool. A failed retrieval is an observation the agents read and a counted
//! metric, never an error that ends the episode.

use crate::{
    Passage, Retriever, answer, format_information,
    index::LocalIndex,
    remote::{RemoteConfig, RemoteRetriever},
    reward,
};
use drmas_plugin_api::{
    Environment, EpisodeEnd, EpisodeId, EpisodeStart, Metrics, PluginError, PluginResult, ToolCall,
    ToolContext, ToolResult, ToolSpec, config_table, kit::ConfigType, parse_config,
};
use serde::{Deserialize, Serialize};
use std::{collections::HashMap, io::Write as _, path::PathBuf, sync::Mutex, time::Instant};

/// Passages returned per query when the experiment does not say.
pub const DEFAULT_TOPK: usize = 3;
/// Characters of each passage's text in the observation when the experiment does not say.
pub const DEFAULT_MAX_CHARS: usize = 400;
/// The longest query sent to a retriever, in characters; longer ones are cut (a model
/// that rambles inside `<search>` still gets passages).
pub const MAX_QUERY_CHARS: usize = 1000;

config_table! {
    /// `[environment.config]` of `search/env`.
    #[derive(Debug, Clone)]
    pub struct EnvConfig {
        /// { index = "DIR" } for a local BM25 index, or { url = "http://HOST:PORT",
        /// timeout_ms = 5000, retries = 2, backoff_ms, batch_window_ms, max_batch } for a
        /// Search-R1 server
        pub retriever: RetrieverConfig,
        /// passages returned per query (1 to 50)
        pub topk: usize = DEFAULT_TOPK,
        /// characters of each passage's text shown; longer ones are cut
        pub max_chars: usize = DEFAULT_MAX_CHARS,
        /// the tool's name, as the searcher's `tool` names it
        pub tool: String = "search".to_string(),
    }
}

/// `retriever = { index = "…" }` or `retriever = { url = "…", … }`: which keys apply
/// depends on the other keys, so it is checked by [`SearchEnv::new`], not by its type.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RetrieverConfig {
    pub index: Option<PathBuf>,
    pub url: Option<String>,
    pub timeout_ms: Option<u64>,
    pub retries: Option<u32>,
    pub backoff_ms: Option<u64>,
    pub batch_window_ms: Option<u64>,
    pub max_batch: Option<usize>,
}

impl ConfigType for RetrieverConfig {
    fn config_type() -> String {
        "table".to_string()
    }
}

/// What one episode's searches came to, reported by [`Environment::episode_metrics`].
#[derive(Debug, Clone, Default)]
struct EpisodeStats {
    searches: u32,
    failures: u32,
    /// Successful searches whose passages contain a gold alias.
    hits: u32,
    millis: f64,
}

pub struct SearchEnv {
    retriever: Box<dyn Retriever>,
    /// Where the passages come from, for observations and messages.
    origin: String,
    topk: usize,
    max_chars: usize,
    tool: String,
    episodes: Mutex<HashMap<EpisodeId, EpisodeStats>>,
}

impl SearchEnv {
    pub fn from_config(text: &str) -> PluginResult<Self> {
        Self::new(parse_config(text)?)
    }

    pub fn new(config: EnvConfig) -> PluginResult<Self> {
        if config.topk == 0 || config.topk > 50 {
            return Err(PluginError::config(format!(
                "topk = {}: must be between 1 and 50 (each passage is appended to every later prompt)",
                config.topk
            )));
        }
        if config.max_chars == 0 {
            return Err(PluginError::config("max_chars = 0: must be at least 1"));
        }
        if config.tool.trim().is_empty() {
            return Err(PluginError::config(
                "tool: the tool's name must not be empty",
            ));
        }
        let (retriever, origin) = open_retriever(&config.retriever)?;
        Ok(Self::with_retriever(
            retriever,
            origin,
            config.topk,
            config.max_chars,
            config.tool,
        ))
    }

    /// An environment around any retriever (tests use a scripted one).
    pub fn with_retriever(
        retriever: Box<dyn Retriever>,
        origin: String,
        topk: usize,
        max_chars: usize,
        tool: String,
    ) -> Self {
        Self {
            retriever,
            origin,
            topk,
            max_chars,
            tool,
            episodes: Mutex::new(HashMap::new()),
        }
    }

    fn stats(&self) -> std::sync::MutexGuard<'_, HashMap<EpisodeId, EpisodeStats>> {
        // A panic elsewhere while holding the lock leaves plain counters behind: keep going.
        self.episodes.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn open_retriever(r: &RetrieverConfig) -> PluginResult<(Box<dyn Retriever>, String)> {
    let remote_keys = [
        ("timeout_ms", r.timeout_ms.is_some()),
        ("retries", r.retries.is_some()),
        ("backoff_ms", r.backoff_ms.is_some()),
        ("batch_window_ms", r.batch_window_ms.is_some()),
        ("max_batch", r.max_batch.is_some()),
    ];
    match (&r.index, &r.url) {
        (Some(path), None) => {
            if let Some((key, _)) = remote_keys.iter().find(|(_, set)| *set) {
                return Err(PluginError::config(format!(
                    "retriever.{key} applies to a remote retriever (`url`), not to a local `index`"
                )));
            }
            let index = LocalIndex::open(path).map_err(|e| {
                PluginError::config(format!(
                    "retriever.index: {e} (`drmas data prepare` builds data/wiki/index; \
                     `drmas index build CORPUS OUT` builds any corpus)"
                ))
            })?;
            Ok((Box::new(index), format!("index {}", path.display())))
        }
        (None, Some(url)) => {
            let mut config = RemoteConfig {
                url: url.clone(),
                ..RemoteConfig::default()
            };
            if let Some(v) = r.timeout_ms {
                config.timeout_ms = v;
            }
            if let Some(v) = r.retries {
                config.retries = v;
            }
            if let Some(v) = r.backoff_ms {
                config.backoff_ms = v;
            }
            if let Some(v) = r.batch_window_ms {
                config.batch_window_ms = v;
            }
            if let Some(v) = r.max_batch {
                config.max_batch = v;
            }
            if config.timeout_ms == 0 {
                return Err(PluginError::config(
                    "retriever.timeout_ms = 0: must be at least 1",
                ));
            }
            if config.max_batch == 0 {
                return Err(PluginError::config(
                    "retriever.max_batch = 0: must be at least 1",
                ));
            }
            let remote = RemoteRetriever::new(config)
                .map_err(|e| PluginError::config(format!("retriever.url: {e}")))?;
            Ok((Box::new(remote), format!("retriever {url}")))
        }
        (Some(_), Some(_)) => Err(PluginError::config(
            "retriever: give either `index` (a local index folder) or `url` (a Search-R1 server), not both",
        )),
        (None, None) => Err(PluginError::config(
            "retriever: give `index = \"data/wiki/index\"` (a local index) or `url = \"http://HOST:PORT\"` (a Search-R1 server)",
        )),
    }
}

/// Whether any gold alias appears in the passages, compared after SQuAD normalization
/// on word boundaries (`paris` is in "… in paris …", not in "parisian"): the test of the
/// `answer_recall` metric and of `drmas index bench`'s recall.
pub fn contains_answer(passages: &[Passage], golds: &[String]) -> bool {
    let golds: Vec<String> = golds
        .iter()
        .map(|g| answer::normalize_answer(g))
        .filter(|g| !g.is_empty())
        .collect();
    passages.iter().any(|p| {
        let text = format!(
            " {} {} ",
            answer::normalize_answer(&p.title),
            answer::normalize_answer(&p.text)
        );
        golds.iter().any(|g| text.contains(&format!(" {g} ")))
    })
}

/// A query as the retriever gets it: control characters become spaces, and at most
/// [`MAX_QUERY_CHARS`] characters are kept.
fn clean_query(input: &str) -> String {
    input
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(MAX_QUERY_CHARS)
        .collect::<String>()
        .trim()
        .to_string()
}

impl Environment for SearchEnv {
    fn tools(&self) -> Vec<ToolSpec> {
        vec![
            ToolSpec::new(
                &self.tool,
                &format!(
                    "searches a Wikipedia passage collection and returns the top {} passages",
                    self.topk
                ),
            )
            .with_input_format("a short keyword query, e.g. `capital of Australia`"),
        ]
    }

    fn start_episode(&self, start: &EpisodeStart) -> PluginResult<()> {
        self.stats().insert(start.episode, EpisodeStats::default());
        Ok(())
    }

    fn call_tool(&self, context: &ToolContext, call: &ToolCall) -> PluginResult<ToolResult> {
        if call.name != self.tool {
            return Err(PluginError::not_found(format!(
                "search/env has one tool, `{}` (asked for `{}`)",
                self.tool, call.name
            )));
        }
        let query = clean_query(&call.input);
        let started = Instant::now();
        let result = if query.is_empty() {
            Ok(vec![Vec::new()])
        } else {
            self.retriever
                .search_batch(std::slice::from_ref(&query), self.topk)
        };
        let millis = started.elapsed().as_secs_f64() * 1e3;
        let (output, failed, hit) = match result {
            Ok(mut lists) => {
                let passages = lists.pop().unwrap_or_default();
                // A task without readable golds fails in the reward; here it has no recall.
                let golds = reward::gold_aliases(&context.task).unwrap_or_default();
                let hit = contains_answer(&passages, &golds);
                let output = if query.is_empty() {
                    "<information>The query was empty: write the words to search for inside <search>…</search>.</information>".to_string()
                } else {
                    format_information(&passages, self.max_chars)
                };
                (output, false, hit)
            }
            Err(e) => (
                format!(
                    "<information>The search failed ({e}); no passages this time. Search again or answer with what you know.</information>"
                ),
                true,
                false,
            ),
        };
        if failed {
            // Logged once per failure with where it came from; the report counts them. A
            // standard error that cannot be written (a full disk) loses the line, never
            // the episode (`eprintln!` would panic).
            let _ = writeln!(
                std::io::stderr().lock(),
                "search/env ({}): episode {}: {output}",
                self.origin,
                context.episode
            );
        }
        let mut stats = self.stats();
        let s = stats.entry(context.episode).or_default();
        s.searches += 1;
        s.failures += u32::from(failed);
        s.hits += u32::from(hit);
        s.millis += millis;
        Ok(ToolResult::output(output))
    }

    fn episode_metrics(&self, episode: EpisodeId) -> PluginResult<Metrics> {
        let s = self.stats().get(&episode).cloned().unwrap_or_default();
        let mut m = Metrics::new();
        m.insert("searches".into(), f64::from(s.searches));
        m.insert("retrieval_failures".into(), f64::from(s.failures));
        let answered = s.searches - s.failures;
        if answered > 0 {
            // Of the searches that returned passages, the share whose top-k held a gold alias.
            m.insert(
                "answer_recall".into(),
                f64::from(s.hits) / f64::from(answered),
            );
        }
        if s.searches > 0 {
            m.insert("retrieval_ms".into(), s.millis / f64::from(s.searches));
        }
        Ok(m)
    }

    fn end_episode(&self, end: &EpisodeEnd) -> PluginResult<()> {
        self.stats().remove(&end.episode);
        Ok(())
    }

    fn is_slow(&self) -> bool {
        // Index lookups and HTTP requests block: they run off the rollout threads, with
        // the experiment's `tool_timeout_s`.
        true
    }
}
