//! The non-finite guard: a reward plugin that pays huge values makes a step's loss or
//! gradient non-finite; that model's update is skipped and logged, and the run goes on.
//! Too many skips in a row stop the run with a message and a checkpoint.

use crate::common;

use common::train::{Setup, metrics, quiet, temp_run};

fn huge_setup(scaled: Option<&str>) -> Setup {
    let mut s = Setup::new("norms/grpo-mean");
    s.trainer.steps = 4;
    s.trainer.prompts_per_step = 2;
    s.trainer.group_size = 4;
    s.reward_scale = 3e38;
    s.scaled_question = scaled.map(str::to_string);
    // Pays the first token's id: every group has different rewards; four tokens a
    // sample, so the token sum of advantages near 1e38 overflows float32.
    s.graded = true;
    s.max_new_tokens = 4;
    s
}

#[test]
fn a_huge_reward_skips_that_step_and_the_run_goes_on() {
    let s = huge_setup(Some("q1"));
    let (_dir, run) = temp_run();
    let mut t = s.trainer(&run, quiet()).unwrap();
    let summary = t.run().unwrap();
    assert_eq!(summary.steps_done, 4);
    let lines = metrics(&run);
    let skipped: Vec<bool> = lines
        .iter()
        .map(|l| l["models"]["lm"]["skipped"].as_bool().unwrap())
        .collect();
    assert!(skipped.iter().any(|&s| s), "{lines:?}");
    assert!(skipped.iter().any(|&s| !s), "{lines:?}");
}

#[test]
fn skips_in_a_row_stop_the_run_with_a_checkpoint() {
    let mut s = huge_setup(None);
    s.trainer.max_consecutive_skips = std::num::NonZeroU32::new(2).unwrap();
    let (_dir, run) = temp_run();
    let mut t = s.trainer(&run, quiet()).unwrap();
    let err = t.run().unwrap_err().to_string();
    let checkpoint = run.join("checkpoints/step-000002");
    assert_eq!(
        err,
        format!(
            "step 2: model `lm` skipped 2 updates in a row (non-finite loss or gradient); stopped. The last good state is in {}",
            checkpoint.display()
        )
    );
    assert!(checkpoint.join("trainer_state.json").is_file());
    assert_eq!(metrics(&run).len(), 2);
}

#[test]
fn advantages_that_are_not_finite_skip_the_step() {
    let mut s = Setup::new("test/nan");
    s.trainer.steps = 2;
    s.trainer.max_consecutive_skips = std::num::NonZeroU32::new(3).unwrap();
    let (_dir, run) = temp_run();
    let mut t = s.trainer(&run, quiet()).unwrap();
    let before = common::train::weights(&t.team().models["lm"].handle);
    t.run().unwrap();
    let lines = metrics(&run);
    assert_eq!(lines.len(), 2);
    for l in &lines {
        assert_eq!(l["models"]["lm"]["skipped"], true);
        assert_eq!(l["models"]["lm"]["optimizer_steps"], 0);
    }
    assert_eq!(lines[1]["models"]["lm"]["skipped_in_a_row"], 2);
    assert_eq!(
        common::train::weights(&t.team().models["lm"].handle),
        before
    );
}
