//! `acme-bench`: a template plugin for a new benchmark. It adds
//!
//! - `acme-bench/direct`: an agent that answers in one turn, ending with `Answer: ...`;
//! - `acme-bench/contains`: a reward, 1 when the gold answer appears in the final answer;
//! - `acme-bench/centered`: a normalizer, score minus the mean of its (task, agent) group.
//!
//! Build it with `cargo build --release`, drop `target/release/libacme_bench.so` into a
//! plugin folder, and name the components in an experiment file. Each component
//! describes its config keys, so `drmas plugins inspect acme-bench` lists them and
//! `drmas check` refuses a misspelt one.

use drmas_plugin_api::{
    export_plugin, parse_config, Action, Agent, ConfigKey, EpisodeRecord, EpisodeView, Message,
    Normalizer, Parsed, PluginResult, PluginSpec, Reward, SampleRow,
};
use serde::Deserialize;
use std::collections::HashMap;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DirectConfig {
    #[serde(default = "default_system_prompt")]
    system_prompt: String,
}

fn default_system_prompt() -> String {
    "Answer the question. End with a line `Answer: <answer>`.".to_string()
}

struct Direct {
    config: DirectConfig,
}

impl Agent for Direct {
    fn render(&self, view: &EpisodeView) -> PluginResult<Vec<Message>> {
        Ok(vec![
            Message::system(self.config.system_prompt.clone()),
            Message::user(view.task.question.as_str()),
        ])
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

/// The config of a component without settings: an empty table, so a stray key is
/// refused instead of silently ignored (such a component has no keys to describe).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NoConfig {}

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

fn plugin() -> PluginSpec {
    PluginSpec::new("acme-bench", env!("CARGO_PKG_VERSION"))
        .agent(
            "direct",
            "answers in one turn, ending with `Answer: ...`",
            |cfg| {
                Ok(Direct {
                    config: parse_config(cfg)?,
                })
            },
        )
        .config_keys([ConfigKey::optional(
            "system_prompt",
            "string",
            // The default as TOML text: a quoted string (Debug quoting is TOML's here).
            &format!("{:?}", default_system_prompt()),
            "the system message of every turn",
        )])
        .reward(
            "contains",
            "1 when the gold answer appears in the final answer",
            |cfg| {
                parse_config::<NoConfig>(cfg)?;
                Ok(Contains)
            },
        )
        .normalizer(
            "centered",
            "score minus the mean of its (task, agent) group",
            |cfg| {
                parse_config::<NoConfig>(cfg)?;
                Ok(Centered)
            },
        )
}

export_plugin!(plugin);
