//! `search/verifier`, the entry agent: reads the question and everything retrieved so
//! far and decides whether it is enough. `<verify>yes</verify>` hands off to the
//! answerer, `<verify>no</verify>` to the searcher. A completion without a readable
//! verdict counts as yes and is invalid, as in the Dr. MAS paper's code: the episode
//! then ends with an answer instead of looping.

use super::prompt::{check_template, example_information, few_shot, fill, information};
use super::tags::{Think, parsed, read, shorten};
use super::{Example, check_name};
use drmas_plugin_api::{Action, Agent, EpisodeView, Message, Parsed, PluginResult, parse_config};
use serde::Deserialize;

pub const DEFAULT_SYSTEM_PROMPT: &str = "You check whether the information found so far \
answers the question. Reply <verify>yes</verify> if it does, or <verify>no</verify> if \
more searching is needed.";
pub const DEFAULT_USER_TEMPLATE: &str = "Question: {question}\n\n\
Information:\n{information}\n\n\
Is this information enough to answer the question? Reply <verify>yes</verify> or \
<verify>no</verify>.";

/// The placeholders `user_template` may use; both are required.
pub const PLACEHOLDERS: [&str; 2] = ["question", "information"];

/// The note on a completion without a `<verify>` block.
pub const NO_VERDICT: &str =
    "no <verify>yes</verify> or <verify>no</verify> in the completion; counted as yes";

/// The `[agents.config]` table of `search/verifier`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct VerifierConfig {
    /// The system message, as is; empty = no system message.
    pub system_prompt: String,
    /// The user turn: `{question}` and `{information}` (the tool outputs so far).
    pub user_template: String,
    /// Whether a `<think>` block may, must or must not come before the verdict.
    pub think: Think,
    /// Worked verdicts shown before the real one.
    pub examples: Vec<Example>,
    /// The agent a "no" hands off to.
    pub searcher: String,
    /// The agent a "yes" hands off to.
    pub answerer: String,
}

impl Default for VerifierConfig {
    fn default() -> Self {
        Self {
            system_prompt: DEFAULT_SYSTEM_PROMPT.to_string(),
            user_template: DEFAULT_USER_TEMPLATE.to_string(),
            think: Think::default(),
            examples: Vec::new(),
            searcher: "searcher".to_string(),
            answerer: "answerer".to_string(),
        }
    }
}

/// What a verifier completion decides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Yes,
    No,
    /// A `<verify>` block with something else inside (trimmed).
    Other(String),
    /// No complete `<verify>…</verify>` block.
    Missing,
}

/// The verdict of the last complete `<verify>…</verify>` block of `completion`; the
/// verdict is case-insensitive and whitespace around it is ignored (`<verify> Yes
/// </verify>`).
pub fn verdict(completion: &str) -> Verdict {
    match super::tags::last_content(completion, "verify") {
        None => Verdict::Missing,
        Some(content) => {
            let content = content.trim();
            match content.to_lowercase().as_str() {
                "yes" => Verdict::Yes,
                "no" => Verdict::No,
                _ => Verdict::Other(content.to_string()),
            }
        }
    }
}

#[derive(Debug, Clone)]
pub struct Verifier {
    config: VerifierConfig,
}

impl Verifier {
    pub fn new(config: VerifierConfig) -> PluginResult<Self> {
        check_template(
            "user_template",
            &config.user_template,
            &PLACEHOLDERS,
            &PLACEHOLDERS,
        )?;
        check_name("searcher", "agent", &config.searcher)?;
        check_name("answerer", "agent", &config.answerer)?;
        Ok(Self { config })
    }

    pub fn from_config(text: &str) -> PluginResult<Self> {
        Self::new(parse_config(text)?)
    }

    pub fn config(&self) -> &VerifierConfig {
        &self.config
    }

    fn user_turn(&self, question: &str, information: &str) -> String {
        fill(
            &self.config.user_template,
            &[("question", question), ("information", information)],
        )
    }
}

impl Agent for Verifier {
    /// The searcher a "no" and the answerer a "yes" hands off to.
    fn linked_agents(&self) -> Vec<String> {
        vec![self.config.searcher.clone(), self.config.answerer.clone()]
    }

    fn render(&self, view: &EpisodeView) -> PluginResult<Vec<Message>> {
        let c = &self.config;
        let examples = c.examples.iter().map(|e| {
            let user = self.user_turn(&e.question, example_information(&e.information));
            (user, e.reply.as_str())
        });
        let mut messages = few_shot(&c.system_prompt, examples);
        messages.push(Message::user(
            self.user_turn(&view.task.question, &information(view)),
        ));
        Ok(messages)
    }

    fn parse(&self, _view: &EpisodeView, completion: &str) -> PluginResult<Parsed> {
        let c = &self.config;
        let mut issues = read(completion, "verify", c.think).issues;
        let to = match verdict(completion) {
            Verdict::Yes => &c.answerer,
            Verdict::No => &c.searcher,
            Verdict::Other(content) => {
                issues.insert(
                    0,
                    format!(
                        "verdict `{}` is neither yes nor no; counted as yes",
                        shorten(&content, 40)
                    ),
                );
                &c.answerer
            }
            Verdict::Missing => {
                issues.insert(0, NO_VERDICT.to_string());
                &c.answerer
            }
        };
        Ok(parsed(Action::handoff(to.as_str()), issues))
    }
}
