//! `countdown/game`: the environment. It reads each task's puzzle, offers a `calculator`
//! tool, and keeps per episode how many calls are left.
//!
//! One `Game` serves every episode of a run at once, so per-episode state lives in a
//! map keyed by the episode id: created in `start_episode`, removed in `end_episode`
//! (which the host sends exactly once per started episode, however it ended).

use crate::puzzle::Puzzle;
use drmas_plugin_api::{
    config_table, Environment, EpisodeEnd, EpisodeId, EpisodeStart, PluginError, PluginResult,
    Task, ToolCall, ToolContext, ToolResult, ToolSpec,
};
use std::{
    collections::{hash_map::Entry, HashMap},
    sync::{Mutex, MutexGuard},
};

pub const CALCULATOR: &str = "calculator";

config_table! {
    /// The `[environment.config]` table of `countdown/game`.
    pub struct GameConfig {
        /// calculator calls per episode; the call after the last ends the episode
        pub max_calls: u32 = 4,
    }
}

/// What one running episode has used.
struct EpisodeState {
    puzzle: Puzzle,
    calls: u32,
}

pub struct Game {
    max_calls: u32,
    episodes: Mutex<HashMap<EpisodeId, EpisodeState>>,
}

impl Game {
    pub fn new(config: GameConfig) -> PluginResult<Self> {
        Ok(Self {
            max_calls: config.max_calls,
            episodes: Mutex::default(),
        })
    }

    fn episodes(&self) -> MutexGuard<'_, HashMap<EpisodeId, EpisodeState>> {
        // A panic while the lock was held left the map consistent (every update is a
        // single insert, remove or increment), so a poisoned lock is still usable.
        self.episodes.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Evaluates one calculation against the episode's numbers. A model's mistake is
    /// the tool's answer (the model reads it and may try again), not a plugin error.
    fn calculate(&self, state: &mut EpisodeState, input: &str) -> ToolResult {
        if state.calls >= self.max_calls {
            return ToolResult {
                output: format!(
                    "no calculator calls left (the limit is {}); the game ends without an answer",
                    self.max_calls
                ),
                done: true,
                ..ToolResult::default()
            };
        }
        state.calls += 1;
        let left = match self.max_calls - state.calls {
            1 => "1 call left".to_string(),
            n => format!("{n} calls left"),
        };
        let result = match state.puzzle.evaluate(input) {
            Ok(value) => format!("{} = {value}", input.trim()),
            Err(mistake) => format!("error: {mistake}"),
        };
        ToolResult::output(format!("{result} ({left})"))
    }
}

impl Environment for Game {
    /// Checks that the task is a puzzle and puts it in `meta`, so the agent and the
    /// reward read the same numbers whether the data had them in `meta` or the question.
    fn prepare(&self, task: &Task) -> PluginResult<Task> {
        let puzzle = Puzzle::from_task(task).map_err(PluginError::input)?;
        let mut task = task.clone();
        puzzle.write_meta(&mut task);
        Ok(task)
    }

    fn tools(&self) -> Vec<ToolSpec> {
        vec![ToolSpec::new(
            CALCULATOR,
            "computes an expression exactly, using only the task's numbers, each at most once",
        )
        .with_input_format(
            "an arithmetic expression with + - * / and parentheses, e.g. (25 - 8) * 3",
        )]
    }

    fn start_episode(&self, start: &EpisodeStart) -> PluginResult<()> {
        let puzzle = Puzzle::from_task(&start.task).map_err(PluginError::input)?;
        match self.episodes().entry(start.episode) {
            Entry::Occupied(_) => Err(PluginError::input(format!(
                "episode {} was started twice",
                start.episode
            ))),
            Entry::Vacant(slot) => {
                slot.insert(EpisodeState { puzzle, calls: 0 });
                Ok(())
            }
        }
    }

    fn call_tool(&self, context: &ToolContext, call: &ToolCall) -> PluginResult<ToolResult> {
        if call.name != CALCULATOR {
            return Err(PluginError::input(format!(
                "unknown tool `{}` (this environment offers `{CALCULATOR}`)",
                call.name
            )));
        }
        let mut episodes = self.episodes();
        let state = episodes.get_mut(&context.episode).ok_or_else(|| {
            PluginError::input(format!("episode {} is not running", context.episode))
        })?;
        Ok(self.calculate(state, &call.input))
    }

