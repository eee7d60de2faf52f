//! `math/critic`: reads the latest solution of its `solver` and writes a critique of it
//! in words (no verdict, no answer), then hands off to `next` (a refiner: `math/solver`
//! with `draft` and `critic` set, whose prompt shows both). The critic of the four-agent
//! team solver → critic → refiner → verifier (docs/math.md).

use crate::verifier::VerifierExample;
use drmas_plugin_api::kit::{Template, few_shot};
use drmas_plugin_api::{
    Action, Agent, EpisodeView, Message, Parsed, PluginResult, config_table, parse_config,
};

pub const DEFAULT_SYSTEM_PROMPT: &str = "You review solutions to math problems. Point out \
any mistake in the proposed solution in one or two sentences; do not give the answer.";
pub const DEFAULT_USER_TEMPLATE: &str = "Problem:\n{question}\n\nProposed solution:\n{solution}";

/// The placeholders `user_template` may use (and must).
pub const PLACEHOLDERS: [&str; 2] = ["question", "solution"];

config_table! {
    /// The `[agents.config]` table of `math/critic`.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct CriticConfig {
        /// the system message; "" for none
        pub system_prompt: String = DEFAULT_SYSTEM_PROMPT.to_string(),
        /// the user turn: {question} and {solution} (the solver's latest completion)
        pub user_template: String = DEFAULT_USER_TEMPLATE.to_string(),
        /// the agent whose solution is reviewed
        pub solver: String = "solver".to_string(),
        /// the agent the critique is handed to
        pub next: String = "refiner".to_string(),
        /// worked critiques shown before the real one: { question, solution, reply },
        /// as the verifier's examples
        pub examples: Vec<VerifierExample> = Vec::new(),
    }
}

#[derive(Debug, Clone)]
pub struct Critic {
    config: CriticConfig,
    user: Template,
}

impl Critic {
    pub fn new(config: CriticConfig) -> PluginResult<Self> {
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
}

impl Agent for Critic {
    /// The solver it reviews and the agent it hands the critique to.
    fn linked_agents(&self) -> Vec<String> {
        vec![self.config.solver.clone(), self.config.next.clone()]
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
        let solution = crate::view::latest_completion(view, &c.solver);
        messages.push(Message::user(self.user.fill(&[
            ("question", view.task.question.as_str()),
            ("solution", solution),
        ])));
        Ok(messages)
    }

    /// Any critique in words hands off to `next`; an empty one is invalid (and still
    /// hands off, so the team's episode goes on).
    fn parse(&self, _view: &EpisodeView, completion: &str) -> PluginResult<Parsed> {
        let to = Action::Handoff {
            to: self.config.next.as_str().into(),
        };
        Ok(if completion.trim().is_empty() {
            Parsed::invalid(to, "an empty critique")
        } else {
            Parsed::valid(to)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use drmas_plugin_api::{Task, TurnRecord as Turn};

    fn view(transcript: Vec<Turn>) -> EpisodeView {
        EpisodeView {
            agent: "critic".into(),
            task: Task {
                id: "t".into(),
                question: "What is 2 + 2?".into(),
                ..Task::default()
            },
            transcript,
            ..EpisodeView::default()
        }
    }

    #[test]
    fn it_reviews_the_latest_solution_and_hands_off_to_the_refiner() {
        let critic = Critic::from_config("").unwrap();
        let turn = |agent: &str, completion: &str| Turn {
            agent: agent.into(),
            completion: completion.into(),
            ..Turn::default()
        };
        let v = view(vec![turn("solver", "\\boxed{5}"), turn("other", "x")]);
        let messages = critic.render(&v).unwrap();
        let last = &messages.last().unwrap().content;
        assert_eq!(
            last.as_str(),
            "Problem:\nWhat is 2 + 2?\n\nProposed solution:\n\\boxed{5}"
        );
        let parsed = critic.parse(&v, "2 + 2 is 4, not 5.").unwrap();
        assert_eq!(
            parsed.action,
            Action::Handoff {
                to: "refiner".into()
            }
        );
        assert!(parsed.valid);
        let parsed = critic.parse(&v, "  ").unwrap();
        assert!(!parsed.valid);
        assert_eq!(critic.linked_agents(), ["solver", "refiner"]);
        let e = Critic::from_config("user_template = \"{question}\"").unwrap_err();
        assert!(e.to_string().contains("solution"), "{e}");
    }
}
