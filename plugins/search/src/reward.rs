//! `search/em` and `search/f1`: the episode's answer against every gold alias of its
//! task, after SQuAD normalization ([`crate::answer`]).

use crate::answer::{best_token_f1, exact_match_any, extract_answer};
use drmas_plugin_api::{
    EpisodeRecord, PluginError, PluginResult, Reward, Task, kit::NoConfig, parse_config,
};
use serde_json::Value;

/// The gold aliases of `task`: every entry of `meta["answers"]` (an array of strings;
/// numbers count by their JSON text; a lone string is one alias), then `task.answer`;
/// blank ones dropped, duplicates dropped, in that order. An alias is never split: a
/// gold answer "Paris, France" is one alias.
pub fn gold_aliases(task: &Task) -> PluginResult<Vec<String>> {
    let mut aliases: Vec<String> = Vec::new();
    let mut add = |alias: String| {
        if !alias.trim().is_empty() && !aliases.contains(&alias) {
            aliases.push(alias);
        }
    };
    match task.meta.get("answers") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) => add(s.clone()),
        Some(Value::Array(items)) => {
            for (i, item) in items.iter().enumerate() {
                match item {
                    Value::String(s) => add(s.clone()),
                    Value::Number(n) => add(n.to_string()),
                    other => {
                        return Err(PluginError::input(format!(
                            "task `{}` ({}): answers[{i}] is {other}; the gold answers \
                             must be strings",
                            task.id, task.source
                        )));
                    }
                }
            }
        }
        Some(other) => {
            return Err(PluginError::input(format!(
                "task `{}` ({}): answers is {other}; expected an array of strings",
                task.id, task.source
            )));
        }
    }
    add(task.answer.clone());
    Ok(aliases)
}

/// What the episode predicted: its final answer, or the content of the last
/// `<answer>…</answer>` in it when it has one; `None` when no agent finished.
pub fn prediction(episode: &EpisodeRecord) -> Option<&str> {
    episode.final_answer.as_deref().map(extract_answer)
}

/// `search/em`: 1.0 when the prediction equals any gold alias after SQuAD
/// normalization, else 0.0 (also when no agent finished).
#[derive(Debug, Clone, Default)]
pub struct ExactMatch;

impl ExactMatch {
    /// Takes no options: any key in its config table is an error.
    pub fn from_config(text: &str) -> PluginResult<Self> {
        let NoConfig {} = parse_config(text)?;
        Ok(Self)
    }
}

impl Reward for ExactMatch {
    fn score(&self, episode: &EpisodeRecord) -> PluginResult<f32> {
        let aliases = gold_aliases(&episode.task)?;
        let hit = prediction(episode).is_some_and(|p| exact_match_any(p, &aliases));
        Ok(if hit { 1.0 } else { 0.0 })
    }
}

/// `search/f1`: the best SQuAD token F1 of the prediction over the gold aliases; 0.0
/// when no agent finished.
#[derive(Debug, Clone, Default)]
pub struct TokenF1;

impl TokenF1 {
    /// Takes no options: any key in its config table is an error.
    pub fn from_config(text: &str) -> PluginResult<Self> {
        let NoConfig {} = parse_config(text)?;
        Ok(Self)
    }
}

impl Reward for TokenF1 {
    fn score(&self, episode: &EpisodeRecord) -> PluginResult<f32> {
        let aliases = gold_aliases(&episode.task)?;
        let f1 = prediction(episode).map_or(0.0, |p| best_token_f1(p, &aliases));
        Ok(f1 as f32)
    }
}