    fn end_episode(&self, end: &EpisodeEnd) -> PluginResult<()> {
        match self.episodes().remove(&end.episode) {
            Some(_) => Ok(()),
            None => Err(PluginError::input(format!(
                "episode {} ended but was not running",
                end.episode
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn game(max_calls: u32) -> Game {
        Game::new(GameConfig { max_calls }).unwrap()
    }

    fn task() -> Task {
        let text = "Use 3, 5, 8 and 25 to reach the target 48.";
        Game::new(GameConfig::default())
            .unwrap()
            .prepare(&Task {
                id: "t1".into(),
                question: text.into(),
                ..Task::default()
            })
            .unwrap()
    }

    fn start(game: &Game, episode: EpisodeId) {
        let start = EpisodeStart {
            episode,
            task: task(),
            traj: 0,
        };
        game.start_episode(&start).unwrap();
    }

    fn calc(game: &Game, episode: EpisodeId, input: &str) -> PluginResult<ToolResult> {
        let context = ToolContext {
            episode,
            task: task(),
            ..ToolContext::default()
        };
        let call = ToolCall {
            name: CALCULATOR.into(),
            input: input.into(),
        };
        game.call_tool(&context, &call)
    }

    fn end(game: &Game, episode: EpisodeId) -> PluginResult<()> {
        game.end_episode(&EpisodeEnd {
            episode,
            ..EpisodeEnd::default()
        })
    }

    #[test]
    fn prepare_puts_the_puzzle_in_meta() {
        let task = task();
        assert_eq!(
            task.meta["numbers"],
            drmas_plugin_api::serde_json::json!([3, 5, 8, 25])
        );
        assert_eq!(task.meta["target"], 48);
        let err = game(4).prepare(&Task::default()).unwrap_err();
        assert!(err.message.starts_with("task `` has no `numbers`"), "{err}");
    }

    #[test]
    fn the_calculator_answers_with_the_value_or_the_mistake() {
        let g = game(4);
        start(&g, 1);
        let out = calc(&g, 1, " (25 - 8) * 3 ").unwrap();
        assert_eq!(out, ToolResult::output("(25 - 8) * 3 = 51 (3 calls left)"));
        let out = calc(&g, 1, "25 / 3").unwrap();
        assert_eq!(out.output, "25 / 3 = 25/3 (2 calls left)");
        let out = calc(&g, 1, "25 * 25").unwrap();
        assert_eq!(
            out.output,
            "error: 25 is used 2 times but given 1 (1 call left)"
        );
        let err = g
            .call_tool(
                &ToolContext {
                    episode: 1,
                    ..ToolContext::default()
                },
                &ToolCall {
                    name: "search".into(),
                    input: "x".into(),
                },
            )
            .unwrap_err();
        assert_eq!(
            err.message,
            "unknown tool `search` (this environment offers `calculator`)"
        );
    }

    #[test]
    fn the_call_after_the_last_allowed_ends_the_episode() {
        let g = game(1);
        start(&g, 1);
        assert!(!calc(&g, 1, "3 + 5").unwrap().done);
        let over = calc(&g, 1, "3 + 5").unwrap();
        assert!(over.done);
        assert_eq!(
            over.output,
            "no calculator calls left (the limit is 1); the game ends without an answer"
        );
    }

    #[test]
    fn episodes_keep_separate_counts_until_they_end() {
        let g = game(2);
        start(&g, 7);
        start(&g, 8);
        calc(&g, 7, "3 + 5").unwrap();
        calc(&g, 7, "3 + 5").unwrap();
        assert!(calc(&g, 7, "3 + 5").unwrap().done);
        // Episode 8 has used none of its calls.
        assert_eq!(
            calc(&g, 8, "8 * 3").unwrap().output,
            "8 * 3 = 24 (1 call left)"
        );

        end(&g, 7).unwrap();
        assert_eq!(
            calc(&g, 7, "3").unwrap_err().message,
            "episode 7 is not running"
        );
        assert_eq!(
            end(&g, 7).unwrap_err().message,
            "episode 7 ended but was not running"
        );
        // Ending 7 left 8 alone; a new episode starts with a fresh count.
        assert_eq!(calc(&g, 8, "8").unwrap().output, "8 = 8 (0 calls left)");
        start(&g, 9);
        assert_eq!(calc(&g, 9, "8").unwrap().output, "8 = 8 (1 call left)");
        let twice = g.start_episode(&EpisodeStart {
            episode: 9,
            task: task(),
            traj: 1,
        });
        assert_eq!(twice.unwrap_err().message, "episode 9 was started twice");
    }
}
