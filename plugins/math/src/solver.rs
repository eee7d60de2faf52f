//! `math/solver`: writes a solution ending in `\boxed{..}`, and tries again when the
//! verifier rejects it. Its last attempt (`max_attempts`, 2 by default: the paper's
//! solver → verifier → solver) ends the episode with its answer, unjudged.

use crate::grader::last_boxed;
use drmas_plugin_api::kit::{Template, few_shot};
use drmas_plugin_api::{
    Action, Agent, EpisodeView, Message, Parsed, PluginResult, config_table, parse_config,
};

pub const DEFAULT_SYSTEM_PROMPT: &str =
    "Solve the math problem step by step. Put your final answer in \\boxed{}.";
pub const DEFAULT_USER_TEMPLATE: &str = "{question}";
pub const DEFAULT_RETRY_TEMPLATE: &str = "{question}\n\n\
Your previous solution was judged wrong:\n\n{previous}\n\n\
Find the mistake and solve the problem again. Put your final answer in \\boxed{}.";

/// The placeholders `user_template` may use: the question, and for a refiner the
/// latest completions of its `draft` and `critic` agents.
pub const USER_PLACEHOLDERS: [&str; 3] = ["question", "draft", "critique"];
/// The placeholders `user_template` must use.
pub const USER_REQUIRED: [&str; 1] = ["question"];
/// The placeholders `retry_template` may use.
pub const RETRY_PLACEHOLDERS: [&str; 2] = ["question", "previous"];
/// The placeholders `retry_template` must use: `{previous}` is optional, so a retry can
/// be a plain resample of the question.
pub const RETRY_REQUIRED: [&str; 1] = ["question"];

/// The note on a completion without a boxed answer.
pub const NO_BOX: &str = "no \\boxed{} answer";
/// The note on a completion whose last box is empty.
pub const EMPTY_BOX: &str = "empty \\boxed{} answer";

config_table! {
    /// One few-shot turn: a question (rendered through `user_template`) and the answer
    /// the model should have given.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct Example {
        /// the question, as `{question}` renders it
        pub question: String,
        /// the reply the model should have given: a solution ending in \boxed{}
        pub answer: String,
    }
}

config_table! {
    /// The `[agents.config]` table of `math/solver`.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct SolverConfig {
        /// the system message; "" for none
        pub system_prompt: String = DEFAULT_SYSTEM_PROMPT.to_string(),
        /// the user turn; {question} is the task's question (a refiner's may also show
        /// {draft} and {critique})
        pub user_template: String = DEFAULT_USER_TEMPLATE.to_string(),
        /// the user turn after a reject: {question}, and optionally {previous} (the
        /// rejected solution); "{question}" alone makes the retry a plain resample
        pub retry_template: String = DEFAULT_RETRY_TEMPLATE.to_string(),
        /// few-shot turns after the system message
        pub examples: Vec<Example> = Vec::new(),
        /// the agent the solution is handed to; "" to finish without a verifier
        pub verifier: String = "verifier".to_string(),
        /// attempts per episode: the last one finishes with its answer instead of going
        /// to the verifier (2: solver → verifier → solver, the paper's team); 0 for no
        /// limit (the workflow's max_turns and max_loops end the episode)
        pub max_attempts: u32 = 2,
        /// as a refiner: the agent whose latest completion {draft} shows ("" for none)
        pub draft: String = String::new(),
        /// as a refiner: the agent whose latest completion {critique} shows ("" for none)
        pub critic: String = String::new(),
    }
}

#[derive(Debug, Clone)]
pub struct Solver {
    config: SolverConfig,
    user: Template,
    retry: Template,
}

impl Solver {
    pub fn new(config: SolverConfig) -> PluginResult<Self> {
        let user = Template::new(
            "user_template",
            &config.user_template,
            &USER_PLACEHOLDERS,
            &USER_REQUIRED,
        )?;
        let retry = Template::new(
            "retry_template",
            &config.retry_template,
            &RETRY_PLACEHOLDERS,
            &RETRY_REQUIRED,
        )?;
        Ok(Self {
            config,
            user,
            retry,
        })
    }

    pub fn from_config(text: &str) -> PluginResult<Self> {
        Self::new(parse_config(text)?)
    }

    pub fn config(&self) -> &SolverConfig {
        &self.config
    }

    /// Whether the turn in `view` is this solver's last allowed attempt.
    fn is_last_attempt(&self, view: &EpisodeView) -> bool {
        let max = self.config.max_attempts;
        let before = view
            .transcript
            .iter()
            .filter(|t| t.agent == view.agent)
            .count();
        max > 0 && before + 1 >= max as usize
    }

    /// The solver's previous completion when the last turn is the verifier's rejection.
    fn rejected_attempt<'v>(&self, view: &'v EpisodeView) -> Option<&'v str> {
        if self.config.verifier.is_empty() {
            return None;
        }
        let last = view.transcript.last()?;
        let rejected = last.agent.as_str() == self.config.verifier
            && matches!(last.action, Action::Handoff { .. });
        if !rejected {
            return None;
        }
        Some(crate::view::latest_completion(view, &view.agent))
    }
}

impl Agent for Solver {
    /// The verifier it hands off to (none when `verifier = ""`), and the agents whose
    /// completions a refiner reads.
    fn linked_agents(&self) -> Vec<String> {
        let c = &self.config;
        [&c.verifier, &c.draft, &c.critic]
            .into_iter()
            .filter(|a| !a.is_empty())
            .cloned()
            .collect()
    }

    fn render(&self, view: &EpisodeView) -> PluginResult<Vec<Message>> {
        let c = &self.config;
        let examples = c.examples.iter().map(|e| {
            (
                self.user
                    .fill(&[("question", &e.question), ("draft", ""), ("critique", "")]),
                e.answer.as_str(),
            )
        });
        let mut messages = few_shot(&c.system_prompt, examples);
        let question = view.task.question.as_str();
        let latest = |agent: &str| crate::view::latest_completion(view, agent);
        let user = match self.rejected_attempt(view) {
            Some(previous) => self
                .retry
                .fill(&[("question", question), ("previous", previous)]),
            None => self.user.fill(&[
                ("question", question),
                ("draft", latest(&c.draft)),
                ("critique", latest(&c.critic)),
            ]),
        };
        messages.push(Message::user(user));
        Ok(messages)
    }

    fn parse(&self, view: &EpisodeView, completion: &str) -> PluginResult<Parsed> {
        let boxed = last_boxed(completion);
        let note = match &boxed {
            None => Some(NO_BOX),
            Some(b) if b.is_empty() => Some(EMPTY_BOX),
            Some(_) => None,
        };
        if self.is_last_attempt(view) && !self.config.verifier.is_empty() {
            // The last attempt is the answer, boxed or not (an empty answer then scores
            // as wrong, unless the reward falls back to an earlier box).
            let finish = Action::Finish {
                answer: boxed.unwrap_or_default(),
            };
            return Ok(match note {
                None => Parsed::valid(finish),
                Some(note) => Parsed::invalid(finish, note),
            });
        }
        let verifier = self.config.verifier.as_str();
        Ok(match (note, verifier.is_empty()) {
            (None, false) => Parsed::valid(Action::Handoff {
                to: verifier.into(),
            }),
            (Some(note), false) => Parsed::invalid(
                Action::Handoff {
                    to: verifier.into(),
                },
                note,
            ),
            (None, true) => Parsed::valid(Action::Finish {
                answer: boxed.unwrap_or_default(),
            }),
            (Some(note), true) => Parsed::invalid(
                Action::Invalid {
                    reason: note.into(),
                },
                note,
            ),
        })
    }
}
