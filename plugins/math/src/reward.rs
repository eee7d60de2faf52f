//! `math/boxed` and `math/gsm8k`: 1.0 when the episode's answer matches the gold
//! answer, else 0.0. `math/verdict`: 1.0 for a verifier turn whose verdict matches the
//! judged solution's correctness, for a reward scoped to the verifier.

use crate::grader::{is_equiv, last_boxed, last_number, normalize, numbers_close, numeric_value};
use crate::judged::{Roles, judgements};
use drmas_plugin_api::kit::NoConfig;
use drmas_plugin_api::{EpisodeRecord, PluginResult, Reward, config_table, parse_config};

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

/// [`episode_answer`], and when that is empty (the last attempt boxed nothing), the last
/// non-empty `\boxed{}` of any earlier turn.
pub fn episode_answer_or_earlier(episode: &EpisodeRecord) -> Option<String> {
    match episode_answer(episode) {
        Some(a) if !a.trim().is_empty() => Some(a),
        other => episode
            .transcript
            .iter()
            .rev()
            .filter_map(|t| last_boxed(&t.completion))
            .find(|b| !b.trim().is_empty())
            .or(other),
    }
}

config_table! {
    /// The `[rewards.config]` table of `math/boxed`.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct BoxedConfig {
        /// when the final answer is empty (the last attempt boxed nothing), score the
        /// last boxed answer of an earlier turn instead (off: the latest output is
        /// scored, as in the paper)
        pub fallback_to_earlier: bool = false,
    }
}

/// `math/boxed`: [`is_equiv`] of the episode's answer and the (unboxed) gold answer.
#[derive(Debug, Clone, Default)]
pub struct BoxedReward {
    config: BoxedConfig,
}

impl BoxedReward {
    pub fn new(config: BoxedConfig) -> Self {
        Self { config }
    }

    pub fn from_config(text: &str) -> PluginResult<Self> {
        Ok(Self::new(parse_config(text)?))
    }
}

impl Reward for BoxedReward {
    fn score(&self, episode: &EpisodeRecord) -> PluginResult<f32> {
        let gold = gold_answer(&episode.task.answer);
        let answer = if self.config.fallback_to_earlier {
            episode_answer_or_earlier(episode)
        } else {
            episode_answer(episode)
        };
        let correct = answer.is_some_and(|a| is_equiv(&a, &gold));
        Ok(if correct { 1.0 } else { 0.0 })
    }
}

/// `math/verdict`: per verifier turn, 1 when its verdict agrees with the correctness of
/// the solver attempt it judged (approve a right answer, reject a wrong one), else 0
/// (an unreadable verdict included); every other turn 0. The episode's score is the
/// mean over its verifier turns (0 without one). Meant for `agents = ["verifier"]`.
#[derive(Debug, Clone, Default)]
pub struct VerdictReward {
    roles: Roles,
}

impl VerdictReward {
    pub fn new(roles: Roles) -> Self {
        Self { roles }
    }

    pub fn from_config(text: &str) -> PluginResult<Self> {
        Ok(Self::new(parse_config(text)?))
    }
}

impl Reward for VerdictReward {
    fn score(&self, episode: &EpisodeRecord) -> PluginResult<f32> {
        let js = judgements(episode, &self.roles);
        if js.is_empty() {
            return Ok(0.0);
        }
        Ok(js.iter().filter(|j| j.agrees()).count() as f32 / js.len() as f32)
    }

    fn turn_scores(&self, episode: &EpisodeRecord) -> PluginResult<Option<Vec<f32>>> {
        let mut scores = vec![0.0; episode.transcript.len()];
        for j in judgements(episode, &self.roles) {
            scores[j.turn] = if j.agrees() { 1.0 } else { 0.0 };
        }
        Ok(Some(scores))
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
