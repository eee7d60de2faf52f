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

use drmas_plugin_api::{export_plugin, PluginSpec};

/// Each component's config table is a `config_table!` struct; the `*_with` builders
/// parse the table into it and describe its keys, so what `drmas plugins inspect`
/// lists and `drmas check` checks is what the component receives.
fn plugin() -> PluginSpec {
    PluginSpec::new("countdown", env!("CARGO_PKG_VERSION"))
        .environment_with(
            "game",
            "Countdown puzzles with an exact `calculator` tool",
            game::Game::new,
        )
        .agent_with(
            "player",
            "plays Countdown with <calc> and <answer> tags",
            player::Player::new,
        )
        .reward_with(
            "exact",
            "1 when the answer uses the given numbers and equals the target",
            exact::Exact::new,
        )
}

export_plugin!(plugin);

#[cfg(test)]
mod tests {
    use super::*;
    use drmas_plugin_api::{check_manifest_config_keys, ComponentFactory};

    #[test]
    fn every_component_is_made_from_the_defaults_it_describes() {
        let spec = plugin();
        check_manifest_config_keys(&spec.manifest()).unwrap();
        for entry in &spec.entries {
            // The table a user gets by copying every described default.
            let keys = entry
                .config
                .as_ref()
                .expect("every component describes its keys");
            let table: String = keys
                .iter()
                .map(|k| format!("{} = {}\n", k.name, k.default.as_deref().unwrap()))
                .collect();
            let made = match &entry.factory {
                ComponentFactory::Agent(make) => make(&table).map(drop),
                ComponentFactory::Environment(make) => make(&table).map(drop),
                ComponentFactory::Reward(make) => make(&table).map(drop),
                ComponentFactory::Normalizer(make) => make(&table).map(drop),
            };
            if let Err(e) = made {
                panic!(
                    "countdown/{} refused its own defaults ({e}):\n{table}",
                    entry.name
                );
            }
        }
    }
}
