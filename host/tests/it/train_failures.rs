//! A reward that fails on one task fails that task's episodes only: the trainer drops
//! their samples, counts them per component in the metrics line, and stops when a
//! step's failed fraction is over `max_failed_episodes`.

use crate::common;

use common::train::{Setup, metrics, quiet, temp_run};
use drmas::plugin::{ComponentId, RewardHandle};
use drmas::train::Trainer;
use drmas_plugin_api::{ComponentKind, EpisodeRecord, PluginResult, Reward};
use std::path::Path;

/// NaN on question `q1`, 0 elsewhere.
struct NanOnQ1;

impl Reward for NanOnQ1 {
    fn score(&self, episode: &EpisodeRecord) -> PluginResult<f32> {
        Ok(if episode.task.question == "q1" {
            f32::NAN
        } else {
            0.0
        })
    }
}

/// Two steps of 4 tasks × 4 episodes: one epoch of the 8 tasks, so q1's group is in
/// exactly one step.
fn trainer(run: &Path, max_failed: f64) -> Trainer {
    let mut s = Setup::new("norms/grpo");
    s.trainer.steps = 2;
    s.trainer.prompts_per_step = 4;
    s.trainer.group_size = 4;
    let mut team = s.team();
    team.rewards = vec![drmas::rollout::RewardSlot::team(
        RewardHandle::new(
            ComponentId {
                kind: ComponentKind::Reward,
                name: "test/nan-on-q1".into(),
                version: "0".into(),
                source: "test".into(),
            },
            Box::new(NanOnQ1),
        ),
        1.0,
    )];
    team.options.max_failed_episodes = max_failed;
    s.trainer_with(run, team, quiet()).unwrap()
}

/// The failure of an episode of task t1: which reward, which episode (its id, which
/// differs from run to run), which task, and why the episode stopped.
fn nan_error(text: &str) -> bool {
    let Some(rest) = text.strip_prefix(
        "reward `test/nan-on-q1` (test 0, test) returned NaN as the score of episode ",
    ) else {
        return false;
    };
    let Some((episode, rest)) = rest.split_once(' ') else {
        return false;
    };
    episode.parse::<u64>().is_ok()
        && rest == "(task tiny/t1); a score must be finite, so the episode failed"
}

#[test]
fn failed_episodes_are_dropped_and_counted_per_component() {
    let (_dir, run) = temp_run();
    let summary = trainer(&run, 0.5).run().unwrap();
    assert_eq!(summary.steps_done, 2);
    let lines = metrics(&run);
    let failed: Vec<u64> = lines
        .iter()
        .map(|l| l["failed_episodes"].as_u64().unwrap())
        .collect();
    assert!(failed == [4, 0] || failed == [0, 4], "{failed:?}");
    for l in &lines {
        let n = l["failed_episodes"].as_u64().unwrap();
        // Only the completed episodes count (and gave samples).
        assert_eq!(l["episodes"].as_u64().unwrap(), 16 - n, "{l}");
        if n == 0 {
            assert_eq!(l["failures"], serde_json::json!({}));
        } else {
            let f = &l["failures"]["reward test/nan-on-q1"];
            assert_eq!(f["episodes"], 4, "{l}");
            assert!(
                f["first_task"].as_str().unwrap().ends_with(":tiny/t1"),
                "{l}"
            );
            assert!(nan_error(f["first_error"].as_str().unwrap()), "{l}");
        }
    }
}

#[test]
fn a_step_over_the_failure_limit_stops_the_run() {
    let (_dir, run) = temp_run();
    let err = trainer(&run, 0.05).run().unwrap_err().to_string();
    // No metrics file when the first step stopped.
    let done = if run.join("metrics.jsonl").exists() {
        metrics(&run).len()
    } else {
        0
    };
    assert!(done < 2, "{err}");
    // What was kept is said last: the steps done are checkpointed.
    let (err, kept) = err.rsplit_once("; ").unwrap();
    if done == 0 {
        assert_eq!(kept, "no step was completed, so nothing is kept");
    } else {
        assert_eq!(
            kept,
            format!(
                "step 1 is kept in {} (fix the cause, then continue with --resume)",
                run.join("checkpoints/step-000001").display()
            )
        );
    }
    let prefix = format!("step {}: training stopped: ", done + 1);
    assert!(err.starts_with(&prefix), "{err}");
    // 16 episodes at 0.05: the first failure is over (others of the group that ended at
    // the same moment may be counted with it).
    assert!(
        err.contains(" of 16 episodes failed, more than [workflow] max_failed_episodes = 0.05 allows; reward test/nan-on-q1: "),
        "{err}"
    );
    let first = err
        .strip_suffix(')')
        .and_then(|e| e.split_once(":tiny/t1: "))
        .map(|(_, first)| first);
    assert!(first.is_some_and(nan_error), "{err}");
}
