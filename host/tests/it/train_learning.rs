//! The trainer learns: on a tiny random model, a reward that pays for one target token
//! rises from its starting rate (a token of about 3 % probability) to > 0.9 success within a bounded number of seeded steps,
//! with norms/grpo and norms/drmas, and two agents on their own models each learn their
//! own target from one shared team reward.

use crate::common;

use common::train::{Setup, metrics, quiet, temp_run};

/// Steps until the success rate of a step first exceeds 0.9, or None.
fn steps_to_learn(setup: &Setup) -> (Option<usize>, Vec<serde_json::Value>) {
    let (_dir, run) = temp_run();
    let mut trainer = setup.trainer(&run, quiet()).unwrap();
    let summary = trainer.run().unwrap();
    assert!(!summary.stopped_early);
    let lines = metrics(&run);
    let first = lines
        .iter()
        .position(|l| l["success_rate"].as_f64().unwrap() > 0.9);
    (first, lines)
}

fn assert_learns(normalizer: &'static str) {
    let setup = Setup::new(normalizer);
    let (first, lines) = steps_to_learn(&setup);
    let rates: Vec<f64> = lines
        .iter()
        .map(|l| l["success_rate"].as_f64().unwrap())
        .collect();
    // The target's starting probability is about 3 %.
    assert!(rates[0] < 0.15, "{normalizer}: {rates:?}");
    assert!(first.is_some(), "{normalizer} never passed 0.9: {rates:?}");
    // And it stays learnt.
    assert!(rates.last().unwrap() > &0.9, "{normalizer}: {rates:?}");
    assert_eq!(lines.len(), setup.trainer.steps as usize);
}

#[test]
fn one_target_token_is_learnt_with_grpo() {
    assert_learns("norms/grpo");
}

#[test]
fn one_target_token_is_learnt_with_drmas() {
    assert_learns("norms/drmas");
}

#[test]
fn two_agents_each_learn_their_own_target() {
    let mut setup = Setup::new("norms/drmas");
    // Each agent pays half of the team reward; the episode succeeds when both hit.
    let q = setup.questions.clone();
    setup.agents = vec![
        (
            "first",
            "lm-a",
            common::train::pick_target("first", &q, 0.1),
        ),
        (
            "second",
            "lm-b",
            common::train::pick_target("second", &q, 0.1),
        ),
    ];
    setup.models = vec![("lm-a", 0.005), ("lm-b", 0.005)];
    setup.trainer.steps = 30;
    let (first, lines) = steps_to_learn(&setup);
    let rates: Vec<f64> = lines
        .iter()
        .map(|l| l["success_rate"].as_f64().unwrap())
        .collect();
    assert!(first.is_some(), "never passed 0.9: {rates:?}");
    let last = lines.last().unwrap();
    // Both agents' samples are there, on their own models, with their own gradients.
    for (agent, model) in [("first", "lm-a"), ("second", "lm-b")] {
        let a = &last["agents"][agent];
        assert_eq!(a["model"], model);
        assert_eq!(a["samples"], 32);
        assert!(a["grad_norm"].as_f64().unwrap().is_finite());
    }
}
