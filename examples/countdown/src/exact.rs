//! `countdown/exact`: the reward. 1 when the final answer is an expression that uses
//! only the task's numbers, each at most once, and equals the target.

use crate::puzzle::Puzzle;
use drmas_plugin_api::{config_table, EpisodeRecord, PluginError, PluginResult, Reward};

config_table! {
    /// The config table of a `[[rewards]]` entry that names `countdown/exact`.
    pub struct ExactConfig {
        /// the score of a valid expression that misses the target
        pub valid_score: f32 = 0.0,
    }
}

pub struct Exact {
    valid_score: f32,
}

impl Exact {
    pub fn new(config: ExactConfig) -> PluginResult<Self> {
        // Checked here, so a bad value fails `drmas check` rather than training.
        if !(0.0..=1.0).contains(&config.valid_score) {
            return Err(PluginError::config(format!(
                "valid_score must be between 0 and 1, not {}",
                config.valid_score
            )));
        }
        Ok(Self {
            valid_score: config.valid_score,
        })
    }
}

impl Reward for Exact {
    fn score(&self, episode: &EpisodeRecord) -> PluginResult<f32> {
        let puzzle = Puzzle::from_task(&episode.task).map_err(PluginError::input)?;
        let Some(answer) = &episode.final_answer else {
            return Ok(0.0);
        };
        // `(25 - 8) * 3 - 3 = 48`: the expression is what counts, not the claim.
        let expression = answer.split('=').next().unwrap_or_default();
        Ok(match puzzle.evaluate(expression) {
            Ok(value) if puzzle.is_target(value) => 1.0,
            Ok(_) => self.valid_score,
            Err(_) => 0.0,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use drmas_plugin_api::{parse_config, Task};

    fn exact(config: &str) -> PluginResult<Exact> {
        Exact::new(parse_config(config)?)
    }

    fn score(config: &str, answer: Option<&str>) -> f32 {
        let mut task = Task::default();
        let puzzle = Puzzle {
            numbers: vec![3, 5, 8, 25],
            target: 48,
        };
        puzzle.write_meta(&mut task);
        let episode = EpisodeRecord {
            task,
            final_answer: answer.map(str::to_string),
            ..EpisodeRecord::default()
        };
        exact(config).unwrap().score(&episode).unwrap()
    }

    #[test]
    fn only_a_valid_expression_equal_to_the_target_scores_one() {
        assert_eq!(score("", Some("25 + 3")), 0.0);
        assert_eq!(score("", Some("(8 + 3 * 5) + 25")), 1.0);
        assert_eq!(score("", Some("8 + 3 * 5 + 25 = 48")), 1.0);
        // 48, but 8 is used twice.
        assert_eq!(score("", Some("8 * 5 + 8")), 0.0);
        assert_eq!(score("", Some("48")), 0.0);
        assert_eq!(score("", None), 0.0);
        assert_eq!(score("valid_score = 0.1", Some("25 + 3")), 0.1);
        assert_eq!(score("valid_score = 0.1", Some("25 + 7")), 0.0);
    }

    #[test]
    fn a_score_outside_zero_to_one_is_refused() {
        let err = exact("valid_score = 2.0").err().unwrap();
        assert_eq!(err.message, "valid_score must be between 0 and 1, not 2");
    }
}
