//! `acme-bench`: a template plugin for a new benchmark. It adds
//!
//! - `acme-bench/direct`: an agent that answers in one turn, ending with `Answer: ...`;
//! - `acme-bench/contains`: a reward, 1 when the gold answer appears in the final answer;
//! - `acme-bench/centered`: a normalizer, score minus the mean of its (task, agent) group.
//!
//! Build it with `cargo build --release`, drop `target/release/libacme_bench.so` into a
//! plugin folder, and name the components in an experiment file.

use drmas_plugin_api::{
    export_plugin, parse_config, Action, Agent, EpisodeRecord, EpisodeView, Message, Normalizer,
    Parsed, PluginResult, PluginSpec, Reward, SampleRow,
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
            Some((_, answer)) if !answer.trim().is_empty() => Parsed::valid(Action::Finish {
                answer: answer.trim().into(),
            }),
            // No answer line: finish with the whole completion, marked invalid.
            _ => Parsed::invalid(
                Action::Finish {
                    answer: completion.trim().into(),
                },
                "no `Answer:` line",
            ),
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
        .reward(
            "contains",
            "1 when the gold answer appears in the final answer",
            |_| Ok(Contains),
        )
        .normalizer(
            "centered",
            "score minus the mean of its (task, agent) group",
            |_| Ok(Centered),
        )
}

export_plugin!(plugin);
