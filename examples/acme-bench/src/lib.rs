//! `acme-bench`: a template plugin for a new benchmark. It adds
//!
//! - `acme-bench/direct`: an agent that answers in one turn, ending with `Answer: ...`;
//! - `acme-bench/contains`: a reward, 1 when the gold answer appears in the final answer;
//! - `acme-bench/centered`: a normalizer, score minus the mean of its (task, agent) group.
//!
//! Build it with `cargo build --release`, drop `target/release/libacme_bench.so` into a
//! plugin folder, and name the components in an experiment file.
//!
//! Each config table is declared once with `config_table!`: the struct, its parser and
//! the keys `drmas plugins inspect acme-bench` lists (with their defaults and docs) all
//! come from that declaration, so `drmas check` refuses a misspelt key and the
//! description cannot drift from what the component parses. The prompt is a checked
//! template: a placeholder the agent does not fill is a config error at `drmas check`.

use drmas_plugin_api::kit::{few_shot, NoConfig, Template};
use drmas_plugin_api::{
    config_table, export_plugin, Action, Agent, EpisodeRecord, EpisodeView, Message, Normalizer,
    Parsed, PluginResult, PluginSpec, Reward, SampleRow,
};
use std::collections::HashMap;

const DEFAULT_SYSTEM_PROMPT: &str = "Answer the question. End with a line `Answer: <answer>`.";
/// The placeholders `user_template` may use, and must: a prompt without the question
/// cannot be answered.
const USER_PLACEHOLDERS: [&str; 1] = ["question"];

config_table! {
    /// One worked example, shown before the real question as an earlier exchange.
    struct Example {
        /// the question, rendered through `user_template`
        question: String,
        /// the reply the model should have given, ending with `Answer: ...`
        answer: String,
    }
}

config_table! {
    /// The `[agents.config]` table of `acme-bench/direct`.
    struct DirectConfig {
        /// the system message of every turn; "" for none
        system_prompt: String = DEFAULT_SYSTEM_PROMPT.to_string(),
        /// the user turn; {question} is the task's question
        user_template: String = "{question}".to_string(),
        /// worked examples shown before the question
        examples: Vec<Example> = Vec::new(),
    }
}

struct Direct {
    config: DirectConfig,
    user: Template,
}

impl Direct {
    fn new(config: DirectConfig) -> PluginResult<Self> {
        // Checked here, when the component is created, so a misspelt placeholder
        // fails `drmas check` instead of reaching the model as text.
        let user = Template::new(
            "user_template",
            &config.user_template,
            &USER_PLACEHOLDERS,
            &USER_PLACEHOLDERS,
        )?;
        Ok(Self { config, user })
    }
}

impl Agent for Direct {
    fn render(&self, view: &EpisodeView) -> PluginResult<Vec<Message>> {
        let c = &self.config;
        let examples = c.examples.iter().map(|e| {
            (
                self.user.fill(&[("question", &e.question)]),
                e.answer.as_str(),
            )
        });
        let mut messages = few_shot(&c.system_prompt, examples);
        messages.push(Message::user(
            self.user.fill(&[("question", &view.task.question)]),
        ));
        Ok(messages)
    }

    fn parse(&self, _view: &EpisodeView, completion: &str) -> PluginResult<Parsed> {
        Ok(match completion.rsplit_once("Answer:") {
            Some((_, answer)) if !answer.trim().is_empty() => {
                Parsed::valid(Action::finish(answer.trim()))
            }
            // No answer line: finish with the whole completion, marked invalid, so the
            // sample is penalised but the reward still sees what the model said.
            _ => Parsed::invalid(Action::finish(completion.trim()), "no `Answer:` line"),
        })
    }
}

struct Contains;

impl Reward for Contains {
    fn score(&self, episode: &EpisodeRecord) -> PluginResult<f32> {
        let gold = episode.task.answer.to_lowercase();
        let hit = episode
            .final_answer
            .as_ref()
            .is_some_and(|a| !gold.is_empty() && a.to_lowercase().contains(&gold));
        Ok(if hit { 1.0 } else { 0.0 })
    }
}

struct Centered;

impl Normalizer for Centered {
    fn advantages(&self, samples: &[SampleRow]) -> PluginResult<Vec<f32>> {
        let mut groups: HashMap<(&str, &str), (f32, usize)> = HashMap::new();
        for s in samples {
            let g = groups
                .entry((s.uid.as_str(), s.agent.as_str()))
                .or_default();
            g.0 += s.score;
            g.1 += 1;
        }
        Ok(samples
            .iter()
            .map(|s| {
                let (sum, n) = groups[&(s.uid.as_str(), s.agent.as_str())];
                s.score - sum / n as f32
            })
            .collect())
    }
}

/// The `*_with` builders parse each component's table into its config struct and
/// describe that struct's keys; `NoConfig` is the empty table, so a component without
/// settings is described as taking no keys and a stray one is refused.
fn plugin() -> PluginSpec {
    PluginSpec::new("acme-bench", env!("CARGO_PKG_VERSION"))
        .agent_with(
            "direct",
            "answers in one turn, ending with `Answer: ...`",
            Direct::new,
        )
        .reward_with(
            "contains",
            "1 when the gold answer appears in the final answer",
            |NoConfig {}| Ok(Contains),
        )
        .normalizer_with(
            "centered",
            "score minus the mean of its (task, agent) group",
            |NoConfig {}| Ok(Centered),
        )
}

export_plugin!(plugin);
