//! `search/searcher`: reads the question, the information so far and the queries
//! already made, and writes the next query as `<search>query</search>`: a call of the
//! environment's search tool, after which control returns to the verifier.
//!
//! A completion without a non-empty `<search>` block is invalid, but the episode still
//! goes on: the query is then the completion itself with its `<think>` blocks and all
//! tags removed (whitespace collapsed, trimmed), or the task's question when nothing is
//! left. The sample is penalised for its format, and the team gets to see what such a
//! query retrieves.

use super::check_name;
use super::prompt::{
    check_template, example_information, few_shot, fill, information, numbered, queries,
};
use super::tags::{Think, parsed, read, strip_markup};
use drmas_plugin_api::{Action, Agent, EpisodeView, Message, Parsed, PluginResult, parse_config};
use serde::Deserialize;

pub const DEFAULT_SYSTEM_PROMPT: &str = "You write queries for a search engine. \
Reply with one short query inside <search> and </search>, for example \
<search>capital of France</search>.";
pub const DEFAULT_USER_TEMPLATE: &str = "Question: {question}\n\n\
Information:\n{information}\n\n\
Queries already made:\n{queries}\n\n\
Write a new query that finds the missing information, as <search>query</search>.";

/// The placeholders `user_template` may use.
pub const PLACEHOLDERS: [&str; 3] = ["question", "information", "queries"];
/// The placeholders `user_template` must use.
pub const REQUIRED: [&str; 2] = ["question", "information"];

/// The note on a completion without a `<search>` block (followed by what was searched
/// instead).
pub const NO_QUERY: &str = "no <search>…</search> in the completion";
/// The note on a completion whose last `<search>` block is blank.
pub const EMPTY_QUERY: &str = "empty <search></search>";

/// The `[agents.config]` table of `search/searcher`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SearcherConfig {
    /// The system message, as is; empty = no system message.
    pub system_prompt: String,
    /// The user turn: `{question}`, `{information}` (the tool outputs so far) and
    /// optionally `{queries}` (the queries made so far, numbered).
    pub user_template: String,
    /// Whether a `<think>` block may, must or must not come before the query.
    pub think: Think,
    /// Worked queries shown before the real turn.
    pub examples: Vec<SearcherExample>,
    /// The environment tool a query calls.
    pub tool: String,
}

impl Default for SearcherConfig {
    fn default() -> Self {
        Self {
            system_prompt: DEFAULT_SYSTEM_PROMPT.to_string(),
            user_template: DEFAULT_USER_TEMPLATE.to_string(),
            think: Think::default(),
            examples: Vec::new(),
            tool: "search".to_string(),
        }
    }
}

/// One worked turn of the searcher: what it saw and the reply it should give.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SearcherExample {
    pub question: String,
    /// The information shown, as `{information}` would render it; empty = nothing
    /// retrieved yet.
    #[serde(default)]
    pub information: String,
    /// The queries already made.
    #[serde(default)]
    pub queries: Vec<String>,
    /// The assistant's reply, e.g. `<search>capital of France</search>`.
    pub reply: String,
}

#[derive(Debug, Clone)]
pub struct Searcher {
    config: SearcherConfig,
}

impl Searcher {
    pub fn new(config: SearcherConfig) -> PluginResult<Self> {
        check_template(
            "user_template",
            &config.user_template,
            &PLACEHOLDERS,
            &REQUIRED,
        )?;
        check_name("tool", "tool", &config.tool)?;
        Ok(Self { config })
    }

    pub fn from_config(text: &str) -> PluginResult<Self> {
        Self::new(parse_config(text)?)
    }

    pub fn config(&self) -> &SearcherConfig {
        &self.config
    }

    fn user_turn(&self, question: &str, information: &str, queries: &str) -> String {
        fill(
            &self.config.user_template,
            &[
                ("question", question),
                ("information", information),
                ("queries", queries),
            ],
        )
    }
}

impl Agent for Searcher {
    /// The environment tool each query calls.
    fn tools_used(&self) -> Vec<String> {
        vec![self.config.tool.clone()]
    }

    fn render(&self, view: &EpisodeView) -> PluginResult<Vec<Message>> {
        let c = &self.config;
        let examples = c.examples.iter().map(|e| {
            let user = self.user_turn(
                &e.question,
                example_information(&e.information),
                &numbered(&e.queries),
            );
            (user, e.reply.as_str())
        });
        let mut messages = few_shot(&c.system_prompt, examples);
        messages.push(Message::user(self.user_turn(
            &view.task.question,
            &information(view),
            &numbered(&queries(view, &c.tool)),
        )));
        Ok(messages)
    }

    fn parse(&self, view: &EpisodeView, completion: &str) -> PluginResult<Parsed> {
        let reading = read(completion, "search", self.config.think);
        let mut issues = reading.issues;
        let query = match reading.last.map(|b| b.content.trim()) {
            Some(query) if !query.is_empty() => query.to_string(),
            found => {
                let note = if found.is_some() {
                    EMPTY_QUERY
                } else {
                    NO_QUERY
                };
                let stripped = strip_markup(completion);
                let (query, what) = if stripped.is_empty() {
                    (view.task.question.trim().to_string(), "the question")
                } else {
                    (stripped, "the completion without tags")
                };
                issues.insert(0, format!("{note}; {what} was searched instead"));
                query
            }
        };
        Ok(parsed(
            Action::tool(self.config.tool.as_str(), query),
            issues,
        ))
    }
}
