//! `search/verifier`, the entry agent: reads the question and everything retrieved so
//! far and decides whether it is enough. `<verify>yes</verify>` hands off to the
//! answerer, `<verify>no</verify>` to the searcher. A completion without a readable
//! verdict counts as yes and is invalid, as in the Dr. MAS paper's code: the episode
//! then ends with an answer instead of looping.

use super::prompt::{example_information, information};
use super::tags::{Think, parsed, read};
use super::{Example, check_name};
use drmas_plugin_api::kit::{Template, few_shot, last_content, shorten};
use drmas_plugin_api::{
    Action, Agent, EpisodeView, Message, Parsed, PluginResult, config_table, parse_config,
};

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

config_table! {
    /// The `[agents.config]` table of `search/verifier`.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct VerifierConfig {
        /// the system message, as is; "" for none
        pub system_prompt: String = DEFAULT_SYSTEM_PROMPT.to_string(),
        /// the user turn: {question} and {information} (every tool output so far)
        pub user_template: String = DEFAULT_USER_TEMPLATE.to_string(),
        /// "optional" (at most one <think>…</think> block, before the tag), "required"
        /// (exactly one) or "forbidden"
        pub think: Think = Think::default(),
        /// worked verdicts shown before the real one
        pub examples: Vec<Example> = Vec::new(),
        /// the agent <verify>no</verify> hands off to
        pub searcher: String = "searcher".to_string(),
        /// the agent <verify>yes</verify> (or an unreadable verdict) hands off to
        pub answerer: String = "answerer".to_string(),
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
    match last_content(completion, "verify") {
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
    user: Template,
}

impl Verifier {
    pub fn new(config: VerifierConfig) -> PluginResult<Self> {
        let user = Template::new(
            "user_template",
            &config.user_template,
            &PLACEHOLDERS,
            &PLACEHOLDERS,
        )?;
        check_name("searcher", "agent", &config.searcher)?;
        check_name("answerer", "agent", &config.answerer)?;
        Ok(Self { config, user })
    }

    pub fn from_config(text: &str) -> PluginResult<Self> {
        Self::new(parse_config(text)?)
    }

    pub fn config(&self) -> &VerifierConfig {
        &self.config
    }

    fn user_turn(&self, question: &str, information: &str) -> String {
        self.user
            .fill(&[("question", question), ("information", information)])
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
