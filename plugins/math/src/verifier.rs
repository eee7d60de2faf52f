//! `math/verifier`: reads the latest solution and answers `<verify>approve</verify>`
//! (the episode ends with the solver's boxed answer) or `<verify>reject</verify>` (the
//! solver tries again). An unreadable verdict counts as approval but is invalid
//! (docs/math.md).

use crate::grader::last_boxed;
use drmas_plugin_api::kit::{Template, few_shot, last_content, shorten};
use drmas_plugin_api::{
    Action, Agent, EpisodeView, Message, Parsed, PluginResult, config_table, parse_config,
};

pub const DEFAULT_SYSTEM_PROMPT: &str = "You check solutions to math problems. \
Read the problem and the proposed solution carefully. If the final answer is correct, \
reply <verify>approve</verify>; if it is wrong, reply <verify>reject</verify>.";
pub const DEFAULT_USER_TEMPLATE: &str = "Problem:\n{question}\n\n\
Proposed solution:\n{solution}\n\n\
Is the final answer correct? Reply <verify>approve</verify> or <verify>reject</verify>.";

/// The placeholders `user_template` may use (and must).
pub const PLACEHOLDERS: [&str; 2] = ["question", "solution"];

config_table! {
    /// The `[agents.config]` table of `math/verifier`.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct VerifierConfig {
        /// the system message; "" for none
        pub system_prompt: String = DEFAULT_SYSTEM_PROMPT.to_string(),
        /// the user turn: {question} and {solution} (the solver's latest completion)
        pub user_template: String = DEFAULT_USER_TEMPLATE.to_string(),
        /// the agent whose solution is checked and who gets it back on reject
        pub solver: String = "solver".to_string(),
        /// worked verdicts shown before the real one (small models need them to answer
        /// in the tag format at all)
        pub examples: Vec<VerifierExample> = Vec::new(),
    }
}

config_table! {
    /// One worked verdict: the problem, a proposed solution, and the reply to it.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct VerifierExample {
        /// the problem, as `{question}` renders it
        pub question: String,
        /// the proposed solution, as `{solution}` renders it
        pub solution: String,
        /// the assistant's reply, e.g. `<verify>approve</verify>`
        pub reply: String,
    }
}

/// What a verifier completion says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Approve,
    Reject,
    /// A `<verify>..</verify>` tag with something else inside.
    Other(String),
    /// No complete `<verify>..</verify>` tag.
    Missing,
}

/// The verdict of the last complete `<verify>..</verify>` tag in `completion`.
/// Tags and verdicts are case-insensitive; whitespace inside the tag and around the
/// verdict is ignored (`< Verify > Approve </verify>`).
pub fn verdict(completion: &str) -> Verdict {
    let Some(content) = last_content(completion, "verify") else {
        return Verdict::Missing;
    };
    let content = content.trim();
    match content.to_ascii_lowercase().as_str() {
        "approve" => Verdict::Approve,
        "reject" => Verdict::Reject,
        _ => Verdict::Other(content.to_string()),
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
        Ok(Self { config, user })
    }

    pub fn from_config(text: &str) -> PluginResult<Self> {
        Self::new(parse_config(text)?)
    }

    pub fn config(&self) -> &VerifierConfig {
        &self.config
    }

    /// The solver's latest completion ("" before the solver has acted).
    fn latest_solution<'v>(&self, view: &'v EpisodeView) -> &'v str {
        crate::view::latest_completion(view, &self.config.solver)
    }

    fn finish(&self, view: &EpisodeView) -> Action {
        Action::Finish {
            answer: last_boxed(self.latest_solution(view)).unwrap_or_default(),
        }
    }
}

impl Agent for Verifier {
    /// The solver whose answer it judges and hands a rejection back to.
    fn linked_agents(&self) -> Vec<String> {
        vec![self.config.solver.clone()]
    }

    fn render(&self, view: &EpisodeView) -> PluginResult<Vec<Message>> {
        let c = &self.config;
        let examples = c.examples.iter().map(|e| {
            let user = self
                .user
                .fill(&[("question", &e.question), ("solution", &e.solution)]);
            (user, e.reply.as_str())
        });
        let mut messages = few_shot(&c.system_prompt, examples);
        messages.push(Message::user(self.user.fill(&[
            ("question", view.task.question.as_str()),
            ("solution", self.latest_solution(view)),
        ])));
        Ok(messages)
    }

    fn parse(&self, view: &EpisodeView, completion: &str) -> PluginResult<Parsed> {
        Ok(match verdict(completion) {
            Verdict::Approve => Parsed::valid(self.finish(view)),
            Verdict::Reject => Parsed::valid(Action::Handoff {
                to: self.config.solver.as_str().into(),
            }),
            Verdict::Other(content) => Parsed::invalid(
                self.finish(view),
                format!(
                    "verdict `{}` is neither approve nor reject; counted as approve",
                    shorten(&content, 40)
                ),
            ),
            Verdict::Missing => Parsed::invalid(
                self.finish(view),
                "no <verify>approve</verify> or <verify>reject</verify>; counted as approve",
            ),
        })
    }
}
