//! `math/verifier`: reads the latest solution and answers `<verify>approve</verify>`
//! (the episode ends with the solver's boxed answer) or `<verify>reject</verify>` (the
//! solver tries again). An unreadable verdict counts as approval but is invalid
//! (docs/math.md).

use crate::grader::last_boxed;
use crate::template::{few_shot, fill, require};
use drmas_plugin_api::{Action, Agent, EpisodeView, Message, Parsed, PluginResult, parse_config};
use serde::Deserialize;

pub const DEFAULT_SYSTEM_PROMPT: &str = "You check solutions to math problems. \
Read the problem and the proposed solution carefully. If the final answer is correct, \
reply <verify>approve</verify>; if it is wrong, reply <verify>reject</verify>.";
pub const DEFAULT_USER_TEMPLATE: &str = "Problem:\n{question}\n\n\
Proposed solution:\n{solution}\n\n\
Is the final answer correct? Reply <verify>approve</verify> or <verify>reject</verify>.";

/// The `[agents.config]` table of `math/verifier`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct VerifierConfig {
    /// The system message; empty = no system message.
    pub system_prompt: String,
    /// The user turn: `{question}`, and `{solution}` = the solver's latest completion.
    pub user_template: String,
    /// The agent whose solution is checked and who gets it back on reject.
    pub solver: String,
    /// Worked verdicts shown before the real one, as user/assistant turns (small
    /// models need them to answer in the tag format at all).
    pub examples: Vec<VerifierExample>,
}

/// One worked verdict: the problem, a proposed solution, and the reply to it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VerifierExample {
    pub question: String,
    pub solution: String,
    /// The assistant's reply, e.g. `<verify>approve</verify>`.
    pub reply: String,
}

impl Default for VerifierConfig {
    fn default() -> Self {
        Self {
            system_prompt: DEFAULT_SYSTEM_PROMPT.to_string(),
            user_template: DEFAULT_USER_TEMPLATE.to_string(),
            solver: "solver".to_string(),
            examples: Vec::new(),
        }
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
    // ASCII lower-casing keeps byte offsets, so positions index `completion` too.
    let lower = completion.to_ascii_lowercase();
    let tags = verify_tags(&lower);
    let pair = tags.iter().enumerate().rev().find_map(|(i, open)| {
        if open.closing {
            return None;
        }
        tags[i + 1..]
            .iter()
            .find(|t| t.closing)
            .map(|close| (open.end, close.start))
    });
    let Some((from, to)) = pair else {
        return Verdict::Missing;
    };
    let content = completion[from..to].trim();
    match content.to_ascii_lowercase().as_str() {
        "approve" => Verdict::Approve,
        "reject" => Verdict::Reject,
        _ => Verdict::Other(content.to_string()),
    }
}

struct Tag {
    start: usize,
    end: usize,
    closing: bool,
}

/// Every `<verify>` and `</verify>` in `lower` (already lower-cased), in order.
fn verify_tags(lower: &str) -> Vec<Tag> {
    let mut tags = Vec::new();
    let mut from = 0;
    while let Some(at) = lower[from..].find('<') {
        let start = from + at;
        from = start + 1;
        let mut rest = lower[start + 1..].trim_start();
        let closing = rest.starts_with('/');
        if closing {
            rest = rest[1..].trim_start();
        }
        let Some(rest) = rest.strip_prefix("verify") else {
            continue;
        };
        let rest_trimmed = rest.trim_start();
        if rest_trimmed.starts_with('>') {
            let end = lower.len() - rest_trimmed.len() + 1;
            tags.push(Tag {
                start,
                end,
                closing,
            });
            from = end;
        }
    }
    tags
}

#[derive(Debug, Clone)]
pub struct Verifier {
    config: VerifierConfig,
}

impl Verifier {
    pub fn new(config: VerifierConfig) -> PluginResult<Self> {
        require(
            "user_template",
            &config.user_template,
            &["question", "solution"],
        )?;
        Ok(Self { config })
    }

    pub fn from_config(text: &str) -> PluginResult<Self> {
        Self::new(parse_config(text)?)
    }

    pub fn config(&self) -> &VerifierConfig {
        &self.config
    }

    /// The solver's latest completion ("" before the solver has acted).
    fn latest_solution<'v>(&self, view: &'v EpisodeView) -> &'v str {
        view.transcript
            .iter()
            .rev()
            .find(|t| t.agent.as_str() == self.config.solver)
            .map_or("", |t| t.completion.as_str())
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
            let user = fill(
                &c.user_template,
                &[("question", &e.question), ("solution", &e.solution)],
            );
            (user, e.reply.as_str())
        });
        let mut messages = few_shot(&c.system_prompt, examples);
        messages.push(Message::user(fill(
            &c.user_template,
            &[
                ("question", view.task.question.as_str()),
                ("solution", self.latest_solution(view)),
            ],
        )));
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

/// At most `max` characters of `s`, with `…` when cut.
fn shorten(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &s[..at]),
        None => s.to_string(),
    }
}
