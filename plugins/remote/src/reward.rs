//! `remote/env-reward`: the environment's own rewards as a drmas reward. An environment
//! that scores its steps (an OpenEnv server's `reward`) returns a reward with each tool
//! call's result; the host keeps it on the turn (`TurnRecord::tool_reward`), and this
//! component reduces them to the episode's score or gives each turn its own.

use drmas_plugin_api::{EpisodeRecord, PluginError, PluginResult, Reward, config_table};

config_table! {
    /// `[[rewards]] config` of `remote/env-reward`.
    #[derive(Debug, Clone)]
    pub struct EnvRewardConfig {
        /// how the step rewards make the episode's score: "sum", "last" or "max" (an
        /// episode without any scores 0)
        pub reduce: String = "sum".to_string(),
        /// true: each turn's sample gets the reward of its own tool call (0 for a turn
        /// that called none), so the agent that acted is scored for what it did; false:
        /// every turn gets the episode's score, the team reward
        pub per_turn: bool = false,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reduce {
    Sum,
    Last,
    Max,
}

#[derive(Debug, Clone)]
pub struct EnvReward {
    reduce: Reduce,
    per_turn: bool,
}

impl EnvReward {
    pub fn new(config: EnvRewardConfig) -> PluginResult<Self> {
        let reduce = match config.reduce.as_str() {
            "sum" => Reduce::Sum,
            "last" => Reduce::Last,
            "max" => Reduce::Max,
            other => {
                return Err(PluginError::config(format!(
                    "reduce: `{other}` is not one of \"sum\", \"last\", \"max\""
                )));
            }
        };
        Ok(Self {
            reduce,
            per_turn: config.per_turn,
        })
    }
}

impl Reward for EnvReward {
    fn score(&self, episode: &EpisodeRecord) -> PluginResult<f32> {
        let mut rewards = episode
            .transcript
            .iter()
            .filter_map(|t| t.tool_reward.map(|r| r.0));
        let score = match self.reduce {
            Reduce::Sum => rewards.sum(),
            Reduce::Last => rewards.next_back().unwrap_or(0.0),
            Reduce::Max => rewards.reduce(f64::max).unwrap_or(0.0),
        };
        Ok(score as f32)
    }

    fn turn_scores(&self, episode: &EpisodeRecord) -> PluginResult<Option<Vec<f32>>> {
        Ok(self.per_turn.then(|| {
            episode
                .transcript
                .iter()
                .map(|t| t.tool_reward.map_or(0.0, |r| r.0) as f32)
                .collect()
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use drmas_plugin_api::{RewardValue, TurnRecord, parse_config};

    fn record(rewards: &[Option<f64>]) -> EpisodeRecord {
        EpisodeRecord {
            transcript: rewards
                .iter()
                .enumerate()
                .map(|(i, r)| TurnRecord {
                    turn: i as u32,
                    tool_reward: r.map(RewardValue),
                    ..TurnRecord::default()
                })
                .collect(),
            ..EpisodeRecord::default()
        }
    }

    fn reward(text: &str) -> EnvReward {
        EnvReward::new(parse_config(text).unwrap()).unwrap()
    }

    #[test]
    fn the_step_rewards_reduce_to_the_episode_score() {
        let r = record(&[None, Some(0.25), None, Some(-1.0), Some(0.5)]);
        assert_eq!(reward("").score(&r).unwrap(), -0.25);
        assert_eq!(reward("reduce = \"last\"").score(&r).unwrap(), 0.5);
        assert_eq!(reward("reduce = \"max\"").score(&r).unwrap(), 0.5);
        // No step scored: 0 whatever the reduction.
        for how in ["sum", "last", "max"] {
            let none = record(&[None, None]);
            assert_eq!(
                reward(&format!("reduce = \"{how}\"")).score(&none).unwrap(),
                0.0
            );
        }
    }

    #[test]
    fn per_turn_gives_each_turn_its_own_step_reward() {
        let r = record(&[None, Some(1.0), Some(0.0)]);
        assert_eq!(reward("").turn_scores(&r).unwrap(), None);
        assert_eq!(
            reward("per_turn = true").turn_scores(&r).unwrap(),
            Some(vec![0.0, 1.0, 0.0])
        );
    }

    #[test]
    fn an_unknown_reduction_is_refused_with_the_choices() {
        let err = EnvReward::new(parse_config("reduce = \"mean\"").unwrap()).unwrap_err();
        assert_eq!(
            err.message(),
            "reduce: `mean` is not one of \"sum\", \"last\", \"max\""
        );
    }
}
