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
use super::prompt::{example_information, information, numbered, queries};
use super::tags::{Think, parsed, read};
use drmas_plugin_api::kit::{Template, few_shot, strip_markup};
use drmas_plugin_api::{
    Action, Agent, EpisodeView, Message, Parsed, PluginResult, config_table, parse_config,
};

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

config_table! {
    /// The `[agents.config]` table of `search/searcher`.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct SearcherConfig {
        /// the system message, as is; "" for none
        pub system_prompt: String = DEFAULT_SYSTEM_PROMPT.to_string(),
        /// the user turn: {question}, {information} (every tool output so far) and
        /// optionally {queries} (the queries made so far, numbered)
        pub user_template: String = DEFAULT_USER_TEMPLATE.to_string(),
        /// "optional" (at most one <think>…</think> block, before the tag), "required"
        /// (exactly one) or "forbidden"
        pub think: Think = Think::default(),
        /// worked queries shown before the real turn
        pub examples: Vec<SearcherExample> = Vec::new(),
        /// the environment tool a <search> query calls
        pub tool: String = "search".to_string(),
    }
}

config_table! {
    /// One worked turn of the searcher: what it saw and the reply it should give.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct SearcherExample {
        /// the question, as `{question}` renders it
        pub question: String,
        /// the information shown, as `{information}` would render it; "" = nothing
        /// retrieved yet
        pub information: String = String::new(),
        /// the queries already made
        pub queries: Vec<String> = Vec::new(),
        /// the assistant's reply, e.g. `<search>capital of France</search>`
        pub reply: String,
    }
}

#[derive(Debug, Clone)]
pub struct Searcher {
    config: SearcherConfig,
    user: Template,
}

impl Searcher {
    pub fn new(config: SearcherConfig) -> PluginResult<Self> {
        let user = Template::new(
            "user_template",
            &config.user_template,
            &PLACEHOLDERS,
            &REQUIRED,
        )?;
        check_name("tool", "tool", &config.tool)?;
        Ok(Self { config, user })
    }

    pub fn from_config(text: &str) -> PluginResult<Self> {
        Self::new(parse_config(text)?)
    }

    pub fn config(&self) -> &SearcherConfig {
        &self.config
    }

    fn user_turn(&self, question: &str, information: &str, queries: &str) -> String {
        self.user.fill(&[
            ("question", question),
            ("information", information),
            ("queries", queries),
        ])
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
