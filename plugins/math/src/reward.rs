//! `math/boxed` and `math/gsm8k`: 1.0 when the episode's answer matches the gold
//! answer, else 0.0.

use crate::grader::{is_equiv, last_boxed, last_number, normalize, numbers_close, numeric_value};
use drmas_plugin_api::kit::NoConfig;
use drmas_plugin_api::{EpisodeRecord, PluginResult, Reward, parse_config};

/// The gold answer of a MATH-style task: the last `\boxed{}` of `answer` if it has
/// one (a full solution), else `answer` itself.
pub fn gold_answer(answer: &str) -> String {
    last_boxed(answer).unwrap_or_else(|| answer.trim().to_string())
}

/// The answer an episode gave: its final answer (unwrapped if it is itself boxed), or,
/// when no agent finished, the last `\boxed{}` anywhere in the transcript.
pub fn episode_answer(episode: &EpisodeRecord) -> Option<String> {
    match episode.final_answer.as_ref() {
        Some(answer) => Some(last_boxed(answer).unwrap_or_else(|| answer.to_string())),
        None => episode
            .transcript
            .iter()
            .rev()
            .find_map(|t| last_boxed(&t.completion)),
    }
}

/// `math/boxed`: [`is_equiv`] of the episode's answer and the (unboxed) gold answer.
#[derive(Debug, Clone, Default)]
pub struct BoxedReward;

impl BoxedReward {
    /// Takes no options: any key in its config table is an error.
    pub fn from_config(text: &str) -> PluginResult<Self> {
        let NoConfig {} = parse_config(text)?;
        Ok(Self)
    }
}

impl Reward for BoxedReward {
    fn score(&self, episode: &EpisodeRecord) -> PluginResult<f32> {
        let gold = gold_answer(&episode.task.answer);
        let correct = episode_answer(episode).is_some_and(|a| is_equiv(&a, &gold));
        Ok(if correct { 1.0 } else { 0.0 })
    }
}

/// `math/gsm8k`: numeric equality with the number after `####` in the gold answer.
#[derive(Debug, Clone, Default)]
pub struct Gsm8kReward;

impl Gsm8kReward {
    /// Takes no options: any key in its config table is an error.
    pub fn from_config(text: &str) -> PluginResult<Self> {
        let NoConfig {} = parse_config(text)?;
        Ok(Self)
    }
}

/// The gold text of a GSM8K answer: what follows the last `####`, else the whole
/// answer (unboxed if boxed).
pub fn gsm8k_gold(answer: &str) -> String {
    match answer.rsplit_once("####") {
        Some((_, tail)) => tail.trim().to_string(),
        None => gold_answer(answer),
    }
}

/// The number a piece of answer text stands for: commas dropped, then a value of the
/// grader's grammar (`18`, `\$18.50`, `\frac{1}{2}`, `5 dollars`), else its last number.
pub fn gsm8k_number(text: &str) -> Option<f64> {
    let text = text.replace(',', "");
    numeric_value(&normalize(&text)).or_else(|| last_number(&text))
}

/// What the episode predicted, as text: the last `\boxed{}` of the final answer, or of
/// the transcript when no agent finished; else the final answer (or the last
/// completion) itself, whose last number [`gsm8k_number`] then takes.
pub fn gsm8k_prediction(episode: &EpisodeRecord) -> Option<String> {
    let text = match episode.final_answer.as_ref() {
        Some(answer) => answer.as_str(),
        None => {
            if let Some(boxed) = episode
                .transcript
                .iter()
                .rev()
                .find_map(|t| last_boxed(&t.completion))
            {
                return Some(boxed);
            }
            episode.transcript.last()?.completion.as_str()
        }
    };
    Some(last_boxed(text).unwrap_or_else(|| text.to_string()))
}

impl Reward for Gsm8kReward {
    fn score(&self, episode: &EpisodeRecord) -> PluginResult<f32> {
        let gold = gsm8k_gold(&episode.task.answer);
        let Some(prediction) = gsm8k_prediction(episode) else {
            return Ok(0.0);
        };
        let correct = match (gsm8k_number(&gold), gsm8k_number(&prediction)) {
            (Some(g), Some(p)) => numbers_close(p, g),
            (Some(_), None) => false,
            // A gold answer without a number: fall back to the general grader.
            (None, _) => is_equiv(&prediction, &gold),
        };
        Ok(if correct { 1.0 } else { 0.0 })
    }
}
