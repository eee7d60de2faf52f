//! `countdown`: the Countdown numbers game as a drmas benchmark. Given a few numbers
//! and a target, reach the target with `+ - * /` using each number at most once.
//!
//! - `countdown/game` (environment): reads each task's puzzle and offers a
//!   `calculator` tool that computes expressions exactly over the task's numbers, with
//!   a per-episode budget of calls;
//! - `countdown/player` (agent): shows the puzzle and tools, calls the calculator with
//!   `<calc>expr</calc>` and answers with `<answer>expr</answer>`;
//! - `countdown/exact` (reward): 1 when the answer is a valid expression equal to the
//!   target.
//!
//! Build it with `cargo build --release`, copy `target/release/libcountdown.so` into a
//! plugin folder, and run `drmas eval examples/countdown/experiment.toml` (see the
//! README).

mod exact;
mod expr;
mod game;
mod player;
mod puzzle;
mod rational;
#[cfg(test)]
mod tasks;

use drmas_plugin_api::{export_plugin, ConfigKey, PluginSpec};

fn plugin() -> PluginSpec {
    PluginSpec::new("countdown", env!("CARGO_PKG_VERSION"))
        .environment(
            "game",
            "Countdown puzzles with an exact `calculator` tool",
            game::Game::from_config,
        )
        .config_keys([ConfigKey::optional(
            "max_calls",
            "integer",
            &game::default_max_calls().to_string(),
            "calculator calls per episode; the call after the last ends the episode",
        )])
        .agent(
            "player",
            "plays Countdown with <calc> and <answer> tags",
            player::Player::from_config,
        )
        .config_keys([
            // Defaults as TOML text: a quoted string (Debug quoting is TOML's here).
            ConfigKey::optional(
                "system_prompt",
                "string",
                &format!("{:?}", player::default_system_prompt()),
                "the system message of every turn",
            ),
            ConfigKey::optional(
                "tool",
                "string",
                &format!("{:?}", player::default_tool()),
                "the environment's calculator tool, which <calc> calls",
            ),
        ])
        .reward(
            "exact",
            "1 when the answer uses the given numbers and equals the target",
            exact::Exact::from_config,
        )
        .config_keys([ConfigKey::optional(
            "valid_score",
            "float",
            "0.0",
            "the score of a valid expression that misses the target",
        )])
}

export_plugin!(plugin);
