//! `search/answerer`: answers the question from the information gathered so far;
//! `<answer>…</answer>` ends the episode with the content of the last answer block. A
//! completion without one ends the episode without an answer (reward 0).
//!
//! The host hands the last turn of an episode to the answerer whatever came before, so
//! it renders at any turn, with or without information.

use super::Example;
use super::prompt::{example_information, information};
use super::tags::{Think, parsed, read};
use drmas_plugin_api::kit::{Template, few_shot};
use drmas_plugin_api::{
    Action, Agent, EpisodeView, Message, Parsed, PluginResult, config_table, parse_config,
};

pub const DEFAULT_SYSTEM_PROMPT: &str = "You answer questions in a few words, using the \
information given. Reply with only the answer inside <answer> and </answer>, for example \
<answer>Paris</answer>.";
pub const DEFAULT_USER_TEMPLATE: &str = "Question: {question}\n\n\
Information:\n{information}\n\n\
Answer the question in a few words, as <answer>answer</answer>.";

/// The placeholders `user_template` may use; both are required.
pub const PLACEHOLDERS: [&str; 2] = ["question", "information"];

/// The reason (and note) of a completion without an `<answer>` block.
pub const NO_ANSWER: &str = "no <answer>…</answer> in the completion";
/// The note on a completion whose last `<answer>` block is blank.
pub const EMPTY_ANSWER: &str = "empty <answer></answer>";

config_table! {
    /// The `[agents.config]` table of `search/answerer`.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct AnswererConfig {
        /// the system message, as is; "" for none
        pub system_prompt: String = DEFAULT_SYSTEM_PROMPT.to_string(),
        /// the user turn: {question} and {information} (every tool output so far)
        pub user_template: String = DEFAULT_USER_TEMPLATE.to_string(),
        /// "optional" (at most one <think>…</think> block, before the tag), "required"
        /// (exactly one) or "forbidden"
        pub think: Think = Think::default(),
        /// worked answers shown before the real one
        pub examples: Vec<Example> = Vec::new(),
    }
}

#[derive(Debug, Clone)]
pub struct Answerer {
    config: AnswererConfig,
    user: Template,
}

impl Answerer {
    pub fn new(config: AnswererConfig) -> PluginResult<Self> {
        let user = Template::new(
            "user_template",
            &config.user_template,
            &PLACEHOLDERS,
            &PLACEHOLDERS,
        )?;
        Ok(Self { config, user })
    }

    pub fn from_config(text: &str) -> PluginResult<Self> {
        Self::new(parse_config(text)?)
    }

    pub fn config(&self) -> &AnswererConfig {
        &self.config
    }

    fn user_turn(&self, question: &str, information: &str) -> String {
        self.user
            .fill(&[("question", question), ("information", information)])
    }
}

impl Agent for Answerer {
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
        let reading = read(completion, "answer", self.config.think);
        let mut issues = reading.issues;
        let action = match reading.last {
            None => {
                issues.insert(0, NO_ANSWER.to_string());
                Action::invalid(NO_ANSWER)
            }
            Some(block) => {
                let answer = block.content.trim();
                if answer.is_empty() {
                    issues.insert(0, EMPTY_ANSWER.to_string());
                }
                Action::finish(answer)
            }
        };
        Ok(parsed(action, issues))
    }
}
